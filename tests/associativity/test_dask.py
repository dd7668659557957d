"""associative_scan on dask arrays, computed on a local distributed cluster.

Every case is checked against the sequential float64 fold of the same NumPy
data (``method='reference'``).  One cluster of two worker processes serves
the whole module, so the tasks, the monoids and the callables are pickled
and run in other processes, as in production.
"""

import numpy as np
import pytest

import propopt as pp

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

RTOL = 1e-10


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def linrec(x, y):
    """The linear recurrence as a plain callable on pairs of NumPy arrays."""
    return (x[0] * y[0], y[0] * x[1] + y[1])


def _affine(a1, b1, a2, b2):
    return a1 * a2, a2 * b1 + b2


# A user monoid (not a built-in, no array combine): it travels by value.
affine = pp.Monoid(_affine, identity=(1.0, 0.0), name="test_dask_affine")

FNS = {
    "add": pp.add,
    "linear_recurrence": pp.linear_recurrence,
    "matmul2x2": pp.matmul2x2,
    "callable": linrec,
}

# (shape, chunks, axis)
LAYOUTS = {
    "uneven": ((23,), ((5, 7, 11),), 0),
    "2d-axis1": ((6, 23), ((4, 2), (5, 7, 11)), 1),
    "2d-axis-2": ((23, 5), ((5, 7, 11), (3, 2)), -2),
    "single-chunk": ((17,), ((17,),), 0),
    "empty-chunk": ((12,), ((4, 0, 8),), 0),
    "length-0": ((0,), ((0,),), 0),
    "2d-length-0": ((3, 0), ((3,), (0,)), 1),
}


def arity(fn):
    return fn.arity if isinstance(fn, pp.Monoid) else 2


def draw(fn, shape, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.uniform(0.5, 1.0, shape) for _ in range(arity(fn)))


def scan_both(fn, xs, chunks, **kw):
    """(lazy dask result, reference result) for NumPy data ``xs``."""
    if not isinstance(fn, pp.Monoid) and kw.get("exclusive"):
        kw["identity"] = (1.0, 0.0)
    ref = pp.associative_scan(fn, xs, method="reference", **kw)
    lazy = pp.associative_scan(fn, tuple(da.from_array(x, chunks=chunks) for x in xs), **kw)
    return lazy, ref


def check(client, lazy, ref):
    assert isinstance(lazy, tuple)
    assert all(isinstance(v, da.Array) for v in lazy)
    got = client.compute(list(lazy), sync=True)
    for v, g, r in zip(lazy, got, ref):
        assert isinstance(g, np.ndarray)
        assert g.shape == r.shape == v.shape
        assert g.dtype == v.dtype == np.float64
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=0)


# Every layout in every direction for `add`, and in the plain direction for the
# other monoids (each direction compiles kernels of its own); -m slow runs all.
_CASES = [
    pytest.param(
        fn_name,
        layout,
        reverse,
        exclusive,
        id=f"{fn_name}-{layout}-{'rev' if reverse else 'fwd'}-{'excl' if exclusive else 'incl'}",
        marks=() if fn_name == "add" or not (reverse or exclusive) else pytest.mark.slow,
    )
    for fn_name in FNS
    for layout in LAYOUTS
    for reverse in (False, True)
    for exclusive in (False, True)
]


@pytest.mark.parametrize(("fn_name", "layout", "reverse", "exclusive"), _CASES)
def test_matches_reference(client, fn_name, layout, reverse, exclusive):
    fn = FNS[fn_name]
    shape, chunks, axis = LAYOUTS[layout]
    xs = draw(fn, shape)
    lazy, ref = scan_both(fn, xs, chunks, axis=axis, reverse=reverse, exclusive=exclusive)
    check(client, lazy, ref)


@pytest.mark.parametrize("exclusive", [False, True], ids=["incl", "excl"])
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
def test_user_monoid_with_compiled_kernels(client, reverse, exclusive):
    xs = draw(affine, (23,))
    # compile the kernels in this process first: the monoid must still pickle
    pp.associative_scan(affine, xs, method="tiled")
    lazy, ref = scan_both(affine, xs, (5, 7, 11), reverse=reverse, exclusive=exclusive)
    check(client, lazy, ref)


