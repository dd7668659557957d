"""Bad inputs of ``audit``: one test per case (``_judge``)."""

from __future__ import annotations

import numpy as np
import pytest

import propopt as pp
from tests.bad_inputs._judge import Case, Check, Either, Error, Table, Value, judge, rng

try:
    import torch
except ImportError:  # the cases that need it are left out
    torch = None

try:
    import ml_dtypes
except ImportError:  # the cases that need it are left out
    ml_dtypes = None

pytestmark = pytest.mark.bad_inputs


def audit_cases(case: Table) -> None:
    from propopt import audit

    x = lambda: np.arange(10.0)  # noqa: E731
    pts = lambda: rng(13).normal(size=(10, 3))  # noqa: E731
    ok_is = lambda want: Check(lambda r: (r.ok == want, f"ok={r.ok}"))  # noqa: E731
    case(
        "check_associative trials=0",
        lambda: audit.check_associative(pp.add, x(), trials=0),
        Error("trials"),
    )
    case(
        "check_associative trials=2.5",
        lambda: audit.check_associative(pp.add, x(), trials=2.5),
        Error("trials"),
    )
    case(
        "check_associative rtol=-1",
        lambda: audit.check_associative(pp.add, x(), rtol=-1),
        Error("rtol"),
    )
    case(
        "check_associative rtol=nan",
        lambda: audit.check_associative(pp.add, x(), rtol=float("nan")),
        Error("rtol"),
    )
    case(
        "check_associative rtol='a'",
        lambda: audit.check_associative(pp.add, x(), rtol="a"),
        Error("rtol"),
    )
    case(
        "check_associative atol=-1",
        lambda: audit.check_associative(pp.add, x(), atol=-1.0),
        Error("atol"),
    )
    case(
        "check_associative atol=inf",
        lambda: audit.check_associative(np.subtract, x(), atol=float("inf")),
        Either(ok_is(True), "atol"),
    )
    case("check_associative fn=5", lambda: audit.check_associative(5, x()), Error("fn"))
    case(
        "check_associative empty samples",
        lambda: audit.check_associative(pp.add, np.zeros(0)),
        Error("samples"),
    )
    case(
        "check_associative list samples",
        lambda: audit.check_associative(pp.add, [1.0, 2.0, 3.0]),
        Either(ok_is(True), "samples"),
    )
    case(
        "check_associative axis=2",
        lambda: audit.check_associative(pp.add, x(), axis=2),
        Error("axis"),
    )
    case(
        "check_associative seed='a'",
        lambda: audit.check_associative(pp.add, x(), seed="a"),
        Error("seed"),
    )
    case(
        "check_associative NaN samples",
        lambda: audit.check_associative(pp.add, np.array([np.nan, 1.0, 2.0])),
        ok_is(True),
    )
    case(
        "check_associative np.subtract fails",
        lambda: audit.check_associative(np.subtract, x()),
        ok_is(False),
    )
    case(
        "check_associative complex add",
        lambda: audit.check_associative(pp.add, x() + 1j),
        ok_is(True),
    )
    if ml_dtypes is not None:
        case(
            "check_associative bfloat16 add",
            lambda: audit.check_associative(pp.add, x().astype(ml_dtypes.bfloat16)),
            ok_is(True),
        )
    if torch is not None:
        case(
            "check_associative torch requiring grad",
            lambda: audit.check_associative(
                lambda a, b: a + b, torch.arange(10.0, requires_grad=True)
            ),
            ok_is(True),
        )
    case(
        "check_associative fn returning a str",
        lambda: audit.check_associative(lambda a, b: "x", x()),
        Error("fn"),
    )
    case(
        "check_commutative matmul2x2 fails",
        lambda: audit.check_commutative(pp.matmul2x2, tuple(rng(0).normal(size=(4, 20)))),
        ok_is(False),
    )
    case(
        "check_commutative trials=-1",
        lambda: audit.check_commutative(pp.add, x(), trials=-1),
        Error("trials"),
    )
    case(
        "check_identity of a plain function",
        lambda: audit.check_identity(lambda a, b: a + b, x()),
        Error("monoid", "Monoid"),
    )
    case(
        "check_identity wrong identity fails",
        lambda: audit.check_identity(pp.Monoid(lambda a, b: a * b, 0.0), x() + 1),
        ok_is(False),
    )
    case(
        "check_identity trials=0",
        lambda: audit.check_identity(pp.add, x(), trials=0),
        Error("trials"),
    )
    sub0 = lambda a, b: (a - b)[:, 0]  # noqa: E731
    case(
        "check_symmetric, antisymmetric f fails",
        lambda: audit.check_symmetric(sub0, pts()),
        ok_is(False),
    )
    case(
        "check_symmetric antisymmetric=True holds",
        lambda: audit.check_symmetric(sub0, pts(), antisymmetric=True),
        ok_is(True),
    )
    case(
        "check_symmetric antisymmetric='no'",
        lambda: audit.check_symmetric(sub0, pts(), antisymmetric="no"),
        Error("antisymmetric"),
    )
    case(
        "check_symmetric NaN samples",
        lambda: audit.check_symmetric(sub0, np.array([[np.nan, 0, 0], [1, 1, 1]])),
        Error("samples"),
    )
    case(
        "check_symmetric complex samples",
        lambda: audit.check_symmetric(sub0, pts() + 1j),
        Either(ok_is(False), "samples"),
    )
    case(
        "check_symmetric f returning a scalar",
        lambda: audit.check_symmetric(lambda a, b: 1.0, pts()),
        Error("pair_fn", "<lambda>"),
    )
    case(
        "check_symmetric trials=0",
        lambda: audit.check_symmetric(sub0, pts(), trials=0),
        Error("trials"),
    )
    case(
        "check_low_rank of a complex rank-1 matrix",
        lambda: audit.check_low_rank(np.array([[1, 1j], [1j, -1]])).rank,
        Either(Value(1), "kernel_or_matrix"),
    )
    case(
        "check_low_rank of a complex kernel",
        lambda: (
            audit.check_low_rank(
                lambda a, b: np.exp(1j * np.linalg.norm(a - b, axis=-1)), rtol=0.5
            ).rank
        ),
        Either(Check(lambda r: (r >= 1, f"rank {r}")), "kernel_or_matrix"),
        reading=None,
    )
    case(
        "check_low_rank rtol='a'", lambda: audit.check_low_rank(np.eye(3), rtol="a"), Error("rtol")
    )
    case("check_low_rank 1-D", lambda: audit.check_low_rank(np.ones(3)), Error("kernel_or_matrix"))
    case(
        "check_low_rank NaN",
        lambda: audit.check_low_rank(np.array([[np.nan]])),
        Error("kernel_or_matrix"),
    )
    case(
        "check_low_rank n=0",
        lambda: audit.check_low_rank(lambda a, b: np.ones(len(a)), n=0),
        Error("n"),
    )
    if torch is not None:
        case(
            "check_low_rank torch requiring grad",
            lambda: audit.check_low_rank(torch.eye(3, requires_grad=True)).rank,
            Value(3),
        )
    case(
        "check_low_rank string matrix",
        lambda: audit.check_low_rank(np.array([["a"]])),
        Error("kernel_or_matrix"),
    )
    case("check_low_rank 1e300 * I", lambda: audit.check_low_rank(np.eye(3) * 1e300).rank, Value(3))
    case(
        "check_low_rank X, Y dimensions differ",
        lambda: audit.check_low_rank(
            lambda a, b: np.ones(len(a)), X=np.ones((3, 2)), Y=np.ones((3, 3))
        ),
        Error("Y", "X"),
    )
    inv_r = lambda a, b: 1 / np.linalg.norm(a - b, axis=-1)  # noqa: E731
    case("check_decay r_min=-1", lambda: audit.check_decay(inv_r, r_min=-1), Error("r_min"))
    case(
        "check_decay r_max < r_min",
        lambda: audit.check_decay(inv_r, r_min=10, r_max=1),
        Error("r_min", "r_max"),
    )
    case(
        "check_decay distances=1", lambda: audit.check_decay(inv_r, distances=1), Error("distances")
    )
    case("check_decay r_min='1'", lambda: audit.check_decay(inv_r, r_min="1"), Error("r_min"))
    case(
        "check_decay of 1/r: exponent 1",
        lambda: audit.check_decay(inv_r).exponent,
        Value(1.0, rtol=1e-3),
    )
    case("audit_table kind='op'", lambda: audit.audit_table(np.add, kind="op"), Error("kind"))
    case("audit_table(3)", lambda: audit.audit_table(3), Error("fn"))
    case("audit_table ndim=0", lambda: audit.audit_table(np.add, ndim=0), Error("ndim"))
    case(
        "audit_table three-argument fn", lambda: audit.audit_table(lambda a, b, c: a), Error("kind")
    )


AUDIT = Table("audit", audit_cases)


@pytest.mark.parametrize("c", AUDIT.params())
def test_audit(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
