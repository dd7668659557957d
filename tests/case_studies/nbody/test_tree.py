"""Barnes-Hut tree: structure, exactness at theta = 0, accuracy, edge cases, errors."""

import numba
import numpy as np
import pytest
from hypothesis import given, strategies as st

import propopt as pp
from propopt_case_studies.nbody import Octree, barnes_hut, nbody_naive, plummer_sphere
from tests.oracles import gravity as direct_reference, unsoftened_pull

# theta = 0 opens every node: the walk is the direct sum in another order.
# float64 sums of <= 2000 terms of mixed sign: 1e-10 relative is ~1e5 ulps of slack.
EXACT_RTOL = 1e-10


def _relerr(a, b):
    return np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def sphere():
    pos, _, m = plummer_sphere(3000, seed=3)
    return pos, m


def test_structure_and_moments(sphere):
    pos, m = sphere
    tree = Octree.build(pos, m, eps=0.01, leaf_size=8)
    tree.check()
    assert sorted(tree.order.tolist()) == list(range(len(pos)))
    assert tree.num_nodes < 2 * len(pos)
    # the tree holds positions from its origin in units of 2**length_exp, masses in 2**mass_exp
    unit_pos = np.ldexp(pos - tree.origin, -tree.length_exp)
    root = pp.moments(unit_pos, np.ldexp(m, -tree.mass_exp))
    np.testing.assert_allclose(tree.rows[0, :10], root.row[:10], rtol=1e-9, atol=1e-12)
    leaves = np.flatnonzero(tree.leaf)
    assert (tree.end[leaves] - tree.start[leaves]).max() <= 8


@pytest.mark.parametrize("n", [1, 2, 3, 17, 300])
@pytest.mark.parametrize("eps", [0.0, 0.05])
def test_theta_zero_is_exact(n, eps):
    rng = np.random.default_rng(n)
    pos, m = rng.normal(size=(n, 3)), rng.uniform(0.5, 1.5, n)
    a, p = barnes_hut(pos, m, eps=eps, theta=0.0, leaf_size=4, group_size=8, potential=True)
    a0, p0 = pp.direct_gravity(pos, m, eps=eps, potential=True)
    np.testing.assert_allclose(a, a0, rtol=EXACT_RTOL, atol=1e-12)
    np.testing.assert_allclose(p, p0, rtol=EXACT_RTOL, atol=1e-12)
    ar, pr = Octree.build(pos, m, eps=eps).field(theta=0.5, method="direct", potential=True)
    np.testing.assert_allclose(ar, a0, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pr, p0, rtol=1e-12, atol=1e-12)


@given(
    st.integers(0, 60),
    st.integers(1, 9),
    st.integers(1, 9),
    st.integers(0, 2**31),
)
def test_theta_zero_any_layout(n, leaf, group, seed):
    rng = np.random.default_rng(seed)
    # a few duplicated points: coincident bodies in one leaf
    pos = rng.integers(-3, 4, size=(n, 3)).astype(float) * rng.choice([1.0, 1e-7])
    m = rng.uniform(0, 2, n)
    a, p = barnes_hut(pos, m, eps=0.1, theta=0.0, leaf_size=leaf, group_size=group, potential=True)
    a0, p0 = direct_reference(pos, m, np.full(n, 0.01))
    np.testing.assert_allclose(a, a0, rtol=EXACT_RTOL, atol=1e-9)
    np.testing.assert_allclose(p, p0, rtol=EXACT_RTOL, atol=1e-9)


# Expected error bounds at N = 3000 (measured medians are ~3x smaller).
@pytest.mark.parametrize(
    ("theta", "quad", "median", "p99"),
    [
        (0.3, False, 1e-3, 5e-3),
        (0.7, False, 6e-3, 3e-2),
        (0.5, True, 1e-3, 5e-3),
        (0.7, True, 3e-3, 2e-2),
    ],
)
def test_accuracy_against_direct(sphere, theta, quad, median, p99):
    pos, m = sphere
    a, p = barnes_hut(pos, m, eps=0.01, theta=theta, quadrupole=quad, potential=True)
    a0, p0 = pp.direct_gravity(pos, m, eps=0.01, potential=True)
    e = _relerr(a, a0)
    assert np.median(e) < median and np.quantile(e, 0.99) < p99
    assert np.median(np.abs(p - p0) / np.abs(p0)) < median


