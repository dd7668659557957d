"""The property audit: laws hold for the built-ins, violations are caught with a counterexample."""

import pickle
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import propopt as pp
from propopt.associativity import laws
from propopt.audit import (
    AssociativityError,
    AssociativityReport,
    Pair,
    Single,
    Triple,
    check_associative,
    check_commutative,
    check_identity,
)
from propopt.testing import assert_associative, elements, triples

BUILTINS = [
    pp.add,
    pp.mul,
    pp.maximum,
    pp.minimum,
    pp.logaddexp,
    pp.linear_recurrence,
    pp.matmul2x2,
]
INT_BUILTINS = [pp.add, pp.mul, pp.maximum, pp.minimum]
PROPERTY = settings(deadline=None, max_examples=30, derandomize=True)
name_of = lambda m: m.name  # noqa: E731


def samples(m, dtype=np.float64, n=64, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return tuple(rng.integers(-5, 6, n).astype(dtype) for _ in range(m.arity))
    return tuple(rng.uniform(-1.2, 1.2, n).astype(dtype) for _ in range(m.arity))


def subtraction(a, b):
    return a - b


def average(a, b):
    return (a + b) / 2


def recurrence_reversed(x, y):
    # (a1*a2, a1*b2 + b1): the maps composed in the other order, f1(f2(h))
    return x[0] * y[0], x[0] * y[1] + x[1]


def recurrence_typo(x, y):
    # (a1*a2, a2*b1 + a2*b2): b2 wrongly scaled by a2
    return x[0] * y[0], y[0] * x[1] + y[0] * y[1]


def both_sides(fn, a, b, c):
    return fn(fn(a, b), c), fn(a, fn(b, c))


# ------------------------------------------------------------ laws that hold
@pytest.mark.parametrize("m", BUILTINS, ids=name_of)
def test_builtins_are_associative_on_float64(m):
    report = check_associative(m, samples(m))
    assert isinstance(report, AssociativityReport)
    assert report.ok, str(report)
    assert report.trials == 200 and report.worst <= 1.0 and report.counterexample is None
    assert report.rtol == 1e-10 and report.atol == 0 and report.name == m.name
    assert str(report).startswith(f"associativity of {m.name}: holds on 200 random triples")


@pytest.mark.parametrize("m", INT_BUILTINS, ids=name_of)
def test_integer_builtins_are_exactly_associative(m):
    report = check_associative(m, samples(m, np.int64))
    assert report.ok and report.max_abs_diff == 0 and report.rtol == 0
    # products of large integers wrap around, which is still exactly associative
    big = np.random.default_rng(3).integers(-(2**40), 2**40, 100)
    assert check_associative(m, big, trials=500).ok


@pytest.mark.parametrize("m", BUILTINS, ids=name_of)
def test_builtins_have_their_identity(m):
    report = check_identity(m, samples(m))
    assert report.ok and report.law == "identity" and report.trials == 64, str(report)
    if m in INT_BUILTINS:
        assert check_identity(m, samples(m, np.int64)).ok


def test_reversed_composition_is_associative_so_the_audit_passes_it():
    # Not the recurrence the scan docs describe, but function composition in
    # the other order is still a composition: associative.
    rng = np.random.default_rng(0)
    a, b, c = ((rng.normal(size=5), rng.normal(size=5)) for _ in range(3))
    left, right = both_sides(recurrence_reversed, a, b, c)
    np.testing.assert_allclose(left, right, rtol=1e-12)
    assert check_associative(recurrence_reversed, (rng.normal(size=50), rng.normal(size=50))).ok


# ------------------------------------------------------- violations caught
VIOLATIONS = [
    (subtraction, lambda rng: rng.uniform(0.5, 2, 50)),
    (average, lambda rng: rng.uniform(0.5, 2, 50)),
    (recurrence_typo, lambda rng: (rng.uniform(0.5, 2, 50), rng.normal(size=50))),
]


@pytest.mark.parametrize("fn, make", VIOLATIONS, ids=lambda v: getattr(v, "__name__", ""))
def test_violations_are_reported_with_a_counterexample(fn, make):
    elems = make(np.random.default_rng(1))

    # the combine really is non-associative numerically, on an explicit triple
    def one(i):
        if isinstance(elems, np.ndarray):
            return elems[i : i + 1]
        return tuple(x[i : i + 1] for x in elems)

    left, right = both_sides(fn, one(0), one(1), one(2))
    assert not np.allclose(left, right, rtol=1e-6)

    report = check_associative(fn, elems)
    assert not report.ok and report.worst > 1 and report.max_abs_diff > 0
    ce = report.counterexample
    assert isinstance(ce, Triple) and ce._fields == ("a", "b", "c", "left", "right")
    for part in ce:
        for leaf in part if isinstance(part, tuple) else (part,):
            assert isinstance(leaf, np.ndarray) and leaf.shape == (1,)
    # the stored sides are what fn gives on the stored triple
    np.testing.assert_array_equal(fn(fn(ce.a, ce.b), ce.c), ce.left)
    np.testing.assert_array_equal(fn(ce.a, fn(ce.b, ce.c)), ce.right)
    text = str(report)
    assert text.startswith(f"associativity of {fn.__name__}: FAILS on 200 random triples")
    assert "counterexample: a=" in text and "fn(fn(a, b), c) = " in text


def test_tolerance_separates_rounding_from_small_violations():
    def nearly_add(a, b):  # off by ~1e-7 relative: a violation for float64 only
        return a + b + 1e-7 * a * a

    x = np.random.default_rng(4).uniform(1, 2, 100)
    assert not check_associative(nearly_add, x).ok
    assert check_associative(nearly_add, x.astype(np.float32)).ok
    assert check_associative(nearly_add, x, rtol=1e-5).ok


def test_float32_rounding_is_not_a_violation():
    x = (np.random.default_rng(2).normal(size=100_000) * 1e4).astype(np.float32)
    report = check_associative(pp.add, x, trials=5000)
    assert report.ok and report.rtol == 1e-4, str(report)
    assert report.max_abs_diff > 0  # the sums did round differently
    # cancellation and products: the bound scales with the operands, not the result
    for seed in range(5):
        m = tuple(np.random.default_rng(seed).uniform(-1e3, 1e3, (4, 1000)).astype(np.float32))
        assert check_associative(pp.matmul2x2, m, trials=1000, seed=seed).ok
        h = np.random.default_rng(seed).uniform(-1, 1, 1000).astype(np.float16)
        assert check_associative(pp.add, h, trials=1000, seed=seed).ok


def test_equal_nans_and_infinities_are_no_violation_but_a_one_sided_nan_is():
    x = np.array([np.inf, -np.inf, 1.0, np.nan, -2.5])
    assert check_associative(pp.add, x).ok
    assert check_associative(pp.maximum, x).ok

    def sqrt_of_sum(a, b):
        return np.sqrt(a + b)

    a, b, c = np.array([-4.0]), np.array([4.0]), np.array([0.0])
    with np.errstate(invalid="ignore"):
        left, right = both_sides(sqrt_of_sum, a, b, c)
        assert left[0] == 0 and np.isnan(right[0])
        report = check_associative(sqrt_of_sum, np.array([-4.0, 4.0, 0.0]), trials=500)
    assert not report.ok and report.worst == np.inf
    assert "nan" in str(report)


def test_integers_are_compared_exactly():
    report = check_associative(subtraction, np.arange(10))
    assert not report.ok and report.worst == np.inf and report.rtol == 0
    assert "a difference where none is tolerated" in str(report)
    # differences of huge integers do not wrap around
    big = np.array([2**62, -(2**62), 3], dtype=np.int64)
    assert check_associative(subtraction, big).max_abs_diff >= 2**62


# -------------------------------------------------------- the scan's check
def test_scan_check_raises_with_the_counterexample():
    with pytest.raises(AssociativityError, match="counterexample: a=") as info:
        pp.associative_scan(subtraction, np.arange(10.0), check=True)
    err = info.value
    assert isinstance(err, ValueError) and not err.report.ok
    assert isinstance(err.report.counterexample, Triple)
    assert "depend on how the work is split" in str(err) and "rtol" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err)

    broken = pp.Monoid(lambda a, b: a - b, 0.0, name="minus")
    with pytest.raises(AssociativityError, match="associativity of minus: FAILS"):
        pp.associative_scan(broken, np.arange(10.0), check=True)


