"""Bad inputs of ``morton`` and ``tiles / tiled_matmul``: one test per case (``_judge``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import propopt as pp
from tests.bad_inputs._judge import Case, Check, Either, Error, Table, Value, judge, rng
from tests.oracles import deinterleave, matmul64, morton_cells_ref

try:
    import torch
except ImportError:  # the cases that need it are left out
    torch = None

try:
    import ml_dtypes
except ImportError:  # the cases that need it are left out
    ml_dtypes = None

pytestmark = pytest.mark.bad_inputs


def morton_check(points: Any, box: Any = None, slack: int = 1) -> Check:
    def pred(keys: Any) -> tuple[bool, str]:
        k = np.asarray(keys)
        if k.dtype != np.uint64:
            return False, f"keys have dtype {k.dtype}"
        P = np.asarray(points, np.float64)
        if P.shape[0] == 0:
            return k.shape == (0,), f"shape {k.shape}"
        want = morton_cells_ref(P, box)
        got = deinterleave(k, P.shape[1])
        d = int(np.abs(got - want).max())
        return d <= slack, f"cells within {d} of the exact quantization (allowed {slack})"

    return Check(pred)


def morton_cases(case: Table) -> None:
    from propopt.locality import bounding_box, morton_cells, morton_decode, morton_digits

    P = lambda: rng(8).uniform(-1, 1, size=(20, 3))  # noqa: E731
    case("3-D keys", lambda: pp.morton_keys(P()), morton_check(P()))
    case("2-D keys", lambda: pp.morton_keys(P()[:, :2]), morton_check(P()[:, :2]))
    huge = lambda: np.array([[-1e308, 0, 0], [1e308, 1, 1], [0, 0, 0], [5e307, 0, 0]])  # noqa: E731
    case(
        "coordinates spanning -1e308..1e308",
        lambda: pp.morton_keys(huge()),
        Either(morton_check(huge()), "points"),
    )
    case(
        "box (-1e308, 1e308)",
        lambda: pp.morton_keys(P(), box=(np.full(3, -1e308), np.full(3, 1e308))),
        Either(morton_check(P(), (np.full(3, -1e308), np.full(3, 1e308))), "box"),
    )
    case(
        "morton_order across -1e308..1e308",
        lambda: pp.morton_order(np.array([[1e308, 0.0], [-1e308, 0.0], [0.0, 0.0]])),
        Either(Value(np.array([1, 2, 0])), "points"),
    )
    case(
        "coordinates spread 1e-310 (subnormal)",
        lambda: pp.morton_keys(np.array([[0.0, 0, 0], [1e-310, 2e-310, 3e-310]])),
        morton_check(np.array([[0.0, 0, 0], [1e-310, 2e-310, 3e-310]])),
    )
    case("points (3, 4)", lambda: pp.morton_keys(np.ones((3, 4))), Error("points"))
    case("points 1-D", lambda: pp.morton_keys(np.ones(3)), Error("points"))
    case("complex points", lambda: pp.morton_keys(P() + 0j), Error("points"))
    case(
        "bool points",
        lambda: pp.morton_keys(P() > 0),
        Either(morton_check((P() > 0).astype(float)), "points"),
    )
    case("NaN point", lambda: pp.morton_keys(np.array([[np.nan, 0, 0]])), Error("points"))
    case(
        "inf point", lambda: pp.morton_keys(np.array([[np.inf, 0, 0], [0, 0, 0]])), Error("points")
    )
    case("box=(0, 1) scalars", lambda: pp.morton_keys(P(), box=(0, 1)), Error("box"))
    case("box reversed", lambda: pp.morton_keys(P(), box=(np.ones(3), -np.ones(3))), Error("box"))
    case("box='cube'", lambda: pp.morton_keys(P(), box="cube"), Error("box"))
    case(
        "point outside the box",
        lambda: pp.morton_keys(P(), box=(np.zeros(3), np.ones(3))),
        Error("box", "points"),
    )
    case("empty (0, 3)", lambda: pp.morton_keys(np.zeros((0, 3))), morton_check(np.zeros((0, 3))))
    case(
        "list of lists",
        lambda: pp.morton_keys([[0.1, 0.2], [0.3, 0.4], [0.25, 0.3]]),
        morton_check([[0.1, 0.2], [0.3, 0.4], [0.25, 0.3]]),
    )
    case("all points equal", lambda: pp.morton_keys(np.ones((4, 3))), Value(np.zeros(4, np.uint64)))
    case(
        "one point",
        lambda: pp.morton_keys(np.array([[5.0, 6.0, 7.0]])),
        Value(np.zeros(1, np.uint64)),
    )
    case(
        "int64 coordinates",
        lambda: pp.morton_keys(np.array([[3, 0, 0], [0, 7, 0], [1, 1, 1]])),
        morton_check(np.array([[3, 0, 0], [0, 7, 0], [1, 1, 1]])),
    )
    case(
        "float32",
        lambda: pp.morton_keys(P().astype(np.float32)),
        morton_check(P().astype(np.float32)),
    )
    case("big-endian", lambda: pp.morton_keys(P().astype(">f8")), morton_check(P()))
    case("negative stride", lambda: pp.morton_keys(P()[::-2]), morton_check(P()[::-2]))
    if ml_dtypes is not None:
        case(
            "bfloat16",
            lambda: pp.morton_keys(P().astype(ml_dtypes.bfloat16)),
            morton_check(P().astype(ml_dtypes.bfloat16).astype(np.float64)),
        )
    if torch is not None:
        case(
            "torch requires grad",
            lambda: pp.morton_keys(torch.tensor(P(), requires_grad=True)),
            morton_check(P()),
        )
    case("return_keys='no'", lambda: pp.morton_order(P(), return_keys="no"), Error("return_keys"))
    case(
        "morton_order keeps ties in input order",
        lambda: pp.morton_order(np.array([[0.0, 0], [1, 1], [0, 0], [1, 1]])),
        Value(np.array([0, 2, 1, 3])),
    )
    case(
        "bounding_box(cube='no')",
        lambda: bounding_box(np.array([[0.0, 0], [2, 1]]), cube="no"),
        Error("cube"),
    )
    case("bounding_box of nothing", lambda: bounding_box(np.zeros((0, 3))), Error("points"))
    case("morton_digits of negative keys", lambda: morton_digits(np.array([-1]), 1), Error("keys"))
    case("morton_digits of float keys", lambda: morton_digits(np.array([1.5]), 21), Error("keys"))
    case(
        "morton_digits level=0", lambda: morton_digits(np.array([1], np.uint64), 0), Error("level")
    )
    case(
        "morton_digits ndim=4",
        lambda: morton_digits(np.array([1], np.uint64), 1, ndim=4),
        Error("ndim"),
    )
    case(
        "morton_digits of a list of ints",
        lambda: morton_digits([0b101 << 60], 1),
        Value(np.array([5], np.uint8)),
    )
    case("morton_cells of negative keys", lambda: morton_cells(np.array([-8]), 20), Error("keys"))
    case(
        "morton_cells level=22", lambda: morton_cells(np.array([1], np.uint64), 22), Error("level")
    )
    case("morton_decode of negative keys", lambda: morton_decode(np.array([-1])), Error("keys"))
    case(
        "morton_decode of 2-D keys",
        lambda: morton_decode(np.ones((2, 2), np.uint64)),
        Error("keys"),
    )
    case("morton_decode of strings", lambda: morton_decode(np.array(["a"])), Error("keys"))
    case(
        "morton_decode of uint32 keys",
        lambda: morton_decode(np.array([0b110101], np.uint32)),
        Value(np.array([[1, 2, 3]])),
    )
    case(
        "morton_decode of 2**64-1 (dim 2)",
        lambda: morton_decode([2**64 - 1], 2),
        Value(np.array([[2**32 - 1, 2**32 - 1]])),
    )


def tiling_cases(case: Table) -> None:
    from propopt.locality import tiled_matmul, tiled_pairwise, tiles

    case("tiles(-1, 2)", lambda: list(tiles(-1, 2)), Error("shape"))
    case("tiles(5, 0)", lambda: list(tiles(5, 0)), Error("tile"))
    case("tiles(5.0, 2)", lambda: list(tiles(5.0, 2)), Error("shape"))
    case("tiles('5', 2)", lambda: list(tiles("5", 2)), Error("shape"))
    case("tiles((5, 5), (2, 2, 2))", lambda: list(tiles((5, 5), (2, 2, 2))), Error("tile"))
    case(
        "tiles((), 2): a 0-d array is one tile",
        lambda: [list(t) for t in tiles((), 2)],
        Value([[]]),
    )
    case("tiles(0, 3): nothing", lambda: len(list(tiles(0, 3))), Value(0))
    case(
        "tiles((3, 2), 5): one clipped tile",
        lambda: [(s.start, s.stop) for t in tiles((3, 2), 5) for s in t],
        Value([(0, 3), (0, 2)]),
    )
    case(
        "tiles(np.int64(5), np.int64(2))",
        lambda: [(t[0].start, t[0].stop) for t in tiles(np.int64(5), np.int64(2))],
        Value([(0, 2), (2, 4), (4, 5)]),
    )
    TM = tiled_matmul
    A = lambda: rng(9).normal(size=(5, 7))  # noqa: E731
    B = lambda: rng(10).normal(size=(7, 3))  # noqa: E731
    ref = lambda: matmul64(A(), B())  # noqa: E731
    case("tiled, tile=2", lambda: TM(A(), B(), tile=2), Value(ref, rtol=1e-13))
    case("naive", lambda: TM(A(), B(), method="naive"), Value(ref, rtol=1e-13))
    case("blas", lambda: TM(A(), B(), method="blas"), Value(ref, rtol=1e-13))
    case("reference", lambda: TM(A(), B(), method="reference"), Value(ref, rtol=1e-13))
    case(
        "int64 2^53+1 (inexact as float64)",
        lambda: TM(np.array([[2**53 + 1]]), np.array([[1]])),
        Either(Value(np.array([[2**53 + 1]], dtype=object)), "A"),
    )
    case(
        "uint64 2^64-1",
        lambda: TM(np.array([[2**64 - 1]], np.uint64), np.array([[1]], np.uint64)),
        Either(Value(np.array([[2**64 - 1]], dtype=object)), "A"),
    )
    case(
        "small int32 matrices",
        lambda: TM(np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((3, 2), np.int32)),
        Value(np.array([[3.0, 3], [12, 12]])),
    )
    case(
        "bool matrices",
        lambda: TM(np.ones((2, 2), bool), np.ones((2, 2), bool)),
        Either(Value(np.full((2, 2), 2.0)), "A"),
    )
    case("complex", lambda: TM(np.ones((2, 2), complex), np.ones((2, 2))), Error("A"))
    case("inner sizes differ", lambda: TM(np.ones((2, 3)), np.ones((2, 3))), Error("A", "B"))
    case("1-D A", lambda: TM(np.ones(3), np.ones(3)), Error("A"))
    case("method='fast'", lambda: TM(A(), B(), method="fast"), Error("method"))
    case("tile=0", lambda: TM(A(), B(), tile=0), Error("tile"))
    if torch is not None:
        case(
            "torch requiring grad",
            lambda: TM(torch.tensor(A(), requires_grad=True), B()),
            Either(Value(ref, rtol=1e-13), "A"),
        )
    case("lists", lambda: TM([[1.0, 2.0]], [[3.0], [4.0]]), Value(np.array([[11.0]])))
    if ml_dtypes is not None:
        case(
            "bfloat16",
            lambda: TM(np.ones((2, 2), ml_dtypes.bfloat16), np.ones((2, 2))),
            Either(Value(np.full((2, 2), 2.0)), "A"),
        )
    case(
        "float16 (float32 result)",
        lambda: TM(np.ones((2, 2), np.float16), np.ones((2, 2), np.float16)),
        Value(np.full((2, 2), 2.0), dtype="float32"),
    )
    case(
        "float32 sum overflows to inf (documented)",
        lambda: TM(np.full((1, 2), 3e38, np.float32), np.ones((2, 1), np.float32)),
        Value(np.array([[np.inf]])),
    )
    case("object", lambda: TM(np.ones((2, 2), object), np.ones((2, 2))), Error("A"))
    case("big-endian", lambda: TM(A().astype(">f8"), B()), Value(ref, rtol=1e-13))
    case(
        "Fortran and negative strides",
        lambda: TM(np.asfortranarray(A())[::-1], B()[:, ::-1], tile=3),
        Value(lambda: matmul64(A()[::-1], B()[:, ::-1]), rtol=1e-13),
    )
    case("(0, 3) @ (3, 2)", lambda: TM(np.ones((0, 3)), np.ones((3, 2))), Value(np.zeros((0, 2))))
    case("(2, 0) @ (0, 3)", lambda: TM(np.ones((2, 0)), np.ones((0, 3))), Value(np.zeros((2, 3))))
    case(
        "NaN propagates",
        lambda: TM(np.array([[np.nan, 1.0]]), np.ones((2, 1))),
        Value(np.array([[np.nan]])),
    )
    case("tile larger than the matrices", lambda: TM(A(), B(), tile=10**6), Value(ref, rtol=1e-13))
    case(
        "A is B",
        lambda: (lambda S: TM(S, S))(rng(11).normal(size=(4, 4))),
        Value(
            lambda: matmul64(rng(11).normal(size=(4, 4)), rng(11).normal(size=(4, 4))), rtol=1e-13
        ),
    )

    def gauss(xi: Any, xj: Any) -> float:
        return math.exp(-((xi[0] - xj[0]) ** 2))

    X = np.array([[0.0], [1.0], [5.0], [0.5]])
    pref = np.array(
        [sum(math.exp(-((X[i, 0] - X[j, 0]) ** 2)) for j in range(4) if j != i) for i in range(4)]
    )
    case(
        "tiled_pairwise, tile=2", lambda: tiled_pairwise(gauss, X, tile=2), Value(pref, rtol=1e-13)
    )
    case(
        "tiled_pairwise, tile=None",
        lambda: tiled_pairwise(gauss, X, tile=None),
        Value(pref, rtol=1e-13),
    )
    case("tiled_pairwise, tile=0", lambda: tiled_pairwise(gauss, X, tile=0), Error("tile"))


MORTON = Table("morton", morton_cases)


@pytest.mark.parametrize("c", MORTON.params())
def test_morton(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)


TILING = Table("tiles / tiled_matmul", tiling_cases)


@pytest.mark.parametrize("c", TILING.params())
def test_tiling(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