def test_quadrupole_beats_monopole(sphere):
    pos, m = sphere
    a0, _ = pp.direct_gravity(pos, m, eps=0.01)
    e1 = np.median(_relerr(barnes_hut(pos, m, eps=0.01, theta=0.7, quadrupole=False)[0], a0))
    e2 = np.median(_relerr(barnes_hut(pos, m, eps=0.01, theta=0.7, quadrupole=True)[0], a0))
    assert e2 < 0.6 * e1


def test_separate_targets_and_reuse(sphere):
    pos, m = sphere
    tree = Octree.build(pos, m, eps=0.01)
    for seed in range(3):
        t = np.random.default_rng(seed).normal(size=(500, 3)) * 2
        a, p = tree.field(t, theta=0.5, potential=True)
        a0, p0 = pp.direct_gravity(pos, m, eps=0.01, targets=t, potential=True)
        assert np.median(_relerr(a, a0)) < 1e-3
        a, p = tree.field(t, theta=0.0, potential=True)
        np.testing.assert_allclose(a, a0, rtol=EXACT_RTOL, atol=1e-12)
        np.testing.assert_allclose(p, p0, rtol=EXACT_RTOL)


def test_per_body_softening():
    rng = np.random.default_rng(1)
    pos, m, e = rng.normal(size=(400, 3)), rng.uniform(size=400), rng.uniform(0, 0.2, 400)
    tree = Octree.build(pos, m, eps=e)
    a, p = tree.field(theta=0.0, potential=True)
    a0, p0 = direct_reference(pos, m, e * e)
    np.testing.assert_allclose(a, a0, rtol=EXACT_RTOL, atol=1e-12)
    np.testing.assert_allclose(p, p0, rtol=EXACT_RTOL)
    a, _ = tree.field(theta=0.5)
    assert np.median(_relerr(a, a0)) < 2e-3
    t = rng.normal(size=(50, 3))
    a, p = tree.field(t, target_eps=0.1, theta=0.0, potential=True)
    a0, p0 = direct_reference(pos, m, e * e, t, np.full(50, 0.01))
    np.testing.assert_allclose(a, a0, rtol=EXACT_RTOL, atol=1e-12)


def test_coincident_bodies_one_leaf():
    pos = np.zeros((5000, 3))
    pos[:10] = np.random.default_rng(0).normal(size=(10, 3))
    tree = Octree.build(pos, np.ones(5000), eps=0.1, leaf_size=4)
    tree.check()
    assert tree.num_nodes < 40 and tree.level.max() <= 21
    a, p = tree.field(theta=0.7, potential=True)
    a0, _p0 = pp.direct_gravity(pos, np.ones(5000), eps=0.1)
    assert np.median(_relerr(a, a0)) < 1e-3
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(p))


def test_tiny_and_empty():
    a, p = barnes_hut(np.zeros((0, 3)), potential=True)
    assert a.shape == (0, 3) and p.shape == (0,)
    a, p = barnes_hut(np.ones((1, 3)), [2.0], eps=0.5, potential=True)
    assert a.tolist() == [[0.0, 0.0, 0.0]] and p.tolist() == [0.0]
    a, p = barnes_hut([[0.0, 0, 0], [2.0, 0, 0]], [1.0, 3.0], potential=True)
    np.testing.assert_allclose(a, [[0.75, 0, 0], [-0.25, 0, 0]])
    np.testing.assert_allclose(p, [-1.5, -0.5])
    a, p = Octree.build(np.zeros((0, 3))).field(np.ones((4, 3)), potential=True)
    assert (a == 0).all() and (p == 0).all()
    a, p = Octree.build(np.ones((4, 3))).field(np.zeros((0, 3)), potential=True)
    assert a.shape == (0, 3)
    # two coincident bodies, no softening: no direction, no force (as direct_gravity)
    a, p = barnes_hut(np.ones((2, 3)), potential=True)
    assert (a == 0).all()


def test_zero_masses(sphere):
    pos, m = sphere
    m = m.copy()
    m[::2] = 0.0
    a, p = barnes_hut(pos, m, eps=0.01, theta=0.5, potential=True)
    a0, _p0 = pp.direct_gravity(pos, m, eps=0.01)
    assert np.median(_relerr(a, a0)) < 1e-3
    a, p = barnes_hut(pos, np.zeros(len(pos)), theta=0.5, potential=True)
    assert (a == 0).all() and (p == 0).all()


