"""The tree on a Dask LocalCluster (scattered once) and on CUDA (simulator, tiny N)."""

import numpy as np
import pytest

from propopt import direct_gravity
from propopt_case_studies.nbody import Octree, plummer_sphere
from propopt_case_studies.nbody.distributed import field_dask, scatter_tree

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    # workers are threads of this process (processes=False): tasks and the
    # scattered tree still go through the distributed scheduler, without
    # paying for JIT compilation in worker processes.
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    )
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def test_dask_equals_in_memory(client):
    pos, _, m = plummer_sphere(2000, seed=0)
    tree = Octree.build(pos, m, eps=0.01)
    t = np.random.default_rng(1).normal(size=(3001, 3))
    fut = scatter_tree(client, tree)
    # theta = 0: the exact sum, whatever the chunks
    a, p = field_dask(client, fut, t, chunk=700, theta=0.0, potential=True)
    a0, p0 = tree.field(t, theta=0.0, potential=True)
    np.testing.assert_allclose(a, a0, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(p, p0, rtol=1e-12)
    # theta > 0: target groups are formed inside each chunk, so the accepted
    # cells differ slightly from one call on all targets; both are as accurate
    for kw in (dict(theta=0.5), dict(theta=0.7, quadrupole=False)):
        a, p = field_dask(client, fut, t, chunk=700, **kw, potential=True)
        a1, _ = tree.field(t, **kw)
        e = np.linalg.norm(a - a0, axis=1) / np.linalg.norm(a0, axis=1)
        e1 = np.linalg.norm(a1 - a0, axis=1) / np.linalg.norm(a0, axis=1)
        assert np.median(e) < 1.5 * np.median(e1) + 1e-12 and np.median(e) < 1e-2
    a, p = field_dask(client, tree, np.zeros((0, 3)), potential=True)
    assert a.shape == (0, 3)
    with pytest.raises(ValueError, match="chunk=0: must be an int >= 1"):
        field_dask(client, fut, t, chunk=0)
    # switches refused here, before any task; potential=False gives pot None
    with pytest.raises(TypeError, match=r"^potential='no': must be True or False$"):
        field_dask(client, fut, t, potential="no")
    a, p = field_dask(client, fut, t[:50], chunk=20, theta=0.0, potential=False)
    assert p is None and np.array_equal(a, tree.field(t[:50], theta=0.0, potential=False)[0])


def test_cuda_walk_simulator():
    pytest.importorskip("numba.cuda")
    rng = np.random.default_rng(0)
    pos, m = rng.normal(size=(60, 3)), rng.uniform(size=60)
    tree = Octree.build(pos, m, eps=0.05, leaf_size=4)
    t = rng.normal(size=(20, 3))
    for theta, quad in ((0.0, True), (0.6, True), (0.6, False)):
        # one GPU thread per target = the CPU walk with groups of one target
        a, p = tree.field(theta=theta, quadrupole=quad, device="cuda", potential=True)
        a1, p1 = tree.field(theta=theta, quadrupole=quad, group_size=1, potential=True)
        np.testing.assert_allclose(a, a1, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(p, p1, rtol=1e-10)
        a, p = tree.field(t, theta=theta, quadrupole=quad, device="cuda", potential=True)
        a1, p1 = tree.field(t, theta=theta, quadrupole=quad, group_size=1, potential=True)
        np.testing.assert_allclose(a, a1, rtol=1e-10, atol=1e-13)
    a0, p0 = tree.field(theta=0.0, potential=True)
    ad, pd = direct_gravity(pos, m, eps=0.05, device="cuda", potential=True)
    np.testing.assert_allclose(ad, a0, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pd, p0, rtol=1e-9)


def test_each_scatter_has_its_own_key(client):
    # a key shared by two scatters of one tree let the release of the first drop
    # the second ("lost dependencies" about once in 100-500 back-to-back calls)
    tree = Octree.build(np.random.default_rng(2).normal(size=(50, 3)))
    f1, f2 = scatter_tree(client, tree), scatter_tree(client, tree)
    assert f1.key != f2.key


def test_back_to_back_calls_never_lose_the_tree(client):
    # 500 calls with the same tree, alternating no targets and some: none may fail
    pos, _, m = plummer_sphere(200, seed=0)
    tree = Octree.build(pos, m, eps=0.01)
    t = np.random.default_rng(1).normal(size=(50, 3))
    a0, p0 = tree.field(t, theta=0.0, potential=True)
    empty = np.zeros((0, 3))
    for i in range(500):
        if i % 2:
            a, p = field_dask(client, tree, empty, chunk=25, potential=True)
            assert a.shape == (0, 3) and p.shape == (0,)
        else:
            a, p = field_dask(client, tree, t, chunk=25, theta=0.0, potential=True)
            assert np.array_equal(a, a0) and np.array_equal(p, p0)


def test_field_on_dask_returns_the_pair_of_every_verb(client):
    from propopt_case_studies.nbody import field
    from tests.oracles import gravity

    pos, _, m = plummer_sphere(1000, seed=3)
    t = np.random.default_rng(4).normal(size=(700, 3))
    a0, p0 = gravity(pos, m, 1e-4, t, 1e-4)
    kw = dict(eps=0.01, targets=t, device="dask", client=client, chunk=300, theta=0.0)
    a, p = field(pos, m, **kw)
    assert p is None
    np.testing.assert_allclose(a, a0, rtol=1e-10, atol=1e-12 * np.abs(a0).max())
    a, p = field(pos, m, potential=True, **kw)
    np.testing.assert_allclose(p, p0, rtol=1e-10)
    a1, p1 = field(pos, m, eps=0.01, targets=t, device="dask", client=client, potential=True)
    np.testing.assert_allclose(p1, p0, rtol=1e-3)
    assert np.median(np.linalg.norm(a1 - a0, axis=1) / np.linalg.norm(a0, axis=1)) < 1e-3
    with pytest.raises(ValueError, match=r"^device='dask' splits targets= into chunks"):
        field(pos, m, device="dask", client=client)


def test_field_on_cuda_simulator():
    pytest.importorskip("numba.cuda")
    from propopt_case_studies.nbody import field

    rng = np.random.default_rng(5)
    pos, m = rng.normal(size=(60, 3)), rng.uniform(size=60)
    a, p = field(pos, m, eps=0.05, leaf_size=4, theta=0.6, device="cuda")
    assert p is None
    tree = Octree.build(pos, m, eps=0.05, leaf_size=4)
    a1, _ = tree.field(theta=0.6, group_size=1, precision="float64")  # a GPU thread a target
    np.testing.assert_allclose(a, a1, rtol=1e-10, atol=1e-13)
    a, p = field(pos, m, eps=0.05, method="direct", device="cuda", potential=True)
    a0, p0 = direct_gravity(pos, m, eps=0.05, potential=True)
    np.testing.assert_allclose(a, a0, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(p, p0, rtol=1e-9)


def test_a_client_that_is_not_a_dask_client_is_a_type_error():
    from propopt_case_studies.nbody import field

    x, _, m = plummer_sphere(20, seed=1)
    tree = Octree.build(x, m)
    for call in (
        lambda: field_dask(object(), tree, x),
        lambda: field_dask(object(), tree, np.zeros((0, 3))),
        lambda: scatter_tree(object(), tree),
        lambda: field(x, m, targets=x, client=object()),
    ):
        with pytest.raises(TypeError, match=r"^client= is a object, which has no scatter, "
                           r"submit, gather; pass a distributed.Client") as info:  # fmt: skip
            call()
        assert "\n" not in str(info.value)
