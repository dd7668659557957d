"""Multipoles: moments against brute force, the merge law, truncation error slopes, bad input."""

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numba import njit

from propopt import Moments, moments
from propopt.separability import (
    NMOM,
    evaluate_rows,
    merge_moments,
    merge_rows,
    merge_segments,
    moments_of_points,
    moments_segments,
    multipole_accel,
)
from propopt.separability._reference import brute_moments
from tests.oracles import gravity

# Moments are sums of O(n) float64 products of O(1) numbers: a few hundred
# ulps relative to the largest moment; merges add a shift of similar size.
MOM_RTOL = 1e-12


def cloud(n, seed=0, scale=1.0, center=(0.0, 0.0, 0.0)):
    rng = np.random.default_rng(seed)
    return rng.uniform(-scale, scale, (n, 3)) + np.asarray(center), rng.uniform(0.5, 2.0, n)


def close(a, b, rtol=MOM_RTOL):
    return np.allclose(a, b, rtol=rtol, atol=rtol * max(np.abs(b).max(), 1.0))


def test_moments_match_brute_force():
    x, m = cloud(300, center=(5.0, -3.0, 2.0))
    mo = moments(x, m)
    M, c, S2, S3 = brute_moments(x, m)
    assert np.isclose(mo.mass, M) and close(mo.center, c)
    assert close(mo.second, S2) and close(mo.third, S3)
    y = x - c
    r2 = (y**2).sum(1)
    Q = np.einsum("j,ji,jk->ik", m, 3 * y, y) - np.eye(3) * (m * r2).sum()
    assert close(mo.quadrupole, Q) and abs(np.trace(mo.quadrupole)) < 1e-9
    assert np.allclose(np.einsum("iil->l", mo.octupole), 0, atol=1e-9)
    assert np.isclose(mo.radius, np.sqrt((m * r2).sum() / M))
    assert np.isclose(moments(x).mass, 300.0)  # unit masses by default
    assert np.isclose(moments(x, 2.0).mass, 600.0)


def test_empty_and_massless_sets_give_zero_moments():
    for mo in (moments(np.zeros((0, 3))), moments([]), moments(np.ones((4, 3)), np.zeros(4))):
        assert mo.mass == 0.0 and np.all(np.isfinite(mo.row)) and not mo.row.any()
        assert mo.radius == 0.0
    a = moments(*cloud(10))
    assert np.array_equal((a + Moments.zero()).row, a.row)
    assert np.array_equal(merge_moments().row, Moments.zero().row)
    acc, pot = Moments.zero().field([[1.0, 2.0, 3.0]], potential=True)
    assert not acc.any() and not pot.any()


def test_one_point():
    mo = moments([[1.0, 2.0, 3.0]], [2.5])
    assert mo.mass == 2.5 and np.array_equal(mo.center, [1, 2, 3]) and not mo.row[4:].any()


def split_moments(x, m, cuts):
    parts = np.split(np.arange(len(x)), cuts)
    return [moments(x[p], m[p]) for p in parts]


def test_union_equals_merge_of_parts():
    x, m = cloud(200, seed=1)
    whole = moments(x, m)
    a, b, c = split_moments(x, m, [50, 120])
    assert close((a + b + c).row, whole.row)
    assert close(merge_moments(a, b, c).row, whole.row)
    assert close(a.merge(b, c).row, whole.row)


blocks = st.integers(0, 12).flatmap(
    lambda n: st.tuples(
        st.lists(st.tuples(*[st.floats(-10, 10)] * 3), min_size=n, max_size=n),
        st.lists(st.floats(0.0, 5.0), min_size=n, max_size=n),
    )
)


def to_moments(block):
    pts, ms = block
    return moments(np.array(pts, dtype=float).reshape(-1, 3), np.array(ms, dtype=float))


def assert_same(a, b):
    # rounding relative to the largest moment in play (a shift multiplies by |d|^3)
    scale = max(np.abs(a.row).max(), np.abs(b.row).max(), 1.0)
    assert np.allclose(a.row, b.row, rtol=1e-9, atol=1e-9 * scale)


