"""direct_gravity: the halved sum against the brute-force loop, laws, targets, bad input."""

import numpy as np
import pytest

from propopt import direct_gravity
from tests.oracles import gravity

RTOL = 1e-10  # float64 sums of O(n) terms, compared to the sum of magnitudes


def brute(pos, mass, eps, targets=None):
    """The exact double sum (tests/oracles.py), one softening for every pair."""
    return gravity(pos, mass, eps**2, targets, None if targets is None else eps**2)


@pytest.mark.parametrize("method", ["auto", "halved", "full", "untiled", "reference"])
def test_matches_brute_force(method):
    rng = np.random.default_rng(0)
    pos, mass = rng.normal(size=(150, 3)), rng.uniform(0.1, 1, 150)
    acc, pot = direct_gravity(pos, mass, eps=0.05, method=method, potential=True)
    a, p = brute(pos, mass, 0.05)
    assert np.allclose(acc, a, rtol=0, atol=RTOL * np.abs(a).max())
    assert np.allclose(pot, p, rtol=0, atol=RTOL * np.abs(p).max())


def test_newtons_third_law_and_G():
    rng = np.random.default_rng(1)
    pos, mass = rng.normal(size=(300, 3)), rng.uniform(0.1, 1, 300)
    acc, pot = direct_gravity(pos, mass, eps=0.01, potential=True)
    momentum = (mass[:, None] * acc).sum(0)
    assert np.abs(momentum).max() < 1e-12 * (mass[:, None] * np.abs(acc)).sum()
    acc2, pot2 = direct_gravity(pos, mass, eps=0.01, G=6.674e-11, potential=True)
    assert np.allclose(acc2, 6.674e-11 * acc) and np.allclose(pot2, 6.674e-11 * pot)
    unit, _ = direct_gravity(pos, eps=0.01)
    assert np.allclose(unit, direct_gravity(pos, np.ones(300), eps=0.01)[0])


def test_targets_and_coincident_points():
    rng = np.random.default_rng(2)
    pos, mass = rng.normal(size=(80, 3)), rng.uniform(0.1, 1, 80)
    tgt = np.vstack([rng.normal(size=(5, 3)), pos[:2]])  # two targets sit on sources
    acc, pot = direct_gravity(pos, mass, eps=0.1, targets=tgt, potential=True)
    a, p = brute(pos, mass, 0.1, tgt)
    assert acc.shape == (7, 3) and np.allclose(acc, a, atol=1e-12) and np.allclose(pot, p)
    # with eps = 0 a coincident pair contributes nothing (and no NaN)
    acc0, pot0 = direct_gravity(np.zeros((2, 3)), eps=0.0, potential=True)
    assert np.array_equal(acc0, np.zeros((2, 3))) and np.array_equal(pot0, np.zeros(2))


def test_float32_and_empty():
    rng = np.random.default_rng(3)
    pos = rng.normal(size=(64, 3)).astype(np.float32)
    acc, pot = direct_gravity(pos, eps=0.1, potential=True)
    a, p = brute(pos, np.ones(64), 0.1)
    assert acc.dtype == np.float32 and np.allclose(acc, a, rtol=0, atol=1e-5 * np.abs(a).max())
    assert pot.dtype == np.float32 and np.allclose(pot, p, rtol=1e-5)
    acc, pot = direct_gravity(np.zeros((0, 3)), potential=True)
    assert acc.shape == (0, 3) and pot.shape == (0,)
    acc, pot = direct_gravity(np.zeros((0, 3)), targets=np.ones((2, 3)), potential=True)
    assert np.array_equal(acc, np.zeros((2, 3))) and np.array_equal(pot, np.zeros(2))


def test_errors():
    pos = np.zeros((3, 3))
    with pytest.raises(ValueError, match=r"pos has shape \(3, 2\): must be \(n, 3\)"):
        direct_gravity(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"pos\[1\] = \[inf, 0.0, 0.0\] is not finite"):
        direct_gravity(np.array([[0, 0, 0], [np.inf, 0, 0], [1, 1, 1]], float))
    with pytest.raises(ValueError, match=r"eps=-1.0: the softening length must be >= 0"):
        direct_gravity(pos, eps=-1.0)
    with pytest.raises(ValueError, match=r"eps=nan: the softening"):
        direct_gravity(pos, eps=float("nan"))
    with pytest.raises(
        ValueError, match=r"^mass has shape \(2,\): must be a scalar or \(3,\), one per body$"
    ):
        direct_gravity(pos, np.ones(2))
    with pytest.raises(ValueError, match=r"targets\[0\] = \[nan, 0.0, 0.0\] is not finite"):
        direct_gravity(pos, targets=np.array([[np.nan, 0, 0]]))
    with pytest.raises(ValueError, match="method='gpu' is not one of"):
        direct_gravity(pos, method="gpu")


