"""Cartesian expansions of the softened 1/r: every operator against direct float64 sums."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from propopt.separability import expansion_tables, expansions as E
from tests.oracles import gravity


def _direct(targets, src, m, eps2):
    """psi = sum m / s and grad psi at each target, by the float64 oracle (psi = -potential)."""
    acc, pot = gravity(src, m, eps2, targets, eps2)
    return -pot, acc


def _multipole(src, m, c, tab):
    """P2M by the definition M_n = sum m (c - x)^n / n!, in NumPy."""
    y = c - src
    out = np.zeros(tab.nterms)
    for t, (a, b, g) in enumerate(tab.idx):
        f = math.factorial(a) * math.factorial(b) * math.factorial(g)
        out[t] = (m * y[:, 0] ** a * y[:, 1] ** b * y[:, 2] ** g).sum() / f
    return out


@pytest.fixture(scope="module")
def cluster():
    rng = np.random.default_rng(7)
    return rng.uniform(-0.5, 0.5, (40, 3)), rng.uniform(0.5, 1.5, 40)


def test_tables_count_terms_and_triples():
    for p in (0, 1, 2, 5):
        t = expansion_tables(p)
        assert t.nterms == E.num_terms(p) == len(t.idx)
        assert t.trip.shape[0] == math.comb(p + 6, 6)  # pairs (u, v) with |u| + |v| <= p
        np.testing.assert_array_equal(
            t.idx[t.trip[:, 0]], t.idx[t.trip[:, 1]] + t.idx[t.trip[:, 2]]
        )
    with pytest.raises(ValueError, match="p=-1"):
        expansion_tables(-1)


def test_derivatives_closed_form():
    tab = expansion_tables(3)
    x, y, z, e2 = 0.7, -1.1, 0.4, 0.09
    D = np.empty(tab.nterms)
    E.derivatives(x, y, z, e2, tab.rec1, tab.rec2, D)
    s2 = x * x + y * y + z * z + e2
    where = {tuple(n): i for i, n in enumerate(tab.idx.tolist())}
    assert D[where[(0, 0, 0)]] == pytest.approx(s2**-0.5, rel=1e-14)
    assert D[where[(1, 0, 0)]] == pytest.approx(-x * s2**-1.5, rel=1e-14)
    assert D[where[(2, 0, 0)]] == pytest.approx(3 * x * x * s2**-2.5 - s2**-1.5, rel=1e-13)
    assert D[where[(1, 1, 0)]] == pytest.approx(3 * x * y * s2**-2.5, rel=1e-13)
    assert D[where[(1, 1, 1)]] == pytest.approx(-15 * x * y * z * s2**-3.5, rel=1e-13)
    assert D[where[(3, 0, 0)]] == pytest.approx(-15 * x**3 * s2**-3.5 + 9 * x * s2**-2.5, rel=1e-13)


def test_p2m_and_m2m_match_the_definition(cluster):
    src, m = cluster
    tab = expansion_tables(6)
    c = np.array([0.05, -0.02, 0.1])
    M = np.zeros(tab.nterms)
    E.p2m(src, m, 0, len(src), *c, tab.mono, M)
    np.testing.assert_allclose(M, _multipole(src, m, c, tab), rtol=1e-12, atol=1e-15)
    # M2M of two halves about their own centres equals P2M about the parent centre
    parent = np.zeros(tab.nterms)
    for lo, hi, cc in ((0, 15, np.array([0.2, 0.1, -0.1])), (15, 40, np.array([-0.1, 0.0, 0.2]))):
        child = np.zeros(tab.nterms)
        E.p2m(src, m, lo, hi, *cc, tab.mono, child)
        E.m2m(child, *(c - cc), tab.mono, tab.trip, parent)
    np.testing.assert_allclose(parent, M, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("eps2", [0.0, 0.04])
def test_far_field_error_falls_with_order(cluster, eps2):
    """M2M -> M2L -> L2L -> L2P of a cluster 4 radii away: error falls geometrically with p."""
    src, m = cluster
    targets = np.array([[3.0, 1.0, -0.5], [3.3, 0.7, -0.2], [2.8, 1.2, -0.7]])
    psi0, g0 = _direct(targets, src, m, eps2)
    z, zc = np.array([3.0, 1.0, -0.5]), np.array([3.1, 0.9, -0.4])
    errs = []
    for p in (2, 4, 6, 8, 10):
        tab = expansion_tables(p)
        M = np.zeros(tab.nterms)
        E.p2m(src, m, 0, len(src), 0.0, 0.0, 0.0, tab.mono, M)
        D = np.empty(tab.nterms)
        E.derivatives(*z, eps2, tab.rec1, tab.rec2, D)
        L = np.zeros(tab.nterms)
        E.m2l(M, D, tab.trip, L)
        L2 = np.zeros(tab.nterms)  # a child's centre
        E.l2l(L, *(zc - z), tab.mono, tab.trip, L2)
        w = np.empty(tab.nterms)
        err = 0.0
        for t, tg in enumerate(targets):
            psi, gx, gy, gz = E.l2p(L2, *(tg - zc), tab.mono, tab.grad, w)
            err = max(
                err,
                abs(psi - psi0[t]) / psi0[t],
                np.linalg.norm([gx - g0[t, 0], gy - g0[t, 1], gz - g0[t, 2]])
                / np.linalg.norm(g0[t]),
            )
        errs.append(err)
    assert errs[-1] < 1e-5  # ((0.87 + 0.5) / 3.2)^11 ~ 1e-4 is the bound
    assert all(b < a for a, b in itertools.pairwise(errs)), errs


def test_m2l_many_equals_one_by_one(cluster):
    rng = np.random.default_rng(1)
    tab = expansion_tables(5)
    mults = rng.normal(size=(9, tab.nterms))
    srcs = np.array([3, 0, 8, 3, 5], np.int64)
    r = rng.uniform(2, 3, (5, 3))
    e2 = rng.uniform(0, 0.1, 5)
    want = np.zeros(tab.nterms)
    D = np.empty(tab.nterms)
    for i, b in enumerate(srcs):
        E.derivatives(*r[i], e2[i], tab.rec1, tab.rec2, D)
        E.m2l(mults[b], D, tab.trip, want)
    got = np.zeros(tab.nterms)
    E.m2l_many(mults, srcs, r[:, 0].copy(), r[:, 1].copy(), r[:, 2].copy(), e2, tab.rec1,
               tab.rec2, tab.trip, tab.trip_ptr, np.empty((tab.nterms + 1, 8)),
               np.empty((tab.nterms, 8)), got)  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("scale", [1.0, 1e-6, 1e5])
def test_m2l_many_scaled_any_cell_size(scale):
    """float64: the same sums as m2l_many; float32: ~1e-6 relative, at cells of any size."""
    rng = np.random.default_rng(2)
    tab = expansion_tables(6)
    deg = tab.idx.sum(1)
    mults = rng.normal(size=(9, tab.nterms)) * scale ** deg[None, :]
    srcs = np.array([3, 0, 8, 3, 5], np.int64)
    r = rng.uniform(2, 3, (5, 3)) * scale
    e2 = rng.uniform(0, 0.1, 5) * scale**2
    x, y, z = (np.ascontiguousarray(r[:, a]) for a in range(3))
    want = np.zeros(tab.nterms)
    E.m2l_many(mults, srcs, x, y, z, e2, tab.rec1, tab.rec2, tab.trip, tab.trip_ptr,
               np.empty((tab.nterms + 1, 8)), np.empty((tab.nterms, 8)), want)  # fmt: skip
    unit = scale ** (deg + 1.0)  # the local terms in units of the geometry's scale
    i1, i2 = tab.rec1[:, :, 0].astype(np.int64), tab.rec2[:, :, 0].astype(np.int64)
    for dt, rtol in ((np.float64, 1e-13), (np.float32, 3e-6)):
        got = np.zeros(tab.nterms)
        E.m2l_many_scaled(mults, srcs, x, y, z, e2, deg, i1, tab.rec1[:, :, 1].astype(dt), i2,
                          tab.rec2[:, :, 1].astype(dt), tab.trip, tab.trip_ptr,
                          np.empty((tab.nterms + 4, 8), dt), np.empty((tab.nterms, 8), dt),
                          got)  # fmt: skip
        err = np.abs(got - want) * unit
        assert err.max() <= rtol * (np.abs(want) * unit).max()


_vec = st.tuples(*[st.floats(-1, 1)] * 3)


@settings(deadline=None, max_examples=25, derandomize=True)
@given(_vec, _vec, st.integers(0, 7))
def test_translations_compose(d1, d2, p):
    """M2M and L2L of degree-p expansions are exact shifts: two moves equal one move by the sum."""
    tab = expansion_tables(p)
    rng = np.random.default_rng(p)
    M = rng.normal(size=tab.nterms)
    d1, d2 = np.array(d1), np.array(d2)
    for op in (E.m2m, E.l2l):
        once = np.zeros(tab.nterms)
        op(M, *(d1 + d2), tab.mono, tab.trip, once)
        mid = np.zeros(tab.nterms)
        op(M, *d1, tab.mono, tab.trip, mid)
        twice = np.zeros(tab.nterms)
        op(mid, *d2, tab.mono, tab.trip, twice)
        np.testing.assert_allclose(twice, once, rtol=1e-9, atol=1e-9 * np.abs(once).max())