@settings(max_examples=40)
@given(blocks, blocks, blocks)
def test_hypothesis_merge_is_associative_and_equals_union(ba, bb, bc):
    a, b, c = map(to_moments, (ba, bb, bc))
    assert_same((a + b) + c, a + (b + c))
    union = (ba[0] + bb[0] + bc[0], ba[1] + bb[1] + bc[1])
    assert_same((a + b) + c, to_moments(union))


@settings(max_examples=40)
@given(blocks, blocks)
def test_hypothesis_merge_is_commutative_with_identity(ba, bb):
    a, b = map(to_moments, (ba, bb))
    assert_same(a + b, b + a)
    assert_same(a + Moments.zero(), a)


def test_about_is_the_parallel_axis_shift():
    x, m = cloud(100, seed=2)
    p = np.array([0.3, -1.0, 2.0])
    raw = moments(x, m).about(p)
    y = x - p
    assert np.isclose(raw.mass, m.sum())
    assert close(raw.dipole, (m[:, None] * y).sum(0))
    assert close(raw.second, np.einsum("j,ji,jk->ik", m, y, y))
    assert close(raw.third, np.einsum("j,ji,jk,jl->ikl", m, y, y, y))
    assert np.array_equal(moments(x, m).shift(p).third, raw.third)
    # about the centre of mass itself: no dipole, the stored moments
    mo = moments(x, m)
    assert np.allclose(mo.about(mo.center).dipole, 0, atol=1e-12)
    assert close(mo.about(mo.center).second, mo.second)


def sphere_targets(r, n=64, seed=3):
    d = np.random.default_rng(seed).normal(size=(n, 3))
    return r * d / np.linalg.norm(d, axis=1, keepdims=True)


DISTANCES = np.geomspace(6.0, 96.0, 5)


@pytest.mark.parametrize("softening", [0.0, 0.2])
def test_truncation_error_falls_as_size_over_r_to_p_plus_1(softening):
    x, m = cloud(150, seed=4)  # radius ~ 1 about the centre
    mo = moments(x, m)
    for order, slope in ((1, 2), (2, 3), (3, 4)):
        ep, ea = [], []
        for r in DISTANCES:
            t = mo.center + sphere_targets(r)
            A, P = gravity(x, m, softening**2, t, softening**2)
            acc, pot = mo.field(t, order=order, eps=softening, potential=True)
            ep.append(np.max(np.abs(pot - P) / np.abs(P)))
            ea.append(np.max(np.linalg.norm(acc - A, axis=1) / np.linalg.norm(A, axis=1)))
        for err in (ep, ea):
            fit = np.polyfit(np.log(DISTANCES), np.log(err), 1)[0]
            assert abs(fit + slope) < 0.3, (order, fit)
        assert ep[-1] < 10.0 ** -(slope + 1)
    # order 0 is the monopole too: the dipole vanishes about the centre of mass
    t = sphere_targets(20.0)
    assert np.array_equal(mo.potential(t, order=0), mo.potential(t, order=1))


def test_octupole_far_field_matches_direct_sum():
    x, m = cloud(200, seed=5, center=(1.0, 2.0, 3.0))
    t = np.array([1.0, 2.0, 3.0]) + sphere_targets(40.0, 20)
    A, P = gravity(x, m, 0.1**2, t, 0.1**2)
    mo = moments(x, m)
    acc, pot = mo.field(t, eps=0.1, potential=True)
    bound = (np.linalg.norm(x - mo.center, axis=1).max() / 40.0) ** 4  # (R/r)^(p+1), p = 3
    assert np.max(np.abs(pot - P) / np.abs(P)) < bound
    assert np.max(np.linalg.norm(acc - A, axis=1) / np.linalg.norm(A, axis=1)) < 3 * bound
    assert np.allclose(moments(x, m).acceleration(t, eps=0.1), acc)
    assert mo.field(t, eps=0.1)[1] is None  # the potential only when asked for, as in N-body
    old = r"field\(softening=\.\.\.\) is deprecated: pass eps="
    with pytest.warns(DeprecationWarning, match=old):
        np.testing.assert_array_equal(mo.field(t, softening=0.1)[0], acc)