def test_leaves_with_different_chunks(client):
    xs = draw(pp.linear_recurrence, (4, 23))
    kw = {"axis": 1, "reverse": True}
    ref = pp.associative_scan(pp.linear_recurrence, xs, method="reference", **kw)
    a = da.from_array(xs[0], chunks=((2, 2), (5, 7, 11)))
    b = da.from_array(xs[1], chunks=((4,), (10, 13)))
    lazy = pp.associative_scan(pp.linear_recurrence, (a, b), **kw)
    assert lazy[1].chunks == a.chunks
    check(client, lazy, ref)


def test_callable_on_leaves_of_different_shapes(client):
    def fn(x, y):
        return {"a": x["a"] * y["a"], "b": y["a"][:, None] * x["b"] + y["b"]}

    rng = np.random.default_rng(1)
    xs = {"a": rng.uniform(0.5, 1, 23), "b": rng.uniform(0.5, 1, (23, 3))}
    ident = {"a": 1.0, "b": np.zeros((1, 3))}
    kw = {"exclusive": True, "identity": ident}
    ref = pp.associative_scan(fn, xs, method="reference", **kw)
    ds = {"a": da.from_array(xs["a"], chunks=5), "b": da.from_array(xs["b"], chunks=(7, 2))}
    lazy = pp.associative_scan(fn, ds, **kw)
    got = client.compute(lazy, sync=True)
    for k in ("a", "b"):
        assert lazy[k].chunks[0] == ds["a"].chunks[0]
        np.testing.assert_allclose(got[k], ref[k], rtol=RTOL, atol=0)


@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
def test_independent_of_chunk_size(client, reverse):
    xs = draw(pp.linear_recurrence, (3, 200), seed=2)
    results = []
    for chunks in ((3, 7), (1, 64)):
        ds = tuple(da.from_array(x, chunks=chunks) for x in xs)
        lazy = pp.associative_scan(pp.linear_recurrence, ds, axis=1, reverse=reverse)
        results.append(client.compute(list(lazy), sync=True))
    for u, v in zip(*results):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=0)


def test_is_lazy():
    calls = []

    def fn(x, y):
        calls.append(np.shape(x))
        return x + y

    x = da.ones(10, chunks=3)
    out = pp.associative_scan(fn, x)
    assert isinstance(out, da.Array)
    assert out.chunks == x.chunks
    # at most one call on empty arrays (to learn the dtype), none on data
    assert all(0 in s for s in calls)
    np.testing.assert_array_equal(out.compute(scheduler="sync"), np.arange(1.0, 11.0))


def test_slicing_the_result_culls(client):
    x = np.arange(40.0)
    out = pp.associative_scan(pp.add, da.from_array(x, chunks=6))
    np.testing.assert_allclose(client.compute(out[10:20], sync=True), np.cumsum(x)[10:20])


def test_device_cpu_refuses_dask():
    x = da.ones(10, chunks=3)
    with pytest.raises(ValueError, match=r"device='cpu', but the data \(elems\) is on 'dask'"):
        pp.associative_scan(pp.add, x, device="cpu")
    with pytest.raises(ValueError, match="method='generic' runs on device 'cpu' or 'cuda'"):
        pp.associative_scan(pp.add, x, method="generic")


def test_unknown_chunk_sizes_refused():
    from propopt import _kinds
    from propopt.associativity.scan import _dask
    from propopt.associativity.scan._plan import ScanPlan

    x = da.from_array(np.arange(10.0), chunks=3)
    y = x[x > 2]
    with pytest.raises(ValueError):
        pp.associative_scan(pp.add, y)
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        plan = ScanPlan(pp.add, pp.add.combine_leaves, [y], _kinds.DASK, 0, False, False)
        _dask.scan(plan, lambda *a: a[2])


@pytest.mark.parametrize("fn_name", ["affine", "callable"])
def test_segmented_scan_on_workers(client, fn_name):
    # the segmented monoid (its combine is generated) and a segmented callable
    # travel to the worker processes; segments cross the chunk edges 5 and 12
    fn = affine if fn_name == "affine" else linrec
    xs = draw(fn, (23,))
    starts = np.zeros(23, bool)
    starts[[0, 3, 12, 13]] = True
    kw = {"reverse": True, "reset": starts}
    lazy, ref = scan_both(fn, xs, (5, 7, 11), **kw)
    check(client, lazy, ref)