@pytest.mark.parametrize("m", BUILTINS, ids=name_of)
def test_scan_check_passes_for_builtins(m):
    elems = samples(m, np.float32, n=300)
    out = pp.associative_scan(m, elems, check=True)
    ref = pp.associative_scan(m, elems, method="reference")
    for o, r in zip(out, ref):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------- other laws
def test_commutativity():
    assert check_commutative(pp.add, samples(pp.add)).ok
    for m in (pp.matmul2x2, pp.linear_recurrence):
        report = check_commutative(m, samples(m))
        assert not report.ok and report.law == "commutativity"
        assert isinstance(report.counterexample, Pair)
        assert str(report).startswith(f"commutativity of {m.name}: FAILS on 200 random pairs")
        assert "fn(a, b) = (" in str(report) and "but fn(b, a) = (" in str(report)


def test_identity_failure_is_reported():
    wrong = pp.Monoid(lambda a, b: a + b, identity=1.0, name="add with identity 1")
    report = check_identity(wrong, np.arange(5.0))
    assert not report.ok and report.trials == 5
    assert isinstance(report.counterexample, Single)
    assert str(report).startswith("identity of add with identity 1: FAILS on 5 elements")
    assert "(both should equal a)" in str(report)
    assert check_identity(wrong, np.arange(50.0), trials=7).trials == 7


