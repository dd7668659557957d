"""Bad inputs of ``topk``: one test per case (``_judge``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import propopt as pp
from tests.bad_inputs._judge import Case, Either, Error, Table, Value, judge
from tests.oracles import topk_ref, topk_rows

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


def topk_cases(case: Table) -> None:
    T = pp.topk
    x5 = lambda: np.array([3.0, 1.0, 4.0, 1.0, 5.0])  # noqa: E731
    case("basic", lambda: T(x5(), 3), Value(lambda: topk_ref(x5(), 3)))
    case(
        "list instead of an array",
        lambda: T([3, 1, 4], 2),
        Either(Value(lambda: topk_ref([3, 1, 4], 2)), "x"),
    )
    case("k=-1", lambda: T(x5(), -1), Error("k"))
    case("k=2.0", lambda: T(x5(), 2.0), Error("k"))
    case("k=True", lambda: T(x5(), True), Error("k"))
    case("k=None", lambda: T(x5(), None), Error("k"))
    case("k='2'", lambda: T(x5(), "2"), Error("k"))
    case("k=10**30 (> n: all)", lambda: T(x5(), 10**30), Value(lambda: topk_ref(x5(), 5)))
    case("k=np.int64(2)", lambda: T(x5(), np.int64(2)), Value(lambda: topk_ref(x5(), 2)))
    case("k=0", lambda: T(x5(), 0), Value((np.zeros(0), np.zeros(0, np.int64))))
    case("axis=3 on 1-D", lambda: T(x5(), 2, axis=3), Error("axis"))
    case("axis=0.0", lambda: T(x5(), 2, axis=0.0), Error("axis"))
    case(
        "axis=-2 on 2-D",
        lambda: T(np.arange(12.0).reshape(3, 4) % 5, 2, axis=-2),
        Value(lambda: topk_rows(np.arange(12.0).reshape(3, 4) % 5, 2, axis=0)),
    )
    case("largest='False'", lambda: T(x5(), 2, largest="False"), Error("largest"))
    case("sorted='yes'", lambda: T(x5(), 2, sorted="yes"), Error("sorted"))
    case("nan='smallest'", lambda: T(x5(), 2, nan="smallest"), Error("nan"))
    case("method='gpu'", lambda: T(x5(), 2, method="gpu"), Error("method"))
    case("device='cuda' on numpy", lambda: T(x5(), 2, device="cuda"), Error("device", "x"))
    case(
        "NaN ignored, 1-D (fewer than k)",
        lambda: T(np.array([np.nan, 1.0, 2.0]), 3),
        Value(lambda: topk_ref([np.nan, 1.0, 2.0], 3)),
    )
    case(
        "nan='largest'",
        lambda: T(np.array([np.nan, 1.0, 2.0]), 2, nan="largest"),
        Value(lambda: topk_ref([np.nan, 1.0, 2.0], 2, nan="largest")),
    )
    case(
        "nan='largest', largest=False",
        lambda: T(np.array([np.nan, 1.0, 2.0]), 3, largest=False, nan="largest"),
        Value(lambda: topk_ref([np.nan, 1.0, 2.0], 3, False, "largest")),
    )
    case(
        "ragged NaN rows, 2-D",
        lambda: T(np.array([[np.nan, 1.0, 2.0], [1, 2, 3]]), 3),
        Error("k", "nan"),
    )
    case(
        "inf and -inf",
        lambda: T(np.array([np.inf, -np.inf, 1.0]), 3),
        Value(lambda: topk_ref([np.inf, -np.inf, 1.0], 3)),
    )
    case("complex", lambda: T(np.array([1 + 1j, 2]), 1), Error("x", "dtype"))
    case("object", lambda: T(np.array([1, 2], dtype=object), 1), Error("x", "dtype"))
    case("strings", lambda: T(np.array(["a", "b"]), 1), Error("x", "dtype"))
    case("structured", lambda: T(np.zeros(3, dtype=[("a", "f8")]), 2), Error("x", "dtype"))
    case("timedelta64", lambda: T(np.array([1, 2], "timedelta64[s]"), 1), Error("x", "dtype"))
    case(
        "bool",
        lambda: T(np.array([False, True, True]), 2),
        Value((np.array([True, True]), np.array([1, 2]))),
    )
    case(
        "big-endian keeps dtype", lambda: T(x5().astype(">f8"), 2), Value(lambda: topk_ref(x5(), 2))
    )
    case(
        "float16",
        lambda: T(x5().astype(np.float16), 2),
        Value(lambda: topk_ref(x5(), 2), dtype="float16"),
    )
    case(
        "uint64 extremes",
        lambda: T(np.array([2**64 - 1, 0, 2**63], np.uint64), 2),
        Value((np.array([2**64 - 1, 2**63], dtype=object), np.array([0, 2]))),
    )
    case(
        "int64 extremes, smallest",
        lambda: T(np.array([-(2**63), 0, 2**63 - 1]), 3, largest=False),
        Value((np.array([-(2**63), 0, 2**63 - 1], dtype=object), np.array([0, 1, 2]))),
    )
    case(
        "1e300 and 1e-300 magnitudes",
        lambda: T(np.array([1e-300, 1e300, -1e300, 5e-324]), 2),
        Value(lambda: topk_ref([1e-300, 1e300, -1e300, 5e-324], 2)),
    )
    case(
        "-0.0 and 0.0 tie by index",
        lambda: T(np.array([-0.0, 0.0]), 1),
        Value((np.array([-0.0]), np.array([0]))),
    )
    if ml_dtypes is not None:
        case(
            "ml_dtypes bfloat16",
            lambda: T(x5().astype(ml_dtypes.bfloat16), 2),
            Value(lambda: topk_ref(x5(), 2), dtype="bfloat16"),
        )
        case(
            "ml_dtypes float8_e4m3fn",
            lambda: T(np.array([1, 3, 2]).astype(ml_dtypes.float8_e4m3fn), 2),
            Value((np.array([3.0, 2.0]), np.array([1, 2]))),
        )
        case(
            "ml_dtypes int4",
            lambda: T(np.array([1, 3, 2]).astype(ml_dtypes.int4), 2),
            Value((np.array([3, 2]), np.array([1, 2]))),
        )
    if torch is not None:
        case(
            "torch requires grad",
            lambda: T(torch.tensor([1.0, 3.0, 2.0], requires_grad=True), 2),
            Value((np.array([3.0, 2.0]), np.array([1, 2]))),
        )
        case(
            "torch bfloat16",
            lambda: T(torch.tensor([1.0, 3.0, 2.0], dtype=torch.bfloat16), 2),
            Value((np.array([3.0, 2.0]), np.array([1, 2]))),
        )
        case(
            "torch int32",
            lambda: T(torch.tensor([1, 3, 2], dtype=torch.int32), 2),
            Value((np.array([3, 2]), np.array([1, 2]))),
        )
        case(
            "out= torch for a numpy x",
            lambda: T(
                x5(),
                2,
                out=(torch.empty(2, dtype=torch.float64), torch.empty(2, dtype=torch.int64)),
            ),
            Error("out"),
        )
    case(
        "out of the wrong shape",
        lambda: T(x5(), 2, out=(np.empty(3), np.empty(3, np.int64))),
        Error("out"),
    )
    case(
        "out of the wrong dtype",
        lambda: T(x5(), 2, out=(np.empty(2, np.float32), np.empty(2, np.int64))),
        Error("out"),
    )
    case(
        "out read-only",
        lambda: T(x5(), 2, out=(np.broadcast_to(np.empty(1), (2,)), np.empty(2, np.int64))),
        Error("out"),
    )
    case("out not a pair", lambda: T(x5(), 2, out=np.empty(2)), Error("out"))

    def aliased() -> Any:
        x = x5()
        return T(x, 2, out=(x[:2], np.empty(2, np.int64)))

    case("out aliasing x", aliased, Value(lambda: topk_ref(x5(), 2)))
    case("negative stride", lambda: T(x5()[::-1], 2), Value(lambda: topk_ref(x5()[::-1], 2)))
    case(
        "Fortran 2-D, axis 0",
        lambda: T(np.asfortranarray(np.arange(12.0).reshape(3, 4) % 7), 2, axis=0),
        Value(lambda: topk_rows(np.arange(12.0).reshape(3, 4) % 7, 2, axis=0)),
    )
    case(
        "non-contiguous 2-D rows",
        lambda: T((np.arange(40.0).reshape(4, 10) % 7)[:, ::3], 2),
        Value(lambda: topk_rows((np.arange(40.0).reshape(4, 10) % 7)[:, ::3], 2)),
    )
    case(
        "read-only",
        lambda: T(np.broadcast_to(x5(), (2, 5)), 2),
        Value(lambda: topk_rows(np.broadcast_to(x5(), (2, 5)), 2)),
    )
    case("0-d", lambda: T(np.array(5.0), 1), Value((np.array(5.0), np.array(0))))
    case("0-d with k=2", lambda: T(np.array(5.0), 2), Error("k"))
    case("empty", lambda: T(np.zeros(0), 2), Value((np.zeros(0), np.zeros(0, np.int64))))
    case(
        "rows of length 0",
        lambda: T(np.zeros((3, 0)), 2),
        Value((np.zeros((3, 0)), np.zeros((3, 0), np.int64))),
    )
    case("length 1", lambda: T(np.array([7.0]), 3), Value((np.array([7.0]), np.array([0]))))
    if pd is not None:
        case(
            "pandas Series",
            lambda: T(pd.Series(x5()), 2),
            Either(Value(lambda: topk_ref(x5(), 2)), "x"),
        )
    case(
        "np.matrix",
        lambda: T(np.matrix([[1.0, 3.0, 2.0]]), 2),
        Value((np.array([[3.0, 2.0]]), np.array([[1, 2]]))),
    )
    case(
        "masked array",
        lambda: T(np.ma.array([1.0, 5.0, 3.0], mask=[0, 1, 0]), 2),
        Value((np.array([3.0, 1.0]), np.array([2, 0]))),
    )
    case(
        "ascending 5000 float32, k=100, unsorted",
        lambda: (lambda r: (np.sort(r[0])[::-1], np.sort(r[1])[::-1]))(
            T(np.arange(5000, dtype=np.float32), 100, sorted=False)
        ),
        Value((np.arange(4999, 4899, -1.0), np.arange(4999, 4899, -1))),
    )


TOPK = Table("topk", topk_cases)


@pytest.mark.parametrize("c", TOPK.params())
def test_topk(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