def test_numba_blocks_bottom_up_and_threads():
    x, m = cloud(257, seed=6)
    offsets = np.array([0, 0, 30, 31, 100, 200, 257], dtype=np.int64)  # an empty leaf too
    leaves = np.empty((6, NMOM))
    moments_segments(x, m, offsets, leaves)
    for i in range(6):
        ref = moments(x[offsets[i] : offsets[i + 1]], m[offsets[i] : offsets[i + 1]])
        assert close(leaves[i], ref.row)
    parents = np.empty((2, NMOM))
    merge_segments(leaves, np.array([0, 3, 6], dtype=np.int64), parents)
    root = np.empty(NMOM)
    merge_rows(parents, 0, 2, root)
    assert close(root, moments(x, m).row)
    one = np.empty(NMOM)
    moments_of_points(x, m, 0, len(x), one)
    assert close(one, root)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        serial = np.empty((6, NMOM))
        moments_segments(x, m, offsets, serial)
    finally:
        numba.set_num_threads(before)
    assert np.array_equal(serial, leaves)  # each leaf is one thread's sequential sum


def test_evaluate_rows_and_direct_accel():
    x, m = cloud(120, seed=7)
    rows = np.stack([moments(x[:60], m[:60]).row, moments(x[60:], m[60:]).row, np.zeros(NMOM)])
    t = sphere_targets(30.0, 10)
    acc, pot = np.empty((10, 3)), np.empty(10)
    evaluate_rows(rows, t, 3, 0.0, acc, pot)
    a0, p0 = moments(x[:60], m[:60]).field(t, potential=True)
    a1, p1 = moments(x[60:], m[60:]).field(t, potential=True)
    assert np.allclose(acc, a0 + a1) and np.allclose(pot, p0 + p1)


@njit
def _walk(rows, target, theta):
    """A toy tree walk in user numba code: open a row when it looks too big."""
    ax = ay = az = ph = 0.0
    for r in range(rows.shape[0]):
        dx = target[0] - rows[r, 1]
        dy = target[1] - rows[r, 2]
        dz = target[2] - rows[r, 3]
        fx, fy, fz, fp = multipole_accel(rows[r], dx, dy, dz, 2, 0.0)
        ax += fx
        ay += fy
        az += fz
        ph += fp
    return ax, ay, az, ph


def test_multipole_accel_composes_inside_njit():
    x, m = cloud(50, seed=8)
    mo = moments(x, m)
    t = np.array([12.0, -3.0, 5.0])
    ax, ay, az, ph = _walk(mo.row[None, :], t, 0.5)
    acc, pot = mo.field(t, order=2, potential=True)
    assert np.allclose([ax, ay, az], acc[0]) and np.isclose(ph, pot[0])


def test_bad_input_is_named():
    x = np.zeros((5, 3))
    x[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"points\[3\] = \[0.0, nan, 0.0\] is not finite"):
        moments(x)
    with pytest.raises(ValueError, match=r"points has shape \(4, 2\): must be \(n, 3\)"):
        moments(np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"mass\[1\] = -1.0: masses must be finite and >= 0"):
        moments(np.zeros((2, 3)), [1.0, -1.0])
    with pytest.raises(ValueError, match=r"mass\[0\] = inf"):
        moments(np.zeros((2, 3)), [np.inf, 1.0])
    with pytest.raises(ValueError, match=r"mass has shape \(3,\): must be a scalar or \(2,\)"):
        moments(np.zeros((2, 3)), np.ones(3))
    mo = moments(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"order=4: must be one of \[0, 1, 2, 3\]"):
        mo.potential([[5.0, 0, 0]], order=4)
    with pytest.raises(ValueError, match=r"^eps=-0.1: must be finite and >= 0$"):
        mo.potential([[5.0, 0, 0]], eps=-0.1)
    with pytest.raises(ValueError, match=r"targets\[1\] = \[inf, 0.0, 0.0\] is not finite"):
        mo.acceleration([[5.0, 0, 0], [np.inf, 0, 0]])
    with pytest.raises(ValueError, match=r"point has shape"):
        mo.about([1.0, 2.0])
    assert "Moments(mass=2" in repr(mo)