def test_dtypes(sphere):
    pos, m = sphere
    a64, _ = barnes_hut(pos, m, eps=0.01)
    a32, p32 = barnes_hut(pos.astype(np.float32), m.astype(np.float32), eps=0.01, potential=True)
    assert a32.dtype == np.float32 and p32.dtype == np.float32
    amix, _ = barnes_hut(pos.astype(np.float32), m, eps=0.01)
    assert amix.dtype == np.float64
    # float32 inputs are the same numbers computed in float64: only rounding of the inputs
    assert np.median(_relerr(a32.astype(float), a64)) < 1e-5
    t32, _ = Octree.build(pos.astype(np.float32), m.astype(np.float32)).field(pos[:5])
    assert t32.dtype == np.float64


def test_thread_count_and_group_size_agnostic(sphere):
    pos, m = sphere
    tree = Octree.build(pos, m, eps=0.01)
    a2, _ = tree.field(theta=0.0)
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a1, _ = tree.field(theta=0.0)
    finally:
        numba.set_num_threads(old)
    np.testing.assert_allclose(a1, a2, rtol=1e-12)
    b, _ = tree.field(theta=0.0, group_size=7)
    np.testing.assert_allclose(b, a2, rtol=EXACT_RTOL)


def test_float32_loops(sphere):
    pos, m = sphere
    tree = Octree.build(pos, m, eps=0.01)
    a0, p0 = pp.direct_gravity(pos, m, eps=0.01, potential=True)
    # theta = 0: only float32 rounding, relative ~1e-6 (partial sums added in float64)
    a, p = tree.field(theta=0.0, precision="float32", potential=True)
    assert np.max(_relerr(a, a0)) < 2e-5 and np.max(np.abs(p / p0 - 1)) < 2e-5
    a64, _ = tree.field(theta=0.6)
    a32, _ = tree.field(theta=0.6, precision="float32")
    assert np.max(_relerr(a32, a64)) < 2e-5


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_acceleration_only(sphere, precision):
    pos, m = sphere
    tree = Octree.build(pos, m, eps=0.01)
    a0 = direct_reference(pos, m, np.full(len(m), 1e-4))[0]
    # theta = 0: the near field alone, against the float64 reference
    a, p = tree.field(theta=0.0, precision=precision, potential=False)
    assert p is None
    assert np.max(_relerr(a, a0)) < (2e-5 if precision == "float32" else EXACT_RTOL)
    # theta = 0.6: the same far field as with the potentials, its terms left out
    a_pot, _ = tree.field(theta=0.6, precision=precision)
    a_only, _ = barnes_hut(pos, m, eps=0.01, theta=0.6, precision=precision, potential=False)
    assert np.max(_relerr(a_only, a_pot)) < (2e-5 if precision == "float32" else 1e-12)
    assert np.median(_relerr(a_only, a0)) < 1e-3


def test_naive_matches_direct():
    rng = np.random.default_rng(0)
    pos, m = rng.normal(size=(40, 3)), rng.uniform(size=40)
    a0, _ = pp.direct_gravity(pos, m)
    # the chapter adds 1e-10 to |r|^3: relative 1e-10 / |r|^3, up to ~1e-7 for close pairs
    np.testing.assert_allclose(nbody_naive(pos, m)[0], a0, rtol=1e-6)


def test_plummer_virial():
    pos, vel, m = plummer_sphere(2000, seed=2)
    _, p = pp.direct_gravity(pos, m, potential=True)
    kin = 0.5 * np.sum(m * (vel**2).sum(1))
    pot = 0.5 * np.sum(m * p)
    assert abs(2 * kin / abs(pot) - 1) < 0.1  # virial equilibrium, sampling noise ~1/sqrt(N)
    assert abs(pot + 3 * np.pi / 32) < 0.03
    np.testing.assert_allclose((m[:, None] * vel).sum(0), 0, atol=1e-12)


def test_naive_takes_integers_and_lists():
    # the chapter's listing accumulates into zeros_like(positions): an int array made
    # that an int accumulator (a numpy casting error) and lists failed at list - list
    want = [[0.75, 0.0, 0.0], [-0.25, 0.0, 0.0]]
    got, _ = nbody_naive(np.array([[0, 0, 0], [2, 0, 0]]), np.array([1, 3]))
    assert got.dtype == np.float64 and np.allclose(got, want, rtol=1e-9)
    assert np.allclose(nbody_naive([[0, 0, 0], [2, 0, 0]], [1, 3])[0], want, rtol=1e-9)
    with pytest.raises(TypeError, match=r"^pos has dtype complex128: pass real"):
        nbody_naive(np.zeros((2, 3), complex), [1, 3])
    with pytest.raises(ValueError, match=r"^mass has shape \(3,\): must be a scalar or \(2,\)"):
        nbody_naive(np.zeros((2, 3)), [1, 2, 3])