# ------------------------------------------------- containers, axes, arrays
def test_pytree_samples_and_axis():
    def merge(x, y):  # (count, mean) pairs in a dict, elements along axis 1
        n = x["n"] + y["n"]
        return {"n": n, "mean": (x["n"] * x["mean"] + y["n"] * y["mean"]) / n}

    rng = np.random.default_rng(5)
    elems = {"n": rng.integers(1, 5, (3, 40)).astype(float), "mean": rng.normal(size=(3, 40))}
    assert check_associative(merge, elems, axis=1).ok
    assert check_associative(merge, elems, axis=-1).ok

    def mean_only(x, y):
        return {"n": x["n"] + y["n"], "mean": (x["mean"] + y["mean"]) / 2}

    report = check_associative(mean_only, elems, axis=1)
    assert not report.ok
    a = report.counterexample.a
    assert set(a) == {"n", "mean"} and a["mean"].shape == (3, 1)
    assert len(report.where) == 2 and report.where[1] == 0
    assert "at index [" in str(report) and "{'mean': " in str(report)


def test_namedtuple_samples():
    Affine = namedtuple("Affine", "a b")

    def compose(x, y):
        return Affine(x.a * y.a, y.a * x.b + y.b)

    rng = np.random.default_rng(6)
    elems = Affine(rng.normal(size=30), rng.normal(size=30))
    assert check_associative(compose, elems).ok
    report = check_associative(lambda x, y: Affine(x.a * y.a, x.b + 2 * y.b), elems)
    assert not report.ok and "Affine(" in str(report)
    assert isinstance(report.counterexample.a, Affine)


def test_monoid_with_many_positions_is_audited_on_a_subset():
    x = np.random.default_rng(7).normal(size=(20, 50, 100))
    assert check_associative(pp.add, x).ok
    report = check_associative(pp.Monoid(lambda a, b: a - b, 0.0, name="minus"), x)
    assert not report.ok
    assert report.counterexample.a.shape == (1, laws.MAX_POSITIONS)


def test_torch_samples():
    torch = pytest.importorskip("torch")
    x = torch.linspace(-1, 1, 20, dtype=torch.float64, requires_grad=True)
    seen = []

    def add(a, b):
        seen.append(type(a))
        return a + b

    assert check_associative(add, x).ok
    assert seen and all(t is torch.Tensor for t in seen)  # a plain fn sees torch tensors
    assert check_associative(pp.add, x).ok  # a monoid runs on NumPy copies
    report = check_associative(subtraction, x)
    assert not report.ok and isinstance(report.counterexample.a, np.ndarray)
    assert check_identity(pp.linear_recurrence, (x.detach(), x.detach())).ok


def test_dask_samples():
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.random.default_rng(8).normal(size=1000), chunks=100)
    assert check_associative(pp.add, x).ok
    assert not check_associative(subtraction, x).ok
    m = da.from_array(np.random.default_rng(8).normal(size=(30, 2000)), chunks=(10, 500))
    assert check_associative(pp.add, m).ok


# ---------------------------------------------------------------- bad input
def test_bad_input():
    x = np.arange(3.0)
    for trials in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="trials must be an int >= 1"):
            check_associative(pp.add, x, trials=trials)
    with pytest.raises(ValueError, match="trials"):
        check_commutative(pp.add, x, trials=0)
    with pytest.raises(ValueError, match="samples has length 0 along axis 0"):
        check_associative(pp.add, np.zeros(0))
    with pytest.raises(ValueError, match="samples has length 0 along axis 1"):
        check_identity(pp.add, np.zeros((3, 0)), axis=1)
    with pytest.raises(ValueError, match="samples holds no arrays"):
        check_associative(pp.add, ())
    with pytest.raises(ValueError, match="0-dimensional"):
        check_associative(pp.add, np.array(1.0))
    with pytest.raises(ValueError, match="axis=2 is out of range"):
        check_associative(pp.add, np.zeros((2, 2)), axis=2)
    with pytest.raises(TypeError, match=r"samples\[1\]\[0\] is a float, not an array"):
        check_associative(subtraction, (x, [1.0, 2.0]))
    with pytest.raises(ValueError, match="'linear_recurrence' combines elements of 2"):
        check_associative(pp.linear_recurrence, x)
    with pytest.raises(TypeError, match="'logaddexp' cannot combine samples of dtype int64"):
        check_associative(pp.logaddexp, np.arange(3))
    with pytest.raises(TypeError, match="check_identity needs a Monoid"):
        check_identity(subtraction, x)
    with pytest.raises(ValueError, match="fn must return the structure of its inputs"):
        check_associative(lambda a, b: (a[0] + b[0],), (x, x))
    with pytest.raises(ValueError, match="fn must combine elementwise"):
        check_associative(lambda a, b: a[:1] + b[:1], x)