@pytest.mark.parametrize(
    "points", [np.array([[1 + 1j, 0, 0]]), np.array([["a", "b", "c"]]), (p for p in [[0, 0, 0]])]
)
def test_points_that_are_not_real_numbers(points):
    """Complex points lost their imaginary part with only a warning; strings failed in numpy."""
    with pytest.raises(TypeError, match="points has dtype"):
        moments(points)


def test_moments_beyond_float64_raise():
    with pytest.raises(OverflowError, match="points and masses"):
        moments(np.array([[1e300, 0, 0], [-1e300, 0, 0]]))  # S2 ~ 1e600
    with pytest.raises(OverflowError, match="points and masses"):
        moments(np.array([[1.0, 0, 0], [-1.0, 0, 0]]), np.array([1e308, 1e308]))


def test_moments_of_large_coordinates_in_exact_units():
    """S2 = 2e300 is a float64, though y * y * y on the way (1e450) is not."""
    row = moments(np.array([[1e150, 0, 0], [-1e150, 0, 0]])).row
    assert row[0] == 2.0 and np.isclose(row[4], 2e300, rtol=1e-15) and not row[10:].any()
    x = np.random.default_rng(3).normal(size=(50, 3))
    w = np.random.default_rng(4).uniform(size=50)
    out = np.empty(20)
    moments_of_points(x, w, 0, 50, out)
    assert np.array_equal(moments(x, w).row, out)  # the scaling leaves ordinary inputs' bits


def test_field_softening_and_merge_arguments():
    mo = moments(np.ones((2, 3)))
    with pytest.raises(TypeError, match=r"^eps='a': must be a finite number >= 0$"):
        mo.field(np.zeros((1, 3)) + 9, eps="a")
    with pytest.raises(TypeError, match="merge takes Moments, got list"):
        mo.merge([1])


def test_negative_masses_are_refused_with_the_reason():
    # the moments are about the centre of mass: masses of both signs put it anywhere
    msg = r"the moments are about the centre of mass, .*; take the moments of each sign apart$"
    with pytest.raises(ValueError, match=rf"^mass\[1\] = -1.0: masses must be .*{msg}"):
        moments(np.zeros((2, 3)), [1.0, -1.0])
    with pytest.raises(ValueError, match=rf"^mass=-2.0: masses must be .*{msg}"):
        moments(np.zeros((2, 3)), -2.0)


def test_masses_keyword_still_works_with_a_deprecation_warning():
    x = np.random.default_rng(3).normal(size=(50, 3))
    m = np.random.default_rng(4).uniform(0.5, 2.0, 50)
    want = moments(x, mass=m)
    with pytest.warns(
        DeprecationWarning, match=r"moments\(masses=\.\.\.\) is deprecated: pass mass="
    ):
        got = moments(x, masses=m)
    assert np.array_equal(got.row, want.row)
    with pytest.raises(TypeError, match=r"got both masses= and mass=: pass mass= only"):
        moments(x, masses=m, mass=m)


def test_a_subnormal_mass_keeps_its_centre():
    # 5e-324 * 1.5 rounds to 1e-323: the weighted mean of subnormal weights is taken
    # with the weights scaled up, exactly
    one = moments(np.array([[0.0, -2.5, 1.5]]), np.array([5e-324]))
    assert one.center.tolist() == [0.0, -2.5, 1.5]
    empty = moments(np.zeros((0, 3)), np.zeros(0))
    assert ((empty + empty) + one).center.tolist() == [0.0, -2.5, 1.5]
    two = moments(np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 3.0]]), np.array([1e-320, 3e-320]))
    np.testing.assert_allclose(two.center, [0.0, 0.0, 2.5], rtol=1e-3)  # 3e-320 has 3 digits
