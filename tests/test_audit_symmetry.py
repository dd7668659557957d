"""check_symmetric: verdicts on pair functions whose symmetry is known."""

import numpy as np
import pytest

from propopt.audit import SymmetryReport, check_symmetric


def newton(xi, xj):
    d = xj - xi
    return d / np.linalg.norm(d, axis=-1, keepdims=True) ** 3


def potential(xi, xj):
    return -1.0 / np.linalg.norm(xj - xi, axis=-1)


def lopsided(xi, xj):
    return xi[:, 0] * xj[:, 0] ** 2


PTS = np.random.default_rng(0).normal(size=(64, 3))


def test_known_laws():
    assert check_symmetric(potential, PTS).ok
    assert not check_symmetric(potential, PTS, antisymmetric=True).ok
    assert check_symmetric(newton, PTS, antisymmetric=True).ok
    assert not check_symmetric(newton, PTS).ok
    assert check_symmetric(potential, PTS.astype(np.float32)).rtol == 1e-4


def test_report_names_the_worst_pair():
    rep = check_symmetric(lopsided, PTS, trials=50)
    assert isinstance(rep, SymmetryReport) and not rep.ok and rep.trials == 50
    ce = rep.counterexample
    assert np.isclose(ce.f_ij, lopsided(ce.x_i[None], ce.x_j[None])[0])
    assert np.isclose(ce.f_ji, lopsided(ce.x_j[None], ce.x_i[None])[0])
    assert rep.max_abs_diff >= abs(ce.f_ij - ce.f_ji) > 0  # worst relative, not absolute
    text = str(rep)
    assert text.startswith("symmetry of lopsided (f(x_j, x_i) = f(x_i, x_j)): FAILS on 50 random")
    assert "counterexample: x_i=[" in text and "but f(x_j, x_i) =" in text
    ok = str(check_symmetric(newton, PTS, antisymmetric=True))
    assert ok.startswith("antisymmetry of newton (f(x_j, x_i) = -f(x_i, x_j)): holds on 200")


def test_vector_component_and_tolerance():
    def almost(xi, xj):  # antisymmetric but for a 1e-6 bias in component 2
        d = xj - xi
        return d + np.array([0, 0, 1e-6])

    rep = check_symmetric(almost, PTS, antisymmetric=True)
    assert not rep.ok and rep.where == 2 and "(component 2)" in str(rep)
    assert check_symmetric(almost, PTS, antisymmetric=True, atol=1e-5).ok
    assert check_symmetric(almost, PTS, antisymmetric=True, rtol=1e-3).ok


def test_nan_on_one_side_and_1d_samples():
    def half_nan(xi, xj):
        return np.where(xi[:, 0] > xj[:, 0], np.nan, 1.0)

    rep = check_symmetric(half_nan, PTS)
    assert not rep.ok and np.isinf(rep.worst) and "none is tolerated" in str(rep)
    assert check_symmetric(lambda a, b: np.abs(a - b)[:, 0], np.arange(5.0)).ok


def test_errors():
    with pytest.raises(ValueError, match=r"samples\[1\] = \[nan, 0.0\] is not finite"):
        check_symmetric(potential, np.array([[0.0, 0.0], [np.nan, 0.0]]))
    with pytest.raises(ValueError, match="at least one point"):
        check_symmetric(potential, np.zeros((0, 3)))
    with pytest.raises(ValueError, match=r"samples has shape \(2, 2, 2\): must be \(n, d\)"):
        check_symmetric(potential, np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="trials=0: must be an int >= 1"):
        check_symmetric(potential, PTS, trials=0)
    with pytest.raises(ValueError, match=r"returned shape \(1,\) for 200 pairs"):
        check_symmetric(lambda a, b: np.zeros(1), PTS)
    with pytest.raises(TypeError, match="is not callable"):
        check_symmetric(None, PTS)
    with pytest.raises(ValueError, match="rtol=-1: must be a finite number >= 0"):
        check_symmetric(potential, PTS, rtol=-1)


def test_antisymmetric_and_seed_are_checked():
    f = lambda a, b: (a - b)[:, 0]  # noqa: E731
    with pytest.raises(TypeError, match="antisymmetric='no'"):
        check_symmetric(f, PTS, antisymmetric="no")  # read as True
    with pytest.raises(TypeError, match="seed='a'"):
        check_symmetric(f, PTS, seed="a")
    with pytest.raises(TypeError, match="rtol='a'"):
        check_symmetric(f, PTS, rtol="a")
