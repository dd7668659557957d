"""Fast multipole method: accuracy as asked against an independent direct sum; edges, errors."""

import importlib
import itertools

import numpy as np
import pytest

from propopt_case_studies.nbody import fmm, fmm_parameters
from propopt_case_studies.nbody.distributions import DISTRIBUTIONS
from tests.oracles import gravity, unsoftened_pull

_fmm_module = importlib.import_module("propopt_case_studies.nbody.fmm")


def _direct(pos, m, eps, targets=None, target_eps=None):
    """Softened field by the float64 oracle (pair eps^2 = mean of squares)."""
    te2 = None if targets is None else np.asarray(target_eps, float) ** 2
    return gravity(pos, m, np.asarray(eps, float) ** 2, targets, te2)


def _relerr(a, b):
    return np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def bodies():
    pos, m = DISTRIBUTIONS["plummer"](3000, seed=2)
    return pos, m, _direct(pos, m, 1e-3)


@pytest.mark.parametrize("tol", [1e-3, 1e-6])
def test_accuracy_as_asked(bodies, tol):
    pos, m, (a0, p0) = bodies
    a, p = fmm(pos, m, eps=1e-3, tol=tol, potential=True)
    err = _relerr(a, a0)
    assert np.quantile(err, 0.99) <= tol
    assert np.median(err) <= tol / 5
    np.testing.assert_allclose(p, p0, rtol=tol)


def test_separate_targets_with_their_softening(bodies):
    pos, m, _ = bodies
    T = np.random.default_rng(3).normal(size=(500, 3))
    te = 2e-3  # one length for the targets, another for the bodies: exact in the far field
    a, p = fmm(pos, m, eps=1e-3, targets=T, target_eps=te, tol=1e-5, potential=True)
    a0, p0 = _direct(pos, m, 1e-3, T, te)
    assert np.quantile(_relerr(a, a0), 0.99) <= 1e-5
    np.testing.assert_allclose(p, p0, rtol=1e-5)


def test_high_order_is_the_direct_sum_per_body_softening():
    rng = np.random.default_rng(5)
    pos, m = rng.normal(size=(700, 3)), rng.uniform(0.5, 1.5, 700)
    eps = rng.uniform(0, 0.05, 700)
    a, p = fmm(pos, m, eps=eps, order=14, theta=0.3, leaf_size=8, potential=True)
    a0, p0 = _direct(pos, m, eps)
    # the far field softens a pair of cells with their mean eps^2: lengths up to
    # 0.05 mixed in a cell leave terms ~ (0.05 / d)^2 / 2 ~ 1e-3 at d ~ 1
    assert np.quantile(_relerr(a, a0), 0.99) < 2e-3
    np.testing.assert_allclose(p, p0, rtol=2e-3)
    a1, _ = fmm(pos, m, eps=0.02, order=14, theta=0.3, leaf_size=8)  # one length: exact
    assert np.quantile(_relerr(a1, _direct(pos, m, 0.02)[0]), 0.99) < 1e-7  # 0.3^15 ~ 1e-8


@pytest.mark.parametrize("n", [0, 1, 2, 3, 65])
def test_tiny(n):
    rng = np.random.default_rng(n)
    pos, m = rng.normal(size=(n, 3)), rng.uniform(0.5, 1.5, n)
    a, p = fmm(pos, m, eps=0.1, order=11, theta=0.05, leaf_size=4, potential=True)
    a0, p0 = _direct(pos, m, 0.1)
    # theta 0.05 and order 11: truncation ~0.05^12, rounding only
    np.testing.assert_allclose(a, a0, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p, p0, rtol=1e-10, atol=1e-12)


def test_coincident_and_zero_masses_and_float32():
    pos = np.zeros((100, 3), np.float32)
    pos[50:] = 1.0
    m = np.ones(100, np.float32)
    m[:10] = 0
    a, p = fmm(pos, m, eps=0.0, potential=True)
    assert a.dtype == np.float32 and p.dtype == np.float32
    a0, p0 = _direct(pos, m.astype(float), 0.0)
    np.testing.assert_allclose(a, a0, rtol=1e-5)
    np.testing.assert_allclose(p, p0, rtol=1e-5)


