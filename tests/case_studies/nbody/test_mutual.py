"""The mutual FMM (self-gravity by cell pairs, each visited once for both cells).

Every field is compared with the float64 oracle of tests/oracles.py, which
shares no code with the method.  The mutual path is forced here (it is also
what ``fmm`` picks for the rows of ``MUTUAL_TOL_TABLE``), so that each input
exercises it whatever the tables say.
"""

import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import propopt as pp
from propopt_case_studies.nbody import fmm
from propopt_case_studies.nbody.distributions import DISTRIBUTIONS
from tests.oracles import gravity

F = importlib.import_module("propopt_case_studies.nbody.fmm")


@pytest.fixture
def mutual(monkeypatch):
    """Run every self-gravity call through the mutual method; count the calls that did."""
    calls = []
    run = F._run_mutual

    def counted(*args, **kwargs):
        calls.append(args[1])
        return run(*args, **kwargs)

    monkeypatch.setattr(F, "_FORCE_MUTUAL", True)
    monkeypatch.setattr(F, "_run_mutual", counted)
    return calls


def _relerr(a, b):
    return np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)


def _hernquist(n, seed):
    """A Hernquist cusp (density ~ 1/r at the centre), scale 1, by its inverse mass profile."""
    rng = np.random.default_rng(seed)
    u = np.sqrt(rng.uniform(0.0, 0.999, n))
    r = u / (1.0 - u)
    v = rng.normal(size=(n, 3))
    return r[:, None] * v / np.linalg.norm(v, axis=1)[:, None], np.full(n, 1.0 / n)


