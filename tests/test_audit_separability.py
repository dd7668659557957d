"""Separability and locality audits: verdicts on kernels whose properties are known."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from propopt.audit import DecayReport, LowRankReport, check_decay, check_low_rank


def newton(xi, xj):
    with np.errstate(divide="ignore"):
        return 1.0 / np.linalg.norm(xi - xj, axis=-1)


def gravity(xi, xj):
    d = xj - xi
    return d / np.linalg.norm(d, axis=-1, keepdims=True) ** 3


def lennard_jones(xi, xj):
    r = np.linalg.norm(xi - xj, axis=-1)
    return 4.0 * (r**-12 - r**-6)


def gaussian(xi, xj):
    return np.exp(-np.sum((xi - xj) ** 2, axis=-1) / 50.0)


def oscillating(xi, xj):
    return np.sin(1e3 * np.sum(xi * xj, axis=-1))  # no far-field structure


def constant(xi, xj):
    return np.ones(len(xi))


@pytest.mark.parametrize("f", [newton, gravity, constant])
def test_separable_kernels_have_small_saturated_rank(f):
    rep = check_low_rank(f, rtol=1e-6, n=120)
    assert isinstance(rep, LowRankReport)
    assert rep.verdict == "applies" and rep.ok
    assert rep.rank < 40 and rep.rank <= rep.rank_half * 1.25 + 2
    assert rep.shape == (120, 120) and rep.separation == 4.0
    text = str(rep)
    assert f"separability of {f.__name__}: applies: numerical rank {rep.rank} of 120" in text


def test_rank_grows_with_tolerance_and_falls_with_separation():
    ranks = [check_low_rank(newton, rtol=t, n=100).rank for t in (1e-3, 1e-6, 1e-9)]
    assert ranks[0] < ranks[1] < ranks[2]
    near, far = (check_low_rank(newton, n=100, separation=s).rank for s in (2.5, 10.0))
    assert far < near


def test_non_separable_kernel_and_full_rank_matrix():
    rep = check_low_rank(oscillating, n=80)
    assert rep.verdict == "no" and not rep.ok and rep.rank == 80
    M = np.random.default_rng(0).normal(size=(50, 40))
    rep = check_low_rank(M)
    assert rep.verdict == "no" and rep.rank == 40 and rep.separation is None
    assert "50 x 40 block" in str(rep)


def test_matrix_of_known_rank_and_given_clusters():
    rng = np.random.default_rng(1)
    M = rng.normal(size=(60, 5)) @ rng.normal(size=(5, 70))
    rep = check_low_rank(M, rtol=1e-8)
    assert rep.rank == 5 and rep.rank_half == 5 and rep.verdict == "applies"
    assert np.isclose(rep.compression, 60 * 70 / (5 * 130))
    X = rng.uniform(0, 1, (30, 2))
    Y = rng.uniform(0, 1, (20, 2)) + [10.0, 0.0]
    rep = check_low_rank(newton, X, Y, rtol=1e-6)
    assert rep.shape == (30, 20) and rep.separation is None and rep.rank < 10
    assert np.isclose(rep.singular_values[0], 1.0)


def test_partial_when_rank_still_grows():
    # rank 40 of 100, but only 10 of it in the half-size block: not saturated
    d = np.zeros(100)
    d[:10] = 1.0
    d[50:80] = 1.0
    rep = check_low_rank(np.diag(d))
    assert (rep.rank, rep.rank_half, rep.verdict, rep.ok) == (40, 10, "partial", False)


@pytest.mark.parametrize(
    "f, exponent, verdict",
    [(newton, 1.0, "partial"), (gravity, 2.0, "partial"), (lennard_jones, 6.0, "applies")],
)
def test_power_law_exponents(f, exponent, verdict):
    rep = check_decay(f)
    assert isinstance(rep, DecayReport)
    assert abs(rep.exponent - exponent) < 0.05 and rep.r2 > 0.999
    assert rep.verdict == verdict and rep.model == "power"
    assert rep.ok == (verdict == "applies")
    text = str(rep)
    assert f"locality of {f.__name__}: {verdict}: |f| ~ r^-" in text


def test_faster_than_any_power_and_no_decay():
    rep = check_decay(gaussian)
    assert rep.verdict == "applies" and rep.model == "faster than any power"
    assert "faster than any power" in str(rep)
    rep = check_decay(constant)
    assert rep.verdict == "no" and rep.model == "none" and abs(rep.exponent) < 1e-12
    assert "does not fall" in str(rep)
    assert len(rep.distances) == 16 and rep.magnitudes.shape == (16,)


def test_bad_input():
    with pytest.raises(ValueError, match=r"rtol=2: must lie in the open interval \(0, 1\)"):
        check_low_rank(newton, rtol=2)
    with pytest.raises(ValueError, match=r"separation=1.5: must be > 2"):
        check_low_rank(newton, separation=1.5)
    with pytest.raises(ValueError, match=r"kernel_or_matrix has ndim 1"):
        check_low_rank(np.ones(4))
    with pytest.raises(ValueError, match=r"kernel_or_matrix\[0, 1\] is not finite"):
        check_low_rank(np.array([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"newton\(X_i, X_j\) is not finite for pair 0"):
        check_low_rank(newton, np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"X\[1\] = \[nan, 0.0\] is not finite"):
        check_low_rank(newton, np.array([[0.0, 0], [np.nan, 0]]), np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"Y has shape \(2, 3\): must be \(n, 2\) points"):
        check_low_rank(newton, np.ones((2, 2)), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"returned shape \(\): a pair function"):
        check_low_rank(lambda a, b: 1.0)
    with pytest.raises(ValueError, match=r"r_min=5, r_max=1: need 0 < r_min < r_max"):
        check_decay(newton, r_min=5, r_max=1)
    with pytest.raises(ValueError, match=r"distances=2: must be an int >= 3"):
        check_decay(newton, distances=2)
    with pytest.raises(TypeError, match="must be callable"):
        check_decay(np.ones(3))
    with pytest.raises(ValueError, match="is 0 at the smallest distance"):
        check_decay(lambda a, b: np.zeros(len(a)))


def test_evidence_lines_for_the_audit_table():
    rank, decay = check_low_rank(newton, n=60), check_decay(gravity)
    assert rank.evidence in str(rank) and rank.evidence.startswith("numerical rank ")
    assert decay.evidence.startswith("|f| ~ r^-2 (R^2 = 1.000) over r in [1, 1000]")


@settings(max_examples=15)
@given(alpha=st.floats(0.3, 8.0), scale=st.floats(1e-3, 1e3))
def test_hypothesis_decay_exponent_of_a_power_law(alpha, scale):
    def power(xi, xj):
        return scale * np.linalg.norm(xi - xj, axis=-1) ** -alpha

    rep = check_decay(power, ndim=2)
    assert abs(rep.exponent - alpha) < 0.02 and rep.r2 > 0.999
    assert rep.verdict == ("applies" if alpha > 2 else "partial")


def test_complex_blocks_keep_their_imaginary_part():
    """[[1, i], [i, -1]] has rank 1; its real part, which was audited, rank 2."""
    assert check_low_rank(np.array([[1, 1j], [1j, -1]])).rank == 1
    x = np.linspace(0, 1, 8)[:, None]
    y = np.linspace(5, 6, 8)[:, None]  # exp(i (y - x)) = exp(iy) exp(-ix): rank 1; cos: rank 2
    rep = check_low_rank(lambda a, b: np.exp(1j * (b - a)[:, 0]), X=x, Y=y, rtol=1e-8)
    assert rep.rank == 1


def test_arguments_that_are_not_numbers():
    with pytest.raises(TypeError, match="rtol='a'"):
        check_low_rank(np.eye(3), rtol="a")
    with pytest.raises(TypeError, match="kernel_or_matrix has dtype <U1"):
        check_low_rank(np.array([["a"]]))
    with pytest.raises(TypeError, match="r_min='1'"):
        check_decay(lambda a, b: 1 / np.linalg.norm(a - b, axis=-1), r_min="1")