def test_spline_softening_matches_pytreegrav_brute_force():
    pytreegrav = pytest.importorskip("pytreegrav")
    rng = np.random.default_rng(4)
    x, m = rng.normal(size=(300, 3)), rng.uniform(0.1, 1.0, 300)
    h = rng.uniform(0.05, 0.8, 300)  # many pairs inside the kernel's support
    a, p = direct_gravity(x, m, eps=h, softening="spline", potential=True)
    a0 = pytreegrav.Accel(x, m, h, method="bruteforce")
    p0 = pytreegrav.Potential(x, m, h, method="bruteforce")
    np.testing.assert_allclose(a, a0, rtol=1e-12, atol=1e-12 * np.abs(a0).max())
    np.testing.assert_allclose(p, p0, rtol=1e-12)
    t, th = rng.normal(size=(40, 3)), rng.uniform(0.0, 0.5, 40)
    a, p = direct_gravity(x, m, eps=h, targets=t, target_eps=th, softening="spline", potential=True)
    a0 = pytreegrav.AccelTarget(
        t, x, m, softening_target=th, softening_source=h, method="bruteforce"
    )
    np.testing.assert_allclose(a, a0, rtol=1e-12, atol=1e-12 * np.abs(a0).max())


def test_spline_softening_against_its_definition_and_newton_outside():
    # one pair: inside the support the force follows the M4 spline's enclosed mass
    h = 1.0
    for r in (0.1, 0.4, 0.5, 0.7, 0.99, 1.0, 1.5):
        pos = np.array([[0.0, 0.0, 0.0], [r, 0.0, 0.0]])
        a, _ = direct_gravity(pos, np.array([1.0, 0.0]), eps=h, softening="spline")
        q = r / h
        # enclosed mass fraction of the cubic spline (Monaghan & Lattanzio 1985)
        if q <= 0.5:
            frac = q**3 * (32 / 3 - 38.4 * q**2 + 32 * q**3)
        elif q < 1:
            frac = 64 / 3 * q**3 - 48 * q**4 + 38.4 * q**5 - 32 / 3 * q**6 - 1 / 15
        else:
            frac = 1.0
        assert a[1, 0] == pytest.approx(-frac / r**2, rel=1e-12)
    with pytest.raises(ValueError, match="softening='gauss' is not one of 'plummer', 'spline'"):
        direct_gravity(np.zeros((2, 3)), softening="gauss")


def _pairwise(pos, mass, eps2, targets=None):
    """Plain float64 double loop: ``sum_j m_j d / (|d|^2 + eps2)^1.5``, ``-sum_j m_j / s``."""
    pos = np.asarray(pos, np.float64)
    T = pos if targets is None else np.asarray(targets, np.float64)
    acc, pot = np.zeros((len(T), 3)), np.zeros(len(T))
    for i, t in enumerate(T):
        for j, x in enumerate(pos):
            if targets is None and i == j:
                continue
            d = x - t
            s2 = d @ d + eps2
            if s2 > 0:
                acc[i] += mass[j] * d / s2**1.5
                pot[i] -= mass[j] / s2**0.5
    return acc, pot


@pytest.mark.parametrize("sep", [1e-110, 1e-150, 1e110, 1e150])
def test_two_bodies_at_extreme_separations(sep):
    # r^3 = 1e-330 underflows and r^2 = 1e220 overflows in the user's units; the
    # field itself (1 / sep^2) is an ordinary float64 number
    pos = np.array([[0.0, 0.0, 0.0], [sep, 0.0, 0.0]])
    want = 1.0 / sep / sep
    for method in ("halved", "full", "reference"):
        acc, pot = direct_gravity(pos, np.ones(2), method=method, potential=True)
        np.testing.assert_allclose(acc[:, 0], [want, -want], rtol=1e-15)
        assert np.array_equal(acc[:, 1:], np.zeros((2, 2)))
        np.testing.assert_allclose(pot, [-1 / sep, -1 / sep], rtol=1e-15)
    acc, pot = direct_gravity(pos[:1], np.ones(1), targets=pos[1:] * 0.5, eps=sep, potential=True)
    np.testing.assert_allclose(acc[0, 0], -0.5 / (1.25**1.5 * sep * sep), rtol=1e-14)


