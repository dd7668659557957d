"""The associativity audit: laws hold for the built-ins, violations are caught."""

import numpy as np
import pytest
from hypothesis import given

import propopt as pp
from propopt.audit import (
    AssociativityError,
    check_associative,
    check_commutative,
    check_identity,
)
from propopt.testing import assert_associative, elements, triples

BUILTINS = [pp.add, pp.mul, pp.maximum, pp.minimum, pp.logaddexp, pp.linear_recurrence,
            pp.matmul2x2]  # fmt: skip


def samples(m, dtype=np.float64, n=64):
    rng = np.random.default_rng(0)
    if np.dtype(dtype).kind == "i":
        return tuple(rng.integers(-5, 6, n).astype(dtype) for _ in range(m.arity))
    return tuple(rng.uniform(-1.2, 1.2, n).astype(dtype) for _ in range(m.arity))


@pytest.mark.parametrize("m", BUILTINS, ids=lambda m: m.name)
def test_builtins_are_associative_with_identity(m):
    report = check_associative(m, samples(m))
    assert report.ok, str(report)
    assert report.worst <= 1.0 and report.counterexample is None
    assert check_identity(m, samples(m)).ok


@pytest.mark.parametrize("m", [pp.add, pp.mul, pp.maximum, pp.minimum], ids=lambda m: m.name)
def test_integer_builtins_are_exactly_associative(m):
    report = check_associative(m, samples(m, np.int64))
    assert report.ok and report.max_abs_diff == 0


@pytest.mark.parametrize(
    "fn, name",
    [
        (lambda a, b: a - b, "subtraction"),
        (lambda a, b: (a + b) / 2, "mean of two"),
        (lambda x, y: (x[0] * y[0], y[0] * x[1] + 2 * y[1]), "affine maps with a typo"),
    ],
)
def test_violations_are_reported_with_a_counterexample(fn, name):
    rng = np.random.default_rng(1)
    data = rng.uniform(0.5, 2, 50)
    elems = data if name != "affine maps with a typo" else (data, rng.normal(size=50))
    report = check_associative(fn, elems)
    assert not report.ok, name
    assert report.worst > 1
    assert set(report.counterexample) == {"a", "b", "c", "left", "right"}
    assert "FAILS" in str(report)


def test_float32_rounding_is_not_a_violation():
    x = np.random.default_rng(2).normal(size=10_000).astype(np.float32) * 1e3
    assert check_associative(pp.add, x, trials=2000).ok


def test_scan_check_raises_with_counterexample():
    with pytest.raises(AssociativityError, match="counterexample"):
        pp.associative_scan(lambda a, b: a - b, np.arange(10.0), check=True)
    out = pp.associative_scan(pp.add, np.arange(10.0), check=True)
    assert out[-1] == 45


def test_commutativity():
    assert check_commutative(pp.add, samples(pp.add)).ok
    report = check_commutative(pp.matmul2x2, samples(pp.matmul2x2))
    assert not report.ok and report.property == "commutativity"


def test_identity_failure_is_reported():
    wrong = pp.Monoid(lambda a, b: a + b, identity=1.0, name="add with identity 1")
    report = check_identity(wrong, np.arange(5.0))
    assert not report.ok and "identity of add with identity 1" in str(report)


def test_torch_samples():
    torch = pytest.importorskip("torch")
    x = torch.linspace(-1, 1, 20, dtype=torch.float64)
    assert check_associative(pp.add, x).ok
    assert not check_associative(lambda a, b: a - b, x).ok


def test_bad_input():
    with pytest.raises(ValueError, match="trials=0 must be an int >= 1"):
        check_associative(pp.add, np.arange(3.0), trials=0)
    with pytest.raises(ValueError, match="samples has length 0"):
        check_associative(pp.add, np.zeros(0))
    with pytest.raises(ValueError, match="samples holds no arrays"):
        check_associative(pp.add, ())


@pytest.mark.parametrize("m", BUILTINS, ids=lambda m: m.name)
def test_law_holds_on_hypothesis_triples(m):
    @given(triples(m))
    def law(abc):
        assert_associative(m, *abc)

    law()


@pytest.mark.parametrize("m", [pp.add, pp.linear_recurrence, pp.matmul2x2], ids=lambda m: m.name)
def test_scan_matches_reference_on_hypothesis_inputs(m):
    @given(elements(m, n=60), elements(m, np.int64, n=30))
    def law(fl, it):
        for elems, rtol in ((fl, 1e-9), (it, 0)):
            ref = pp.associative_scan(m, elems, method="reference")
            for method in ("cpu", "generic"):
                out = pp.associative_scan(m, elems, method=method)
                for o, r in zip(out, ref):
                    np.testing.assert_allclose(o, r, rtol=rtol, atol=1e-9 * (rtol > 0))

    law()


def test_assert_associative_catches_a_broken_combine():
    a, b, c = (np.array([2.0]),), (np.array([3.0]),), (np.array([5.0]),)
    with pytest.raises(AssertionError, match="associativity fails"):
        assert_associative(pp.Monoid(lambda x, y: x - y, 0.0), *(v[0] for v in (a, b, c)))