def test_strategies_bad_input():
    with pytest.raises(ValueError, match="'logaddexp' does not combine dtype int64"):
        elements(pp.logaddexp, np.int64)
    with pytest.raises(ValueError, match="arity is required"):
        elements(None)
    with pytest.raises(ValueError, match="min_value"):
        elements(pp.add, min_value=2.0, max_value=1.0)


# ---------------------------------------------------------- property tests
@pytest.mark.parametrize("m", BUILTINS, ids=name_of)
@PROPERTY
@given(data=st.data())
def test_law_holds_on_hypothesis_triples(m, data):
    dtype = data.draw(st.sampled_from([np.float64, np.float32]), label="dtype")
    abc = data.draw(triples(m, dtype, extra_shape=(2,)), label="abc")
    for e in abc:
        assert len(e) == m.arity and all(x.shape == (1, 2) and x.dtype == dtype for x in e)
    assert_associative(m, *abc)


@pytest.mark.parametrize("m", BUILTINS, ids=name_of)
@PROPERTY
@given(data=st.data())
def test_audit_passes_builtins_on_hypothesis_elements(m, data):
    dtypes = [np.float64, np.float32] + ([np.int64, np.int32] if m in INT_BUILTINS else [])
    dtype = data.draw(st.sampled_from(dtypes), label="dtype")
    elems = data.draw(elements(m, dtype), label="elems")
    assert len(elems) == m.arity and 1 <= elems[0].shape[0] <= 40
    assert all(np.isfinite(x).all() for x in elems)
    report = check_associative(m, elems, trials=50)
    assert report.ok, str(report)
    assert check_identity(m, elems).ok


@PROPERTY
@given(elements(pp.linear_recurrence, n=st.integers(1, 60)))
def test_scan_matches_the_sequential_fold_on_hypothesis_elements(elems):
    out = pp.associative_scan(pp.linear_recurrence, elems, check=True)
    ref = pp.associative_scan(pp.linear_recurrence, elems, method="reference")
    for o, r in zip(out, ref):
        np.testing.assert_allclose(o, r, rtol=1e-9, atol=1e-9)


@PROPERTY
@given(triples(None, arity=1, min_value=0.5, max_value=2.0))
def test_assert_associative_catches_a_broken_plain_combine(abc):
    def plus(x, y):
        return (x[0] + y[0],)

    def minus(x, y):
        return (x[0] - y[0],)

    assert_associative(plus, *abc)
    with pytest.raises(AssertionError, match="associativity of minus: FAILS"):
        assert_associative(minus, *abc)


def test_assert_associative_on_batches_and_bad_shapes():
    x = np.arange(1.0, 7.0)
    assert_associative(pp.add, (x,), (x,), (x,))
    with pytest.raises(AssertionError, match="counterexample"):
        assert_associative(pp.Monoid(lambda a, b: a - b, 0.0), (x,), (x + 1,), (x,))
    with pytest.raises(ValueError, match="pass batches of one shape"):
        assert_associative(pp.add, (x,), (x[:2],), (x,))


@pytest.mark.parametrize(
    "kw, error",
    [
        ({"rtol": -1}, ValueError),
        ({"rtol": float("nan")}, ValueError),
        ({"rtol": "a"}, TypeError),
        ({"atol": -1.0}, ValueError),
        ({"seed": "a"}, TypeError),
        ({"seed": -2}, ValueError),
    ],
)
@pytest.mark.parametrize("check", [check_associative, check_commutative, check_identity])
def test_tolerances_and_seed_are_checked(check, kw, error):
    """rtol=-1 and rtol=nan passed every law; rtol='a' failed inside numpy."""
    name = next(iter(kw))
    with pytest.raises(error, match=rf"^{name}="):
        check(pp.add, np.arange(10.0), **kw)


def test_fn_that_is_not_callable_is_named():
    with pytest.raises(TypeError, match="fn=5 is not callable"):
        check_associative(5, np.arange(10.0))
