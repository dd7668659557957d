"""Bad input gets an error that names the argument, the value and the fix."""

import numpy as np
import pytest

import propopt as pp
from propopt import _kinds


def test_lengths_differ_along_axis():
    with pytest.raises(ValueError, match=r"elems\[1\] has 4.*same length"):
        pp.associative_scan(pp.linear_recurrence, (np.ones(5), np.ones(4)))


@pytest.mark.parametrize("axis", [1, -2, 5])
def test_axis_out_of_range(axis):
    with pytest.raises(ValueError, match=f"axis={axis} is out of range"):
        pp.associative_scan(pp.add, np.ones(5), axis=axis)


def test_axis_not_int():
    with pytest.raises(TypeError, match="axis must be an int"):
        pp.associative_scan(pp.add, np.ones(5), axis=0.0)


def test_zero_dimensional():
    with pytest.raises(ValueError, match="0-dimensional"):
        pp.associative_scan(pp.add, np.array(1.0))


def test_exclusive_without_identity():
    with pytest.raises(ValueError, match="exclusive=True needs identity="):
        pp.associative_scan(lambda a, b: a + b, np.ones(3), exclusive=True)
    out = pp.associative_scan(lambda a, b: a + b, np.ones(3), exclusive=True, identity=0.0)
    assert out.tolist() == [0.0, 1.0, 2.0]


def test_identity_structure_mismatch():
    with pytest.raises(ValueError, match="identity has structure"):
        pp.associative_scan(
            lambda a, b: (a[0] + b[0], a[1] + b[1]),
            (np.ones(3), np.ones(3)),
            exclusive=True,
            identity=[0.0, 0.0, 0.0],
        )


def test_fn_returns_other_structure():
    with pytest.raises(
        ValueError, match=r"fn returned .* (but elems is|for elements of structure)"
    ):
        pp.associative_scan(lambda a, b: a[0] + b[0], (np.ones(3), np.ones(3)))


def test_fn_returns_other_shape():
    with pytest.raises(ValueError, match="fn returned leaf 0 of shape"):
        pp.associative_scan(lambda a, b: (a + b).sum(keepdims=True), np.ones(7))


def test_monoid_arity_mismatch():
    with pytest.raises(ValueError, match="combines elements of 2 array"):
        pp.associative_scan(pp.linear_recurrence, np.ones(3))


def test_monoid_dtype_refused():
    with pytest.raises(TypeError, match=r"logaddexp.*cannot combine elems of dtype int64"):
        pp.associative_scan(pp.logaddexp, np.arange(3))
    with pytest.raises(TypeError, match="cannot combine elems of dtype bool"):
        pp.associative_scan(pp.add, np.ones(3, bool))


def test_monoid_leaves_differ_in_dtype_or_shape():
    with pytest.raises(ValueError, match="one shape and dtype"):
        pp.associative_scan(pp.linear_recurrence, (np.ones(3), np.ones(3, np.float32)))
    with pytest.raises(ValueError, match="one shape and dtype"):
        pp.associative_scan(pp.linear_recurrence, (np.ones((3, 2)), np.ones((3, 1))))


def test_unknown_method_lists_valid_ones():
    names = "'auto', 'tiled', 'native', 'generic', 'reference'"
    with pytest.raises(ValueError, match=names):
        pp.associative_scan(pp.add, np.ones(3), method="gpu")
    with pytest.raises(ValueError, match="device='gpu' is not one of 'auto', 'cpu', 'cuda'"):
        pp.associative_scan(pp.add, np.ones(3), device="gpu")


def test_kernel_methods_need_a_monoid():
    with pytest.raises(ValueError, match="method='tiled' needs a Monoid"):
        pp.associative_scan(lambda a, b: a + b, np.ones(3), method="tiled")


def test_device_must_be_where_the_arrays_are():
    with pytest.raises(ValueError, match=r"^device='cuda', but the data \(elems\) is on 'cpu'"):
        pp.associative_scan(pp.add, np.ones(3), device="cuda")
    with pytest.raises(ValueError, match=r"^method='native' runs on device 'cuda', but the data"):
        pp.associative_scan(pp.add, np.ones(3), method="native")
    np.testing.assert_array_equal(
        pp.associative_scan(pp.add, np.ones(3), method="tiled", device="cpu"), [1, 2, 3]
    )


@pytest.mark.parametrize("old, new", [("cpu", "method='tiled', device='cpu'"), ("generic", None)])
def test_retired_method_spellings_warn_and_give_the_same_answer(old, new):
    x = np.arange(1.0, 6.0)
    if new is None:  # an algorithm's name: no warning
        got = pp.associative_scan(pp.add, x, method=old)
    else:
        with pytest.warns(DeprecationWarning, match=rf"method={old!r}\) is deprecated: pass {new}"):
            got = pp.associative_scan(pp.add, x, method=old)
    np.testing.assert_array_equal(got, np.cumsum(x))