def _far_clusters(n, seed):
    """Two Plummer spheres of scale 1, 1000 scale radii apart."""
    a, _ = DISTRIBUTIONS["plummer"](n // 2, seed=seed)
    b, _ = DISTRIBUTIONS["plummer"](n - n // 2, seed=seed + 1)
    return np.concatenate([a, b + [1000.0, 0, 0]]), np.full(n, 1.0 / n)


def _disc(n, seed):
    rng = np.random.default_rng(seed)
    r, phi = rng.gamma(2.0, 1.0, n), rng.uniform(0, 2 * np.pi, n)
    z = rng.laplace(0.0, 0.01, n)
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1), np.full(n, 1.0 / n)


def _line(n, seed):
    x = np.sort(np.random.default_rng(seed).uniform(-1, 1, n))
    return np.stack([x, np.zeros(n), np.zeros(n)], axis=1), np.full(n, 1.0 / n)


INPUTS = {
    "plummer": lambda n, s: DISTRIBUTIONS["plummer"](n, seed=s),
    "uniform": lambda n, s: DISTRIBUTIONS["cube"](n, seed=s),
    "hernquist": _hernquist,
    "far clusters": _far_clusters,
    "clusters+disc": lambda n, s: DISTRIBUTIONS["clusters+disc"](n, seed=s),
    "disc": _disc,
    "line": _line,
}


@pytest.mark.parametrize("name", list(INPUTS))
def test_accuracy_on_every_input(mutual, name):
    pos, m = INPUTS[name](3000, 7)
    a0, p0 = gravity(pos, m, 1e-6)
    a, p = fmm(pos, m, eps=1e-3, order=6, theta=0.5, potential=True)
    assert mutual, "the mutual method did not run"
    err = _relerr(a, a0)
    # order 6 at theta 0.5: truncation ~0.5^7 per interaction, far below it in the median
    assert np.median(err) < 3e-4, np.median(err)
    assert np.quantile(err, 0.99) < 1e-2, np.quantile(err, 0.99)
    np.testing.assert_allclose(p, p0, rtol=3e-3)


@pytest.mark.parametrize("name", ["plummer", "far clusters", "line"])
def test_theta_zero_is_the_direct_sum(mutual, name):
    """Nothing is separated at theta 0: every pair is summed, in float32 (~1e-7 a pair; on
    the line, where the pulls nearly cancel, ~1e-5 of the net)."""
    pos, m = INPUTS[name](700, 3)
    a0, p0 = gravity(pos, m, 0.01**2)
    a, p = fmm(pos, m, eps=0.01, order=3, theta=0.0, potential=True)
    assert mutual
    assert np.quantile(_relerr(a, a0), 0.99) < (1e-4 if name == "line" else 1e-5)
    np.testing.assert_allclose(p, p0, rtol=1e-5)


def test_per_body_softening_and_masses(mutual):
    rng = np.random.default_rng(5)
    pos, m = rng.normal(size=(1500, 3)), rng.uniform(0.0, 2.0, 1500)
    eps = rng.uniform(0.0, 0.05, 1500)
    a, p = fmm(pos, m, eps=eps, order=6, theta=0.4, potential=True)
    a0, p0 = gravity(pos, m, eps**2)
    # a pair of cells softens with the mean of their mass-weighted eps^2 (as the one-way
    # method does): lengths up to 0.05 mixed in a cell leave ~1e-3 at unit distance
    assert np.quantile(_relerr(a, a0), 0.99) < 3e-3
    np.testing.assert_allclose(p, p0, rtol=3e-3)


@pytest.mark.parametrize("n", [1, 2, 3, 65])
def test_tiny(mutual, n):
    rng = np.random.default_rng(n)
    pos, m = rng.normal(size=(n, 3)), rng.uniform(0.5, 1.5, n)
    a, p = fmm(pos, m, eps=0.1, order=4, theta=0.5, leaf_size=4, potential=True)
    a0, p0 = gravity(pos, m, 0.01)
    assert mutual
    tol = 1e-6 if n <= 3 else 1e-3  # a few bodies: every pair direct
    np.testing.assert_allclose(a, a0, rtol=tol, atol=tol * np.abs(a0).max())
    np.testing.assert_allclose(p, p0, rtol=tol)


def test_coincident_bodies(mutual):
    """Bodies at one point: with eps 0 they pull nothing on each other (no direction), with
    eps > 0 their potentials still count; both as the oracle.  Few distinct points: each
    body's pull comes from a few cells, whose errors (~theta^(p+1)) do not average out."""
    pos = np.repeat(np.random.default_rng(1).normal(size=(40, 3)), 25, axis=0)
    m = np.ones(1000)
    for eps in (0.0, 0.05):
        a, p = fmm(pos, m, eps=eps, order=6, theta=0.3, potential=True)
        a0, p0 = gravity(pos, m, eps**2)
        assert np.quantile(_relerr(a, a0), 0.99) < 1e-3
        np.testing.assert_allclose(p, p0, rtol=1e-3)
    assert len(mutual) == 2


def test_spline_softening(mutual):
    pos, m = DISTRIBUTIONS["plummer"](2000, seed=4)
    h = np.random.default_rng(4).uniform(0.01, 0.08, 2000)
    a, p = fmm(pos, m, eps=h, softening="spline", order=6, theta=0.5, potential=True)
    a0, p0 = pp.direct_gravity(pos, m, eps=h, softening="spline", potential=True)
    assert mutual and mutual[0].spline
    assert np.quantile(_relerr(a, a0), 0.99) < 5e-3
    np.testing.assert_allclose(p, p0, rtol=1e-3)


def test_thread_count_agnostic(mutual):
    """Subtrees pair up in rounds of disjoint tasks: each cell sees its interactions in one
    order, so one thread and two give the same bits."""
    pos, m = DISTRIBUTIONS["clusters+disc"](20000, seed=2)
    with pp.threads.set_num_threads(1):
        a1, p1 = fmm(pos, m, eps=1e-3, order=4, theta=0.6, potential=True)
    with pp.threads.set_num_threads(2):
        a2, p2 = fmm(pos, m, eps=1e-3, order=4, theta=0.6, potential=True)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(p1, p2)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 400),
    seed=st.integers(0, 2**31 - 1),
    spread=st.sampled_from([1e-3, 1.0, 1e3]),
    eps=st.sampled_from([0.0, 1e-3, 0.1]),
    p=st.integers(1, 6),
    theta=st.sampled_from([0.3, 0.6, 0.9]),
)
def test_net_force_vanishes(n, seed, spread, eps, p, theta):
    """Each separated pair adds to both cells from one set of derivatives, antisymmetric in
    the pair: ``sum_i m_i a_i`` is 0 up to rounding, whatever the accuracy of the field."""
    rng = np.random.default_rng(seed)
    pos = rng.standard_cauchy(size=(n, 3)) * spread  # heavy tails: cells of every size
    m = rng.uniform(0.1, 1.0, n)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(F, "_FORCE_MUTUAL", True)
        a, _ = fmm(pos, m, eps=eps * spread, order=p, theta=theta, leaf_size=8)
    scale = (m * np.linalg.norm(a, axis=1)).sum()
    net = np.linalg.norm((m[:, None] * a).sum(axis=0))
    assert net <= 1e-6 * scale, (net, scale)


def test_schedule_pairs_every_subtree_once_and_never_twice_in_a_round():
    pos, m = DISTRIBUTIONS["clusters+disc"](20000, seed=1)
    b = F.bodies(pos, m, np.full(len(m), 1e-3), F.LEAF_SIZE)
    src = F._Tree.build(b.pos, b.src[3], b.src[4], b.order, (b.start, b.end, b.nxt, b.leaf))
    items = np.sort(F._items(src, F.MUTUAL_ITEMS))
    rec = src.records()
    for theta in (0.3, 0.8):
        seen = []
        rounds = F._schedule(items, rec, src.rad / theta)
        assert sum(serial for _, serial in rounds) <= 1
        for tasks, serial in rounds:
            if not serial:
                used = tasks.ravel() if (tasks[:, 0] != tasks[:, 1]).all() else tasks[:, 0]
                assert len(set(used.tolist())) == used.size  # disjoint within the round
            seen += [tuple(t) for t in tasks.tolist()]
        k = len(items)
        assert sorted(seen) == [(i, j) for i in range(k) for j in range(i, k)]