@pytest.mark.parametrize("bad", ["no", 0, None])
def test_switches_take_only_bools(bad):
    # 'no' is truthy: it switched the quadrupole and the potentials on
    pos = np.random.default_rng(0).normal(size=(20, 3))
    for name in ("quadrupole", "potential"):
        with pytest.raises(TypeError, match=rf"^{name}=.*: must be True or False$"):
            barnes_hut(pos, **{name: bad})
        with pytest.raises(TypeError, match=rf"^{name}=.*: must be True or False$"):
            Octree.build(pos).field(**{name: bad})
    a, p = barnes_hut(pos, quadrupole=np.False_, potential=np.array(False))
    assert p is None and np.array_equal(a, barnes_hut(pos, quadrupole=False)[0])


def test_scalars_may_be_numpy_scalars_and_0d_arrays():
    pos, m = np.random.default_rng(1).normal(size=(30, 3)), np.ones(30)
    want = barnes_hut(pos, m, theta=0.5, G=2.0)
    for theta, G in ((np.float32(0.5), np.int64(2)), (np.array(0.5), np.array(2.0))):
        got = barnes_hut(pos, m, theta=theta, G=G)
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
    for name, bad, exc in (("theta", True, TypeError), ("G", "2", TypeError),
                           ("G", 2j, TypeError), ("G", np.array(np.inf), ValueError),
                           ("theta", np.ones(2), TypeError)):  # fmt: skip
        with pytest.raises(exc, match=rf"^{name}="):
            barnes_hut(pos, m, **{name: bad})


