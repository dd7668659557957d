"""Bad inputs of ``low_rank`` and ``moments / Moments``: one test per case (``_judge``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import propopt as pp
from tests.bad_inputs._judge import (
    CLEAR,
    Case,
    Check,
    Either,
    Error,
    Table,
    Value,
    judge,
    rng,
    to_np,
)
from tests.oracles import gravity_field, moments_ref

try:
    import torch
except ImportError:  # the cases that need it are left out
    torch = None

try:
    import ml_dtypes
except ImportError:  # the cases that need it are left out
    ml_dtypes = None

try:
    import pandas as pd
except ImportError:  # the cases that need it are left out
    pd = None

pytestmark = pytest.mark.bad_inputs


def lowrank_check(M: Any, rank: int | None = None, rtol: float = 1e-8) -> Check:
    """The factors reproduce ``M`` (float64 SVD of it as the yardstick) to a relative tolerance."""
    M64 = to_np(M).astype(np.float64) if not hasattr(M, "matvec") else None

    def pred(L: Any) -> tuple[bool, str]:
        U, s, Vt = (to_np(v).astype(np.float64) for v in (L.U, L.s, L.Vt))
        if M64 is None:
            return True, "operator"
        if rank is not None and len(s) != rank:
            return False, f"rank {len(s)}, expected {rank}"
        scale = float(np.abs(M64).max()) or 1.0
        A, R = M64 / scale, (U * (s / scale)) @ Vt
        sv = np.linalg.svd(A, compute_uv=False)
        best = sv[len(s)] if len(s) < len(sv) else 0.0
        top = sv[0] if len(sv) and sv[0] else 1.0
        err = float(np.linalg.norm(A - R, 2))
        ok = np.all(np.isfinite(R)) and err <= best * 10 + rtol * (sv[0] if len(sv) else 1.0)
        return (
            bool(ok),
            f"relative error {err / top:.2g} (best rank-{len(s)} {best / top:.2g})",
        )

    return Check(pred)


def row10(mo: Any) -> np.ndarray:
    return np.asarray(mo.row[:10])


def lowrank_cases(case: Table) -> None:
    LR = pp.low_rank
    M = lambda: rng(2).normal(size=(20, 3)) @ rng(3).normal(size=(3, 15))  # noqa: E731
    case("rank-3 matrix, rank=3", lambda: LR(M(), rank=3), lowrank_check(M(), 3))
    case("rtol=1e-8", lambda: LR(M(), rtol=1e-8), lowrank_check(M(), 3))
    case("complex numpy", lambda: LR(M() + 1j * M(), rank=2), Error("M"))
    if torch is not None:
        case("complex torch", lambda: LR(torch.tensor(M() + 1j * M()), rank=2), Error("M"))
        case(
            "torch requires grad",
            lambda: LR(torch.tensor(M(), requires_grad=True), rank=3),
            Error("M"),
        )
        case(
            "torch float32",
            lambda: LR(torch.tensor(M(), dtype=torch.float32), rank=3),
            Check(lambda L: lowrank_check(M(), 3, 1e-5).pred(L)),
        )
    case("entries ~1e300", lambda: LR(M() * 1e300, rank=3), lowrank_check(M() * 1e300, 3))
    case(
        "entries ~1e306",
        lambda: LR(M() * 1e306, rank=3),
        Either(lowrank_check(M() * 1e306, 3), "M"),
    )
    case("entries ~1e-300", lambda: LR(M() * 1e-300, rank=3), lowrank_check(M() * 1e-300, 3))
    case(
        "subnormal entries ~1e-315",
        lambda: LR(M() * 1e-315, rank=3),
        Either(lowrank_check(M() * 1e-315, 3, 1e-6), "M"),
    )
    case("rank=0", lambda: LR(M(), rank=0), Error("rank"))
    case("rank=100 > min(m, n)", lambda: LR(M(), rank=100), Error("rank"))
    case("rank=2.0", lambda: LR(M(), rank=2.0), Error("rank"))
    case("rank=True", lambda: LR(M(), rank=True), Error("rank"))
    case("neither rank nor rtol", lambda: LR(M()), Error("rank", "rtol"))
    case("rtol=0", lambda: LR(M(), rtol=0), Error("rtol"))
    case("rtol=1", lambda: LR(M(), rtol=1), Error("rtol"))
    case("rtol=nan", lambda: LR(M(), rtol=float("nan")), Error("rtol"))
    case("rtol='1e-3'", lambda: LR(M(), rtol="1e-3"), Error("rtol"))
    case("1-D M", lambda: LR(np.ones(5), rank=1), Error("M"))
    case("3-D M", lambda: LR(np.ones((2, 2, 2)), rank=1), Error("M"))
    case("list of lists", lambda: LR(M().tolist(), rank=3), lowrank_check(M(), 3))
    case("NaN entry", lambda: LR(np.where(M() > 1, np.nan, M()), rank=3), Error("M"))
    case("inf entry", lambda: LR(np.where(M() > 1, np.inf, M()), rank=3), Error("M"))
    case(
        "bool matrix",
        lambda: LR(M() > 0, rank=3),
        Check(lambda L: (L.rank == 3 and L.U.dtype == np.float64, f"rank {L.rank}, {L.U.dtype}")),
    )
    case(
        "object matrix", lambda: LR(M().astype(object), rank=3), Either(lowrank_check(M(), 3), "M")
    )
    case("string matrix", lambda: LR(np.array([["a", "b"]]), rank=1), Error("M"))
    case("seed='abc'", lambda: LR(M(), rank=3, seed="abc"), Error("seed"))
    case("seed=-1", lambda: LR(M(), rank=3, seed=-1), Error("seed"))
    case("seed=1.5", lambda: LR(M(), rank=3, seed=1.5), Error("seed"))
    case(
        "seed=Generator",
        lambda: LR(M(), rank=3, seed=np.random.default_rng(9)),
        lowrank_check(M(), 3),
    )
    case("oversample=-1", lambda: LR(M(), rank=3, oversample=-1), Error("oversample"))
    case("power_iters=1.5", lambda: LR(M(), rank=3, power_iters=1.5), Error("power_iters"))
    case("block=0", lambda: LR(M(), rtol=0.1, block=0), Error("block"))
    case("empty (0, 5), rank=1", lambda: LR(np.zeros((0, 5)), rank=1), Error("rank"))
    case(
        "empty (0, 5), rtol",
        lambda: LR(np.zeros((0, 5)), rtol=0.1),
        Check(lambda L: (L.rank == 0 and L.shape == (0, 5), repr(L))),
    )
    case(
        "zero matrix, rtol",
        lambda: LR(np.zeros((5, 5)), rtol=0.1),
        Check(lambda L: (L.rank == 0, repr(L))),
    )
    case("1 x 1", lambda: LR(np.array([[3.0]]), rank=1), lowrank_check(np.array([[3.0]]), 1))
    case(
        "float16",
        lambda: LR(M().astype(np.float16), rank=3),
        Check(lambda L: lowrank_check(M().astype(np.float16).astype(np.float64), 3, 1e-5).pred(L)),
    )
    if ml_dtypes is not None:
        case(
            "bfloat16",
            lambda: LR(M().astype(ml_dtypes.bfloat16), rank=3),
            Check(
                lambda L: lowrank_check(
                    M().astype(ml_dtypes.bfloat16).astype(np.float64), 3, 1e-5
                ).pred(L)
            ),
        )
    case("big-endian", lambda: LR(M().astype(">f8"), rank=3), lowrank_check(M(), 3))
    case(
        "Fortran order, negative strides",
        lambda: LR(np.asfortranarray(M())[::-1, ::-1], rank=3),
        lowrank_check(M()[::-1, ::-1], 3),
    )
    case(
        "rank = min(m, n)",
        lambda: LR(rng(4).normal(size=(6, 4)), rank=4),
        lowrank_check(rng(4).normal(size=(6, 4)), 4),
    )
    if pd is not None:
        case("pandas DataFrame", lambda: LR(pd.DataFrame(M()), rank=3), lowrank_check(M(), 3))
    Op = pp.separability.MatvecOperator
    case(
        "MatvecOperator, identity",
        lambda: LR(Op((5, 5), lambda x: x, lambda y: y), rank=2),
        Check(lambda L: (np.allclose(L.s, 1.0), f"s={L.s}")),
    )
    case(
        "matvec returning the wrong shape",
        lambda: LR(Op((5, 4), lambda x: np.ones(3), lambda y: y), rank=2),
        Error("matvec", "M"),
    )
    case(
        "matvec returning NaN",
        lambda: LR(Op((5, 4), lambda x: np.full((5, x.shape[1]), np.nan), lambda y: y), rank=2),
        Error("matvec", "M"),
    )
    case(
        "MatvecOperator shape (-1, 2)",
        lambda: Op((-1, 2), lambda x: x, lambda y: y),
        Error("shape"),
    )
    case("L @ x of the wrong length", lambda: LR(M(), rank=3) @ np.ones(3), Error("x"))
    case(
        "L @ list",
        lambda: LR(M(), rank=3) @ ([1.0] * 15),
        Either(Value(lambda: M() @ np.ones(15), rtol=1e-10), "x"),
    )
    case(
        "list @ L",
        lambda: ([1.0] * 20) @ LR(M(), rank=3),
        Either(Value(lambda: np.ones(20) @ M(), rtol=1e-10), "x"),
    )


def moments_cases(case: Table) -> None:
    P = lambda: rng(6).normal(size=(7, 3))  # noqa: E731
    w = lambda: rng(7).uniform(0.5, 2, 7)  # noqa: E731
    case(
        "basic, with masses",
        lambda: row10(pp.moments(P(), w())),
        Value(lambda: moments_ref(P(), w()), rtol=1e-13),
    )
    case(
        "list of lists",
        lambda: row10(pp.moments([[1, 0, 0], [0, 1, 0]])),
        Value(lambda: moments_ref([[1, 0, 0], [0, 1, 0]])),
    )
    case(
        "one point of shape (3,)",
        lambda: row10(pp.moments([1.0, 2.0, 3.0])),
        Value(lambda: moments_ref([[1.0, 2.0, 3.0]])),
    )
    case("empty (0, 3)", lambda: row10(pp.moments(np.zeros((0, 3)))), Value(np.zeros(10)))
    case(
        "complex points", lambda: pp.moments(np.array([[1 + 1j, 0, 0], [0, 0, 0]])), Error("points")
    )
    case("string points", lambda: pp.moments(np.array([["a", "b", "c"]])), Error("points"))
    case("generator of points", lambda: pp.moments(p for p in [[0, 0, 0]]), Error("points"))
    case(
        "object array of floats",
        lambda: row10(pp.moments(P().astype(object))),
        Either(Value(lambda: moments_ref(P()), rtol=1e-13), "points"),
    )
    case("points (3, 2)", lambda: pp.moments(np.ones((3, 2))), Error("points"))
    case("negative masses", lambda: pp.moments(np.ones((3, 3)), -np.ones(3)), Error("mass"))
    case(
        "masses of the wrong length",
        lambda: pp.moments(np.ones((3, 3)), np.ones(2)),
        Error("mass"),
    )
    case(
        "complex masses",
        lambda: pp.moments(np.ones((2, 3)), np.array([1 + 1j, 1])),
        Error("mass"),
    )
    case("string masses", lambda: pp.moments(np.ones((2, 3)), "1"), Error("mass"))
    case("NaN point", lambda: pp.moments(np.array([[np.nan, 0, 0]])), Error("points"))
    case("inf mass", lambda: pp.moments(np.ones((2, 3)), np.array([1.0, np.inf])), Error("mass"))
    case(
        "scalar mass",
        lambda: row10(pp.moments(P(), 2.0)),
        Value(lambda: moments_ref(P(), 2.0), rtol=1e-13),
    )
    case(
        "coordinates 1e150 (S2 ~ 1e300)",
        lambda: row10(pp.moments(np.array([[1e150, 0, 0], [-1e150, 0, 0]]))),
        Value(lambda: moments_ref([[1e150, 0, 0], [-1e150, 0, 0]]), rtol=1e-13),
    )
    case(
        "third moments of +-1e150 (y**3 ~ 1e450 on the way) are 0",
        lambda: pp.moments(np.array([[1e150, 0, 0], [-1e150, 0, 0]])).row[10:],
        Either(Value(np.zeros(10)), "points"),
    )
    case(
        "coordinates 1e-200 with masses 1e-300 (S2 underflows)",
        lambda: row10(pp.moments(np.array([[1e-200, 0, 0], [-1e-200, 0, 0]]), [1e-300, 1e-300])),
        Value(np.array([2e-300, 0, 0, 0, 0, 0, 0, 0, 0, 0]), rtol=1e-15),
    )
    case(
        "coordinates 1e300 (S2 overflows)",
        lambda: pp.moments(np.array([[1e300, 0, 0], [-1e300, 0, 0]])),
        Error("points", "masses"),
    )
    case(
        "masses 1e308 (total overflows)",
        lambda: pp.moments(np.array([[1.0, 0, 0], [-1.0, 0, 0]]), np.array([1e308, 1e308])),
        Error("points", "masses"),
    )
    case(
        "coordinates 1e-300 (S2 underflows to 0)",
        lambda: row10(pp.moments(np.array([[1e-300, 0, 0], [-1e-300, 0, 0]]))),
        Value(lambda: moments_ref([[1e-300, 0, 0], [-1e-300, 0, 0]]), atol=1e-300),
    )
    case(
        "zero total mass",
        lambda: row10(pp.moments(np.array([[1.0, 2, 3]]), 0.0)),
        Value(np.zeros(10)),
    )
    if torch is not None:
        case(
            "torch requires grad",
            lambda: row10(pp.moments(torch.tensor(P(), requires_grad=True))),
            Value(lambda: moments_ref(P()), rtol=1e-13),
        )
    if ml_dtypes is not None:
        case(
            "bfloat16 points",
            lambda: row10(pp.moments(P().astype(ml_dtypes.bfloat16))),
            Value(
                lambda: moments_ref(P().astype(ml_dtypes.bfloat16).astype(np.float64)), rtol=1e-12
            ),
        )
    case(
        "big-endian, Fortran",
        lambda: row10(pp.moments(np.asfortranarray(P().astype(">f8")))),
        Value(lambda: moments_ref(P()), rtol=1e-13),
    )
    mo = lambda: pp.moments(P(), w())  # noqa: E731
    far = np.array([[400.0, -300.0, 200.0]])  # (R / r)^4 ~ 1e-11
    case(
        "field at a far target vs the direct sum",
        lambda: mo().field(far, potential=True),
        Value(lambda: gravity_field(P(), w(), targets=far), rtol=1e-9),
    )
    case("field order=4", lambda: mo().field(far, order=4), Error("order"))
    case("field order='3'", lambda: mo().field(far, order="3"), Error("order"))
    case("field eps=-1", lambda: mo().field(far, eps=-1), Error("eps"))
    case("field eps='a'", lambda: mo().field(far, eps="a"), Error("eps"))
    case("field eps=nan", lambda: mo().field(far, eps=float("nan")), Error("eps"))
    case("field potential='yes'", lambda: mo().field(far, potential="yes"), Error("potential"))
    case("field targets (n, 2)", lambda: mo().field(np.ones((2, 2))), Error("targets"))
    case("field targets NaN", lambda: mo().field(np.array([[np.nan, 0, 0]])), Error("targets"))
    case(
        "field one target of shape (3,)",
        lambda: mo().potential(far[0]),
        Value(lambda: gravity_field(P(), w(), targets=far)[1], rtol=1e-9),
    )
    case("merge with a list", lambda: mo().merge([1]), Error("others", "Moments"))
    case(
        "Moments + 1",
        lambda: mo() + 1,
        Error("Moments", "int"),
        reading=(CLEAR, "Python's own operator TypeError names both types"),
    )
    case(
        "zero() is the identity of merge",
        lambda: row10(mo().merge(pp.Moments.zero())),
        Value(lambda: moments_ref(P(), w()), rtol=1e-13),
    )
    case("about(point) of shape (2,)", lambda: mo().about(np.ones(2)), Error("point"))
    case("about('x')", lambda: mo().about("x"), Error("point"))


LOW_RANK = Table("low_rank", lowrank_cases)


@pytest.mark.parametrize("c", LOW_RANK.params())
def test_low_rank(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)


MOMENTS = Table("moments / Moments", moments_cases)


@pytest.mark.parametrize("c", MOMENTS.params())
def test_moments(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