def test_fmm_picks_the_mutual_method_for_its_rows(monkeypatch):
    """Self-gravity at a tol whose first guess (the row of GUESS * tol) is a row of
    MUTUAL_TOL_TABLE runs the mutual method with that row's parameters, after a first pass
    of the error control; separate targets the one-way method."""
    calls = []
    run = F._run_mutual
    monkeypatch.setattr(F, "_run_mutual", lambda *a, **k: calls.append(a[1]) or run(*a, **k))
    pos, m = DISTRIBUTIONS["plummer"](3000, seed=1)
    for q, rows in F.MUTUAL_TABLES.items():
        for tol, (p, theta) in rows.items():
            calls.clear()
            fmm(pos, m, eps=1e-3, tol=tol / F.GUESS, quantile=q)
            assert [(c.p, c.theta) for c in calls if not c.first] == [(p, theta)]
            assert [(c.p, c.theta) for c in calls if c.first] == [F.FIRST]
            calls.clear()
            fmm(pos, m, eps=1e-3, tol=tol, quantile=q, targets=pos[:10])
            assert calls == []


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_every_mutual_row_meets_its_tol(name):
    """Each row of MUTUAL_TOL_TABLE_MEDIAN keeps the median error below its tol."""
    pos, m = DISTRIBUTIONS[name](5000, seed=11)
    a0, _ = gravity(pos, m, 1e-6)
    for tol in F.MUTUAL_TOL_TABLE_MEDIAN:
        a, _ = fmm(pos, m, eps=1e-3, tol=tol, quantile=0.5)
        assert np.median(_relerr(a, a0)) <= tol, (name, tol)


def test_field_reaches_the_mutual_method(monkeypatch):
    from propopt_case_studies.nbody import field

    calls = []
    run = F._run_mutual
    monkeypatch.setattr(F, "_run_mutual", lambda *a, **k: calls.append(a[1]) or run(*a, **k))
    pos, m = DISTRIBUTIONS["plummer"](3000, seed=1)
    field(pos, m, eps=1e-3, tol=1e-4 / F.GUESS, quantile=0.5)  # below the tree's error
    assert [(c.p, c.theta) for c in calls if not c.first] == [F.MUTUAL_TOL_TABLE_MEDIAN[1e-4]]


@pytest.mark.parametrize("p", [1, 2, 4, 6])
def test_batched_m2l_equals_the_generic_m2l(p):
    """The mutual traversal's M2L over a batch of pairs, against propopt's generic M2L
    (derivatives at ``R`` for one cell, at ``-R`` for the other), pair by pair."""
    from propopt.separability import expansions as E
    from propopt_case_studies.nbody import _mutual

    batch = _mutual.kernels(p).m2l_batch

    tab = E.expansion_tables(p)
    nt, B, nk = tab.nterms, _mutual.BATCH, 37
    rng = np.random.default_rng(p)
    R = rng.uniform(-3.0, 3.0, (nk, 3)) + [4.0, 0.0, 0.0]
    e2 = rng.uniform(0.0, 0.1, nk)
    Ma, Mb = rng.normal(size=(2, nk, nt))
    dipole = tab.idx.sum(axis=1) == 1
    Ma[:, dipole] = Mb[:, dipole] = 0.0  # multipoles about a centre of mass
    X = np.full((4 + 2 * nt) * B, np.nan)  # entries past nk must not be read
    X[:nk], X[B : B + nk], X[2 * B : 2 * B + nk], X[3 * B : 3 * B + nk] = *R.T, e2
    for v in range(nt):
        X[(4 + v) * B : (4 + v) * B + nk] = Ma[:, v]
        X[(4 + nt + v) * B : (4 + nt + v) * B + nk] = Mb[:, v]
    Y = np.zeros(2 * nt * B)
    batch(nk, X, Y)
    Y = Y.reshape(2 * nt, B)[:, :nk]
    D = np.empty(nt)
    for k in range(nk):
        want_a, want_b = np.zeros(nt), np.zeros(nt)
        E.derivatives(*R[k], e2[k], tab.rec1, tab.rec2, D)
        E.m2l(Mb[k], D, tab.trip, want_a)
        E.derivatives(*(-R[k]), e2[k], tab.rec1, tab.rec2, D)
        E.m2l(Ma[k], D, tab.trip, want_b)
        scale = max(np.abs(want_a).max(), np.abs(want_b).max())
        np.testing.assert_allclose(Y[:nt, k], want_a, rtol=1e-11, atol=1e-13 * scale)
        np.testing.assert_allclose(Y[nt:, k], want_b, rtol=1e-11, atol=1e-13 * scale)