def test_plummer_sphere_arguments():
    pos, vel, m = plummer_sphere(5, seed=np.random.default_rng(4), dtype=np.float32)
    assert pos.dtype == vel.dtype == m.dtype == np.float32
    want = plummer_sphere(5, seed=4)
    assert np.array_equal(plummer_sphere(5, seed=np.int64(4), a=np.array(1.0))[0], want[0])
    for kwargs, exc, msg in (
        # an integer dtype truncated the positions to whole units, silently
        (dict(dtype=np.int32), TypeError, r"^dtype=int32: must be np.float32 or np.float64"),
        (dict(dtype="banana"), TypeError, r"^dtype='banana' is not a NumPy dtype"),
        (dict(a="1"), TypeError, r"^a='1': must be a real number"),
        (dict(a=-1.0), ValueError, r"^a=-1.0: the scale radius must be finite and > 0"),
        (dict(rmax=np.nan), ValueError, r"^rmax=nan: must be finite and > 0"),
        (dict(seed="a"), TypeError, r"^seed='a': must be None, an int >= 0 or a numpy Generator"),
    ):
        with pytest.raises(exc, match=msg):
            plummer_sphere(5, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "exc", "msg"),
    [
        (
            dict(pos=[[0, 0, np.nan], [1, 1, 1]]),
            ValueError,
            r"pos\[0\] = \[0.0, 0.0, nan\] is not finite",
        ),
        (
            dict(pos=np.ones((3, 3)), mass=[1, 1, np.nan]),
            ValueError,
            r"mass\[2\] = nan: masses must be finite and >= 0 \(fix or drop body 2\)",
        ),
        (dict(pos=np.ones((3, 3)), mass=[1, np.inf, 1]), ValueError, r"mass\[1\] = inf: masses"),
        (dict(pos=np.ones((3, 3)), mass=np.nan), ValueError, r"mass=nan: masses must be finite"),
        (
            dict(pos=np.ones((3, 3)), targets=np.zeros((2, 3)), target_eps=[0.1, np.nan]),
            ValueError,
            r"target_eps\[1\] = nan: softening lengths must be finite and >= 0 \(fix or drop",
        ),
        (dict(pos=np.ones((3, 3)), mass=[1, -1, 1]), ValueError, r"mass\[1\] = -1.0"),
        (dict(pos=np.ones((3, 2))), ValueError, r"pos has shape \(3, 2\): must be \(n, 3\)"),
        (dict(pos=np.ones((3, 3)), mass=[1, 2]), ValueError, r"mass has shape \(2,\)"),
        (dict(pos=np.ones((3, 3)), eps=-1), ValueError, r"eps=-1.0: softening lengths must be"),
        (dict(pos=np.ones((3, 3)), theta=-0.1), ValueError, r"theta=-0.1: the opening angle"),
        (
            dict(pos=np.ones((3, 3)), method="gpu"),
            ValueError,
            "method='gpu' is not one of 'tree', 'direct'",
        ),
        (dict(pos=np.ones((3, 3)), leaf_size=0), ValueError, "leaf_size=0: must be an int >= 1"),
        (dict(pos=np.ones((3, 3)), precision="half"), ValueError, "precision='half' is not one of"),
        (dict(pos=np.ones((3, 3)), group_size=0), ValueError, "group_size=0: must be an int >= 1"),
        (
            dict(pos=np.ones((3, 3)), targets=[[0, np.inf, 0]]),
            ValueError,
            r"targets\[0\] = .* is not finite",
        ),
    ],
)
def test_errors(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        barnes_hut(**kwargs)


@pytest.mark.parametrize("scale", [1e-150, 1e-100, 1e64, 1e80, 1e150])
def test_any_finite_scale_gives_the_field_of_unit_scale(scale):
    # the tree works in units of a power of two near the box and the largest mass,
    # so 1e-150 or 1e150 neither underflows nor overflows in the moments or the walk
    rng = np.random.default_rng(3)
    pos, m = rng.normal(size=(1500, 3)), rng.uniform(0.5, 1.5, size=1500)
    a1, p1 = barnes_hut(pos, m, eps=0.01, theta=0.5, potential=True)
    mass_scale = 1e-200 if scale < 1 else 1e200  # keep the answer representable
    a, p = barnes_hut(pos * scale, m * mass_scale, eps=0.01 * scale, theta=0.5, potential=True)
    # a ~ M / L^2 and phi ~ M / L: compare in unit scale (powers of ten are not exact)
    np.testing.assert_allclose(
        a / mass_scale * scale * scale, a1, rtol=1e-9, atol=1e-9 * np.abs(a1).max()
    )
    np.testing.assert_allclose(p / mass_scale * scale, p1, rtol=1e-9)
    a0, _ = direct_reference(pos, m, np.full(1500, 1e-4))
    err = np.linalg.norm(a / mass_scale * scale * scale - a0, axis=1) / np.linalg.norm(a0, axis=1)
    assert np.median(err) < 1e-3


def test_a_field_beyond_float64_is_a_clear_error():
    pos = np.random.default_rng(0).normal(size=(50, 3)) * 1e-200
    with pytest.raises(
        OverflowError, match=r"the field overflows float64: bodies .* apart with masses"
    ):
        barnes_hut(pos, np.ones(50))


def test_device_is_apart_from_the_method():
    tree = Octree.build(np.random.default_rng(0).normal(size=(40, 3)), eps=0.1)
    with pytest.raises(ValueError, match="device='gpu' is not one of 'auto', 'cpu', 'cuda'"):
        tree.field(device="gpu")
    a_tree, _ = tree.field(theta=0.0)
    a_direct, _ = tree.field(method="direct")
    np.testing.assert_allclose(a_tree, a_direct, rtol=1e-10, atol=1e-12)


def _with_close_partners(sep, n=600, k=15, seed=9):
    """A Plummer sphere and ``k`` partners, each ``sep`` from a body in a random direction."""
    pos, _, m = plummer_sphere(n, seed=seed)
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(k, 3))
    partners = pos[:k] + sep * u / np.linalg.norm(u, axis=1, keepdims=True)
    return np.vstack([pos, partners]), np.r_[m, m[:k]], np.r_[np.arange(k), n + np.arange(k)]


@pytest.mark.parametrize("sep", [1e-2, 1e-4, 1e-6, 1e-9, 1e-13])
def test_float32_close_pairs_are_not_coincident(sep):
    # float32 coordinates relative to a group's centre round at ~6e-8 of its size:
    # bodies closer than that used to count as coincident (their pull dropped)
    pos, m, close = _with_close_partners(sep)
    a0 = unsoftened_pull(pos, m)
    for theta in (0.0, 0.6):
        a32, _ = barnes_hut(pos, m, theta=theta, precision="float32")
        a64, _ = barnes_hut(pos, m, theta=theta)
        # float32 rounding: at most ~2.4e-7 / CLOSE = 2.4e-5 on any pair it sums
        assert np.max(_relerr(a32, a64)) < 3e-5
        assert np.max(_relerr(a32[close], a0[close])) < (3e-5 if theta == 0 else 1e-3)
    t = pos[close] + 1e-3 * sep  # separate targets next to the bodies
    a32, _ = barnes_hut(pos, m, targets=t, theta=0.0, precision="float32")
    np.testing.assert_allclose(a32, unsoftened_pull(pos, m, t), rtol=3e-5)