@pytest.mark.parametrize("scale", [1e-150, 1e-100, 1e100, 1e150])
@pytest.mark.parametrize("softening", ["plummer", "spline"])
def test_any_scale_is_the_unit_scale_field(scale, softening):
    rng = np.random.default_rng(7)
    pos, m, eps = rng.normal(size=(40, 3)), rng.uniform(0.5, 1.5, 40), rng.uniform(0, 0.2, 40)
    tgt = rng.normal(size=(7, 3))
    mass_scale = 1e-200 if scale < 1 else 1e200  # keeps the field inside float64
    a1, p1 = direct_gravity(pos, m, eps=eps, softening=softening, potential=True)
    a, p = direct_gravity(
        pos * scale, m * mass_scale, eps=eps * scale, softening=softening, potential=True
    )
    f = scale * scale / mass_scale
    np.testing.assert_allclose(a * f, a1, rtol=1e-12, atol=1e-12 * np.abs(a1).max())
    np.testing.assert_allclose(p * scale / mass_scale, p1, rtol=1e-12)
    if softening == "plummer":  # one length: against the plain double loop
        a0, p0 = _pairwise(pos, m, 0.01)
        a, p = direct_gravity(pos * scale, m * mass_scale, eps=0.1 * scale, potential=True)
        np.testing.assert_allclose(a * f, a0, rtol=1e-12, atol=1e-12 * np.abs(a0).max())
        a0, p0 = _pairwise(pos, m, 0.01, tgt)
        a, p = direct_gravity(
            pos * scale, m * mass_scale, eps=0.1 * scale, targets=tgt * scale, potential=True
        )
        np.testing.assert_allclose(a * f, a0, rtol=1e-12, atol=1e-12 * np.abs(a0).max())
        np.testing.assert_allclose(p * scale / mass_scale, p0, rtol=1e-12)


def test_scaling_keeps_the_bits_of_ordinary_inputs():
    # dividing by a power of two is exact: unit-scale inputs give the same bits as
    # the unscaled sum, which the G = 1 plain loop reproduces to rounding
    rng = np.random.default_rng(8)
    pos, m = rng.normal(size=(50, 3)), rng.uniform(0.5, 1.5, 50)
    a, p = direct_gravity(pos * 1024.0, m * 64.0, eps=0.5, potential=True)
    a1, p1 = direct_gravity(pos, m, eps=0.5 / 1024.0, potential=True)
    assert np.array_equal(a * 1024.0**2 / 64.0, a1) and np.array_equal(p * 1024.0 / 64.0, p1)


def test_a_field_beyond_the_dtype_is_an_overflow_error():
    with pytest.raises(OverflowError, match=r"the field at pos\[0\] overflows float64"):
        direct_gravity(np.array([[0.0, 0.0, 0.0], [1e-200, 0.0, 0.0]]))
    with pytest.raises(OverflowError, match=r"overflows float32: .* or pass float64"):
        direct_gravity(np.array([[0.0, 0.0, 0.0], [1e-20, 0.0, 0.0]], np.float32))
    with pytest.raises(OverflowError, match=r"the field at targets\[0\] overflows float64"):
        direct_gravity(np.zeros((1, 3)), targets=np.array([[1e-200, 0.0, 0.0]]))
    # G = 1e300 with a field of 1e-10 is 1e290: G is applied without overflowing
    acc, _ = direct_gravity(np.array([[0.0, 0.0, 0.0], [1e5, 0.0, 0.0]]), G=1e300)
    assert acc[0, 0] == pytest.approx(1e290, rel=1e-15)


def test_scalar_arguments_are_checked_by_type_first():
    pos = np.array([[0.0, 0, 0], [1, 0, 0], [0, 2, 0]])
    want = direct_gravity(pos, eps=0.1, G=2.0, potential=True)
    for eps, G in ((np.float32(0.1), np.int64(2)), (np.array(0.1), np.array(2.0))):
        # 0-d arrays said 'G must be a finite number'
        got = direct_gravity(pos, eps=eps, G=G, potential=True)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-7)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-7)
    # a complex entry raised "float() argument must be ... not 'complex'" inside numpy
    with pytest.raises(TypeError, match=r"^eps has dtype complex128: softening lengths must be"):
        direct_gravity(pos, eps=[0.1 + 1j, 0.1, 0.1])
    with pytest.raises(TypeError, match=r"^eps=\(0.1\+1j\): must be a real number"):
        direct_gravity(pos, eps=0.1 + 1j)
    with pytest.raises(TypeError, match=r"^target_eps has dtype <U3: softening lengths must"):
        direct_gravity(pos, targets=pos[:2], target_eps=["0.1", "0.2"])
    with pytest.raises(TypeError, match=r"^G=True: must be a real number, not a bool"):
        direct_gravity(pos, G=True)
    with pytest.raises(TypeError, match=r"^G='1': must be a real number"):
        direct_gravity(pos, G="1")
    with pytest.raises(ValueError, match=r"^G=inf: the gravitational constant must be a finite"):
        direct_gravity(pos, G=np.array(np.inf))


@pytest.mark.parametrize(
    ("mass", "msg"),
    [
        (
            np.array([1.0, 1.0, np.nan]),
            r"^mass\[2\] = nan: masses must be finite and >= 0 "
            r"\(fix or drop body 2\)$",
        ),
        (np.array([1.0, np.inf, 1.0]), r"^mass\[1\] = inf: masses must be finite"),
        (float("nan"), r"^mass=nan: masses must be finite and >= 0$"),
        (
            np.array([1.0, -2.0, 1.0]),
            r"^mass\[1\] = -2.0: masses must be >= 0 in every gravity "
            r"verb .* use propopt.pairwise_sum",
        ),
    ],
)
def test_bad_mass_names_the_argument(mass, msg):
    with pytest.raises(ValueError, match=msg):
        direct_gravity(np.eye(3), mass)