def test_thread_count_agnostic_and_targets_at_the_bodies(bodies):
    """Each target subtree is computed whole by one thread: any thread count, the same bits."""
    import propopt as pp

    pos, m, (a0, _) = bodies
    with pp.threads.set_num_threads(1):
        a1, _ = fmm(pos, m, eps=1e-3, tol=1e-4)
    with pp.threads.set_num_threads(2):
        a2, _ = fmm(pos, m, eps=1e-3, tol=1e-4)
    np.testing.assert_array_equal(a1, a2)
    # the bodies as separate targets: another target tree, the same field within tol
    at, _ = fmm(pos, m, eps=1e-3, tol=1e-4, targets=pos)
    assert np.quantile(_relerr(at, a0), 0.99) <= 1e-4


def test_float32_near_field_within_tol(monkeypatch):
    """From tol 1e-4 up the near field runs in float32: rounding stays far below tol."""
    pos, m = DISTRIBUTIONS["cube"](2000, seed=6)
    a0, _ = _direct(pos, m, 1e-3)
    a, _ = fmm(pos, m, eps=1e-3, tol=1e-4)  # float32 near field
    monkeypatch.setattr(_fmm_module, "NEAR32_TOL", 1.0)  # the same (p, theta) in float64
    a64, _ = fmm(pos, m, eps=1e-3, tol=1e-4)
    assert not np.array_equal(a, a64)
    assert np.quantile(_relerr(a, a0), 0.99) <= 1e-4
    assert np.median(_relerr(a, a64)) < 1e-5


@pytest.mark.parametrize("quantile", [0.99, 0.5])
def test_given_parameters_run_as_their_tol(monkeypatch, quantile):
    """``order``/``theta`` choose the near field's precision by accuracy, as ``tol`` does:
    float32 where they are no more accurate than a tol from NEAR32_TOL up, else float64."""
    seen = []
    run = _fmm_module._run

    def spy(s, t, how):
        if not how.first:  # the error control's first pass is float32 at any tol
            seen.append(how.near32)
        return run(s, t, how)

    monkeypatch.setattr(_fmm_module, "_run", spy)
    pos, m = DISTRIBUTIONS["cube"](300, seed=2)
    for tol, p, th in _fmm_module.QUANTILES[quantile]:
        seen.clear()
        fmm(pos, m, eps=1e-3, tol=tol, quantile=quantile)
        fmm(pos, m, eps=1e-3, order=p, theta=th, quantile=quantile)
        assert seen == [tol >= _fmm_module.NEAR32_TOL] * 2, (tol, p, th)
    seen.clear()
    p, th = fmm_parameters(_fmm_module.NEAR32_TOL, quantile)
    fmm(pos, m, eps=1e-3, order=p + 1, theta=th, quantile=quantile)  # more accurate
    fmm(pos, m, eps=1e-3, order=p, theta=th - 0.05, quantile=quantile)
    fmm(pos, m, eps=1e-3, order=p - 1, theta=th + 0.05, quantile=quantile)  # less accurate
    assert seen == [False, False, True]