def test_retired_spelling_contradicting_device_is_an_error():
    with pytest.raises(ValueError, match=r"method='cpu', device='cuda'\) is contradictory"):
        pp.associative_scan(pp.add, np.ones(3), method="cpu", device="cuda")


def test_not_an_array():
    with pytest.raises(TypeError, match="not an array"):
        pp.associative_scan(pp.add, [1.0, 2.0])


def test_empty_pytree():
    with pytest.raises(ValueError, match="holds no arrays"):
        pp.associative_scan(pp.add, ())


def test_mixed_array_types():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="mixes array types or devices"):
        pp.associative_scan(pp.linear_recurrence, (np.ones(3), torch.ones(3, dtype=torch.float64)))


def test_monoid_combine_arity_checked():
    with pytest.raises(ValueError, match="takes 3 arguments but the identity has 1"):
        pp.Monoid(lambda a, b, c: a, identity=0.0)


def test_a_non_associative_callable_is_caught_by_default():
    from propopt.audit import AssociativityError

    x = np.random.default_rng(0).normal(size=1000)
    with pytest.raises(AssociativityError, match="pass check=False to skip this check") as info:
        pp.associative_scan(lambda p, q: p - q, x)
    assert info.value.automatic and not info.value.report.ok
    # opting out gives the (split-dependent) result without a check
    out = pp.associative_scan(lambda p, q: p - q, x, check=False, method="reference")
    assert out[1] == x[0] - x[1]
    # check=True names the explicit flag instead
    with pytest.raises(AssociativityError, match="scan without check=True"):
        pp.associative_scan(lambda p, q: p - q, x, check=True)


def test_the_automatic_check_runs_once_per_callable(monkeypatch):
    from propopt.associativity.scan import _law_check as scan_mod

    calls = []

    def add(p, q):
        calls.append(len(p))
        return p + q

    x = np.arange(500.0)
    np.testing.assert_array_equal(pp.associative_scan(add, x), np.cumsum(x))
    first = len(calls)
    pp.associative_scan(add, x)
    second = len(calls) - first
    assert first > second  # the audit's four batched calls happen once
    # lambdas written in a loop share their code and are checked once too
    for _ in range(3):
        pp.associative_scan(lambda p, q: p + q, x)
    assert any(code is not None for code in scan_mod._passed_code.values())
    # monoids are not audited automatically (built-ins hold the law)
    monkeypatch.setattr(scan_mod, "_unchecked", lambda fn: pytest.fail("audited a monoid"))
    pp.associative_scan(pp.add, x)


@pytest.mark.parametrize(
    "kw",
    [{"reverse": "False"}, {"reverse": 1}, {"exclusive": 2}, {"exclusive": "no"}, {"check": "yes"}],
)
def test_switches_are_bools(kw):
    """A truthy string or int must not switch an option on: reverse='False' reversed the scan."""
    name = next(iter(kw))
    with pytest.raises(TypeError, match=rf"^{name}=.*must be True or False"):
        pp.associative_scan(pp.add, np.array([1.0, 2.0, 3.0]), **kw)
    rev = pp.associative_scan(pp.add, np.array([1.0, 2.0, 3.0]), reverse=np.True_)
    assert rev.tolist() == [6.0, 5.0, 3.0]


def test_monoid_identity_of_an_unknown_dtype():
    with pytest.raises(TypeError, match=r"dtype='banana' is not a NumPy dtype"):
        pp.maximum.identity("banana")


def test_torch_method_refusals_name_the_fix():
    torch = pytest.importorskip("torch")
    from propopt.associativity.scan import _backends

    with pytest.raises(ValueError, match=r"^method='native' runs on device 'cuda', but the data"):
        pp.associative_scan(pp.add, torch.ones(3), method="native")

    # the refusals that need a CUDA tensor are checked on the plan itself
    def refusal(fn, x, reverse=False):
        plan = _backends.ScanPlan(fn, None, [x], _kinds.TORCH_CUDA, 0, reverse, False)
        return _backends._refuse_native(plan)

    assert "'add', 'mul', 'logaddexp'" in str(refusal(pp.maximum, torch.ones(3)))
    assert isinstance(refusal(pp.add, torch.ones(3, dtype=torch.int8)), TypeError)
    assert "reverse" in str(refusal(pp.add, torch.ones(3), reverse=True))
    assert refusal(pp.add, torch.ones(3)) is None