def test_float32_coincident_bodies_still_skipped():
    # identical positions with eps = 0 have no direction: skipped, as in float64
    pos, _, m = plummer_sphere(300, seed=1)
    pos[1] = pos[0]
    a32, p32 = barnes_hut(pos, m, theta=0.0, precision="float32", potential=True)
    a0 = unsoftened_pull(pos, m)
    assert np.max(_relerr(a32, a0)) < 3e-5 and np.all(np.isfinite(p32))


def test_G_is_applied_without_a_spurious_overflow():
    # G = 1e300 on a field of 1e-10: the answer 1e290 is a float64 number, though
    # G times the field in the tree's units is not
    pos = np.array([[0.0, 0, 0], [1e-5, 0, 0], [1, 1, 1]])
    m = np.full(3, 1e-20)
    a, p = barnes_hut(pos, m, G=1e300, theta=0.0, potential=True)
    assert a[0, 0] == pytest.approx(1e290, rel=1e-9) and np.all(np.isfinite(p))


def test_a_field_beyond_float32_is_a_clear_error():
    pos = np.array([[0, 0, 0], [1e-20, 0, 0], [1, 1, 1]], np.float32)
    for precision in ("float64", "float32"):
        with pytest.raises(OverflowError, match=r"overflows float32: .* or pass float64"):
            barnes_hut(pos, np.ones(3, np.float32), precision=precision)
    a, _ = barnes_hut(pos.astype(np.float64), np.ones(3))
    assert a[0, 0] == pytest.approx(1.0 / float(pos[1, 0]) ** 2, rel=1e-9)


@pytest.mark.parametrize("scale", [1e-100, 1.0, 1e100])
def test_coincident_bodies_take_their_unit_from_the_softening(scale):
    # one body, or several at one point: no spread, so the softening sets the
    # unit (a softening of 1e-103 units would overflow 1 / eps^3)
    from propopt_case_studies.nbody import fmm

    for n in (1, 3):
        P = np.full((n, 3), 0.7 * scale)
        eps = 1e-3 * scale
        acc, pot = barnes_hut(P, np.ones(n), eps=eps, potential=True)
        assert np.all(acc == 0)
        # each body feels the other n - 1 at distance 0, softened: -(n - 1) / eps
        np.testing.assert_allclose(pot, -(n - 1) / eps, rtol=1e-12)
        acc_f, pot_f = fmm(P, np.ones(n), eps=eps, potential=True)
        assert np.all(acc_f == 0)
        # the fmm's near field runs in float32: the self pair cancels to ~1e-7 of 1/eps
        np.testing.assert_allclose(pot_f, -(n - 1) / eps, rtol=1e-6, atol=1e-6 / eps)


@pytest.mark.parametrize("j", [0, 50, 99])
def test_spline_node_support_is_the_largest_of_its_bodies(j):
    # a node is used whole only beyond the largest h of its bodies; a parent took
    # its first body's h instead, so a heavy body with a wide support anywhere but
    # first in a cluster pulled a target inside that support with Newton's force
    rng = np.random.default_rng(0)
    pos = np.vstack([rng.uniform(-0.01, 0.01, size=(100, 3)), [[0.5, 0.0, 0.0]]])
    h, m = np.full(101, 1e-3), np.ones(101)
    h[j], m[j] = 1.0, 100.0
    tree = Octree.build(pos, m, eps=h, softening="spline", leaf_size=4)
    want = [np.sqrt(tree.src[4, s:e].max()) for s, e in zip(tree.start, tree.end)]
    np.testing.assert_array_equal(tree.nodes[:, 13], want)
    a0, _ = pp.direct_gravity(pos, m, eps=h, softening="spline")
    a, _ = tree.field(theta=0.7, group_size=1)
    assert abs(a[100, 0] / a0[100, 0] - 1) < 1e-5