def test_parameters_follow_tol():
    ps = [fmm_parameters(t) for t in (3e-2, 1e-3, 1e-5, 1e-7)]
    # stricter tolerances never open fewer cells or drop terms both at once
    for (p0, t0), (p1, t1) in itertools.pairwise(ps):
        assert p1 >= p0 or t1 < t0
    assert ps[0][0] < ps[-1][0] and ps[0][1] > ps[-1][1]


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        (dict(tol=0.0), ValueError, "tol=0.0"),
        (dict(tol="1e-3"), TypeError, "tol='1e-3'"),
        (dict(tol=1e-12), ValueError, "smallest calibrated"),
        (dict(eps=-1.0), ValueError, "eps"),
        (
            dict(mass=[1.0, 1.0, np.nan, 1.0]),
            ValueError,
            r"mass\[2\] = nan: masses must be finite and >= 0 \(fix or drop body 2\)",
        ),
        (dict(eps=[0.1, np.inf, 0, 0]), ValueError, r"eps\[1\] = inf: .*\(fix or drop body 1\)"),
        (dict(order=-1), ValueError, "order=-1"),
        (dict(theta=1.5), ValueError, "theta=1.5"),
        (dict(leaf_size=0), ValueError, "leaf_size=0"),
        (dict(target_eps=0.1), ValueError, "target_eps is given without targets"),
        (dict(targets=[[0.0, 0.0]]), ValueError, "targets has shape"),
    ],
)
def test_errors(kwargs, exc, msg):
    kwargs = dict(mass=np.ones(4)) | kwargs
    with pytest.raises(exc, match=msg):
        fmm(np.zeros((4, 3)), **kwargs)


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        # 'no' is truthy: it returned the potentials
        (dict(potential="no"), TypeError, r"^potential='no': must be True or False$"),
        (dict(potential=1), TypeError, r"^potential=1: must be True or False$"),
        (dict(tol=True), TypeError, r"^tol=True: must be a real number, not a bool"),
        (dict(G="1"), TypeError, r"^G='1': must be a real number"),
        (dict(G=np.array(np.nan)), ValueError, r"^G=nan: the gravitational constant must be"),
        (dict(theta="0.5"), TypeError, r"^theta='0.5': must be a real number"),
    ],
)
def test_switch_and_scalar_errors(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        fmm(np.zeros((4, 3)), np.ones(4), **kwargs)


def test_scalars_may_be_numpy_scalars_and_0d_arrays():
    pos = np.random.default_rng(2).normal(size=(50, 3))
    want = fmm(pos, tol=1e-4, G=2.0, theta=0.5, potential=True)
    for tol, G, theta in ((np.float32(1e-4), np.int64(2), np.float64(0.5)),
                          (np.array(1e-4), np.array(2.0), np.array(0.5))):  # fmt: skip
        got = fmm(pos, tol=tol, G=G, theta=theta, potential=np.True_)
        # tol in float32 is just below 1e-4: one order more, so a float64 near field
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
    assert fmm_parameters(np.array(1e-3)) == fmm_parameters(1e-3)


def test_bad_positions():
    with pytest.raises(ValueError, match=r"pos\[1\]"):
        fmm([[0.0, 0.0, 0.0], [1.0, np.nan, 0.0]])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
@pytest.mark.parametrize("tol", [1e-2, 1e-4, 1e-7])
def test_accuracy_every_distribution(name, tol):
    pos, m = DISTRIBUTIONS[name](20000, seed=4)
    a0, _ = _direct(pos, m, 1e-3)
    a, _ = fmm(pos, m, eps=1e-3, tol=tol)
    assert np.quantile(_relerr(a, a0), 0.99) <= tol


def test_close_pair_of_the_docstring():
    # body 0 and body 1 are 1e-9 apart: float32 near-field coordinates used to round
    # them to one point, giving body 0 the pull [1, 1, 0] of the other two alone
    pos = np.array([[0.0, 0, 0], [1e-9, 0, 0], [1, 0, 0], [0, 1, 0]])
    a, _ = fmm(pos, np.ones(4))
    np.testing.assert_allclose(a, unsoftened_pull(pos, np.ones(4)), rtol=1e-6)
    assert a[0, 0] == pytest.approx(1e18, rel=1e-9)


@pytest.mark.parametrize("sep", [1e-2, 1e-4, 1e-6, 1e-9, 1e-13])
@pytest.mark.parametrize("tol", [1e-3, 1e-5])  # float32 and float64 near fields
def test_close_pairs_within_tol(sep, tol):
    pos, m = DISTRIBUTIONS["plummer"](1500, seed=3)
    rng = np.random.default_rng(4)
    u = rng.normal(size=(20, 3))
    pos = np.vstack([pos, pos[:20] + sep * u / np.linalg.norm(u, axis=1, keepdims=True)])
    m = np.r_[m, m[:20]]
    close = np.r_[np.arange(20), 1500 + np.arange(20)]
    a0 = unsoftened_pull(pos, m)
    err = _relerr(fmm(pos, m, tol=tol)[0], a0)
    assert np.quantile(err, 0.99) <= tol and np.max(err[close]) <= tol
    t = pos[close] + 1e-3 * sep  # separate targets next to the bodies
    assert np.max(_relerr(fmm(pos, m, tol=tol, targets=t)[0], unsoftened_pull(pos, m, t))) <= tol


def _softened64(pos, m, eps):
    """Plain float64 softened sum ``sum_j m_j d / (|d|^2 + eps^2)^1.5``, j != i."""
    acc = np.zeros_like(pos)
    for i in range(len(pos)):
        d = pos - pos[i]
        s2 = (d * d).sum(1) + eps * eps
        s2[i] = np.inf
        acc[i] = (m[:, None] * d / s2[:, None] ** 1.5).sum(0)
    return acc


def _flat(kind, n, rng):
    """``n`` bodies on a random line or plane, and their typical spacing."""
    basis = np.linalg.qr(rng.normal(size=(3, 3)))[0][:, :2].T
    if kind == "line":
        t = rng.uniform(0, 1, n)
        return t[:, None] * basis[0] + 0.3, 1.0 / n
    return rng.uniform(-1, 1, (n, 2)) @ basis + 0.3, 2.0 / np.sqrt(n)


@pytest.mark.parametrize("kind", ["line", "plane"])
@pytest.mark.parametrize("soft", [0.0, 3.0, 30.0])  # eps in units of the spacing
@pytest.mark.parametrize("tol", [1e-2, 1e-5])
def test_tol_holds_on_lines_and_planes(kind, soft, tol):
    # calibrated on 3-D bodies, the table's (p, theta) gave p99 errors of 1.3 tol on
    # planes and up to 300 tol on softened lines (the net force a small difference)
    rng = np.random.default_rng(11)
    pos, spacing = _flat(kind, 2000, rng)
    m = rng.uniform(0.5, 1.5, 2000)
    eps = soft * spacing
    a0 = _softened64(pos, m, eps)
    assert np.quantile(_relerr(fmm(pos, m, eps=eps, tol=tol)[0], a0), 0.99) <= tol


def test_G_and_float32_overflow():
    pos = np.array([[0.0, 0, 0], [1e-5, 0, 0], [1, 1, 1]])
    a, _ = fmm(pos, np.full(3, 1e-20), G=1e300)  # 1e290: no spurious overflow of G * field
    assert a[0, 0] == pytest.approx(1e290, rel=1e-6)
    p32 = pos.astype(np.float32)
    p32[1, 0] = 1e-20  # a field of 1e40: beyond float32, not inf
    with pytest.raises(OverflowError, match=r"overflows float32: .* or pass float64"):
        fmm(p32, np.ones(3, np.float32))
    want = 1.0 / float(p32[1, 0]) ** 2
    assert fmm(p32.astype(np.float64), np.ones(3))[0][0, 0] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("tol", [3e-2, 1e-3, 1e-5])
def test_tol_on_the_median_holds(tol):
    from propopt_case_studies.nbody import plummer_sphere

    pos, _, m = plummer_sphere(4000, seed=9)
    a0, _ = gravity(pos, m, np.full(len(m), 1e-3**2))
    acc, _ = fmm(pos, m, eps=1e-3, tol=tol, quantile=0.5)
    err = np.linalg.norm(acc - a0, axis=1) / np.linalg.norm(a0, axis=1)
    assert np.median(err) <= tol
    # the median sits 10-30x below the 99th percentile: its table asks for less
    assert fmm_parameters(tol, quantile=0.5) != fmm_parameters(tol)
    with pytest.raises(ValueError, match=r"^quantile=0.9 is not one of 0.5, 0.99: "):
        fmm(pos, m, tol=tol, quantile=0.9)
