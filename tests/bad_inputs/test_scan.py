"""Bad inputs of ``associative_scan``: one test per case (``_judge``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import propopt as pp
from tests.bad_inputs._judge import Case, Either, Error, Table, Value, judge, rng
from tests.oracles import cumsum64, cumsum_int

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


def scan_cases(case: Table) -> None:
    S = pp.associative_scan
    x17 = lambda: rng(1).normal(size=17)  # noqa: E731
    ref17 = lambda: cumsum64(x17())  # noqa: E731
    case("float64, 17 elements", lambda: S(pp.add, x17()), Value(ref17))
    case(
        "list instead of an array",
        lambda: S(pp.add, [1.0, 2.0, 3.0]),
        Either(Value([1.0, 3.0, 6.0]), "elems"),
    )
    case("Python scalar", lambda: S(pp.add, 5.0), Error("elems"))
    case("out= of the result's shape", lambda: S(pp.add, x17(), out=np.empty(17)), Value(ref17))
    case("out= in place", lambda: (lambda x: S(pp.add, x, out=x))(x17()), Value(ref17))
    case("out= one short", lambda: S(pp.add, x17(), out=np.empty(16)), Error("out", "shape"))
    case("out= float32 for float64", lambda: S(pp.add, x17(), out=np.empty(17, np.float32)),
         Error("out", "dtype"))  # fmt: skip
    case("out= a list", lambda: S(pp.add, x17(), out=[0.0] * 17), Error("out"))
    case("0-d array", lambda: S(pp.add, np.array(5.0)), Error("elems"))
    case("generator", lambda: S(pp.add, (float(i) for i in range(3))), Error("elems"))
    case("empty float64", lambda: S(pp.add, np.zeros(0)), Value(np.zeros(0), dtype="float64"))
    case("length 1", lambda: S(pp.add, np.array([2.5])), Value([2.5]))
    case(
        "length 2^k+1 = 65537 float64",
        lambda: S(pp.add, np.full(65537, 0.5)),
        Value(lambda: np.arange(1, 65538) * 0.5),
    )
    case(
        "bool elements",
        lambda: S(pp.add, np.array([True, True, False])),
        Either(Value([1, 2, 2]), "elems", "bool"),
    )
    case(
        "complex128 add",
        lambda: S(pp.add, np.array([1 + 1j, 2 - 1j, 1e300j])),
        Value([1 + 1j, 3 + 0j, 3 + 1e300j]),
    )
    case(
        "complex128 maximum",
        lambda: S(pp.maximum, np.array([1 + 1j, 2 - 1j])),
        Error("elems", "complex128"),
    )
    case(
        "object array of floats",
        lambda: S(pp.add, np.array([1.0, 2.0], dtype=object)),
        Either(Value([1.0, 3.0]), "elems", "object"),
    )
    case("string array", lambda: S(pp.add, np.array(["a", "b"])), Error("elems"))
    case("datetime64", lambda: S(pp.add, np.array(["2020-01-01"], "datetime64[D]")), Error("elems"))
    case(
        "longdouble",
        lambda: S(pp.add, np.ones(3, np.longdouble)),
        Either(Value([1.0, 2.0, 3.0]), "elems", "float128"),
    )
    case(
        "int8 overflow wraps (documented)",
        lambda: S(pp.add, np.array([100, 100, 100], np.int8)),
        Value(lambda: cumsum_int([100, 100, 100], 8, True), dtype="int8"),
    )
    case(
        "uint8 wraps",
        lambda: S(pp.add, np.array([200, 100], np.uint8)),
        Value(lambda: cumsum_int([200, 100], 8, False), dtype="uint8"),
    )
    case(
        "int64 near max wraps",
        lambda: S(pp.add, np.array([2**63 - 1, 1], np.int64)),
        Value(lambda: cumsum_int([2**63 - 1, 1], 64, True)),
    )
    case(
        "uint64 mul wraps",
        lambda: S(pp.mul, np.array([2**63, 2, 3], np.uint64)),
        Value(np.array([2**63, 0, 0], dtype=object)),
    )
    case(
        "int32 add 2^31-1 + 1",
        lambda: S(pp.add, np.array([2**31 - 1, 1], np.int32)),
        Value(lambda: cumsum_int([2**31 - 1, 1], 32, True), dtype="int32"),
    )
    case("axis=5 on 2-D", lambda: S(pp.add, np.ones((2, 3)), axis=5), Error("axis"))
    case("axis=-3 on 2-D", lambda: S(pp.add, np.ones((2, 3)), axis=-3), Error("axis"))
    case("axis=1.0", lambda: S(pp.add, np.ones((2, 3)), axis=1.0), Error("axis"))
    case("axis=True", lambda: S(pp.add, np.ones((2, 3)), axis=True), Error("axis"))
    case("axis=None", lambda: S(pp.add, np.ones((2, 3)), axis=None), Error("axis"))
    case(
        "axis=np.int64(1)",
        lambda: S(pp.add, np.ones((2, 3)), axis=np.int64(1)),
        Value(np.array([[1.0, 2, 3], [1, 2, 3]])),
    )
    case(
        "axis=-1 on 2-D",
        lambda: S(pp.add, np.arange(6.0).reshape(2, 3), axis=-1),
        Value(np.array([[0.0, 1, 3], [3, 7, 12]])),
    )
    case("method='CPU' (case)", lambda: S(pp.add, np.ones(3), method="CPU"), Error("method"))
    case("method=None", lambda: S(pp.add, np.ones(3), method=None), Error("method"))
    case(
        "device='cuda' on numpy",
        lambda: S(pp.add, np.ones(3), device="cuda"),
        Error("device", "elems"),
    )
    case(
        "method='native' on numpy",
        lambda: S(pp.add, np.ones(3), method="native"),
        Error("method", "elems"),
    )
    case("device='gpu'", lambda: S(pp.add, np.ones(3), device="gpu"), Error("device"))
    case("method='reference'", lambda: S(pp.add, x17(), method="reference"), Value(ref17))
    case("method='generic'", lambda: S(pp.add, x17(), method="generic"), Value(ref17, rtol=1e-14))
    case(
        "device='dask' on numpy",
        lambda: S(pp.add, np.ones(3), device="dask"),
        Either(Value([1.0, 2, 3]), "device"),
    )
    case(
        "reverse='False' (a string)",
        lambda: S(pp.add, np.array([1.0, 2, 3]), reverse="False"),
        Error("reverse"),
    )
    case(
        "reverse=None",
        lambda: S(pp.add, np.array([1.0, 2, 3]), reverse=None),
        Either(Value([1.0, 3, 6]), "reverse"),
    )
    case(
        "reverse=np.True_",
        lambda: S(pp.add, np.array([1.0, 2, 3]), reverse=np.True_),
        Value([6.0, 5, 3]),
    )
    case("exclusive=2", lambda: S(pp.add, np.array([1.0, 2, 3]), exclusive=2), Error("exclusive"))
    case(
        "exclusive='no'",
        lambda: S(pp.add, np.array([1.0, 2, 3]), exclusive="no"),
        Error("exclusive"),
    )
    case("check='yes'", lambda: S(pp.add, np.array([1.0, 2, 3]), check="yes"), Error("check"))
    case(
        "exclusive and reverse",
        lambda: S(pp.add, np.arange(1, 6), exclusive=True, reverse=True),
        Value(np.array([14, 12, 9, 5, 0])),
    )
    case("big-endian float64", lambda: S(pp.add, x17().astype(">f8")), Value(ref17))
    case("negative stride", lambda: S(pp.add, x17()[::-1]), Value(lambda: cumsum64(x17()[::-1])))
    case("stride 3", lambda: S(pp.add, x17()[::3]), Value(lambda: cumsum64(x17()[::3])))
    case(
        "Fortran 2-D, axis 1",
        lambda: S(pp.add, np.asfortranarray(np.arange(6.0).reshape(2, 3)), axis=1),
        Value(np.array([[0.0, 1, 3], [3, 7, 12]])),
    )
    case(
        "Fortran 2-D, axis 0",
        lambda: S(pp.add, np.asfortranarray(np.arange(6.0).reshape(2, 3)), axis=0),
        Value(np.array([[0.0, 1, 2], [3, 5, 7]])),
    )
    case(
        "read-only broadcast view",
        lambda: S(pp.add, np.broadcast_to(np.arange(3.0), (2, 3)), axis=1),
        Value(np.array([[0.0, 1, 3], [0, 1, 3]])),
    )
    case(
        "shape (0, 5), axis 1", lambda: S(pp.add, np.zeros((0, 5)), axis=1), Value(np.zeros((0, 5)))
    )
    case(
        "shape (3, 0), axis 0", lambda: S(pp.add, np.zeros((3, 0)), axis=0), Value(np.zeros((3, 0)))
    )
    case(
        "1e308 + 1e308 overflows to inf (IEEE)",
        lambda: S(pp.add, np.array([1e308, 1e308, -1e308])),
        Value(np.array([1e308, np.inf, np.inf])),
    )
    case(
        "subnormals",
        lambda: S(pp.add, np.full(4, 5e-324)),
        Value(np.array([5e-324, 1e-323, 1.5e-323, 2e-323])),
    )
    case(
        "NaN in the middle",
        lambda: S(pp.add, np.array([1.0, np.nan, 2.0])),
        Value(np.array([1.0, np.nan, np.nan])),
    )
    case(
        "maximum with NaN",
        lambda: S(pp.maximum, np.array([1.0, np.nan, 5.0])),
        Value(np.array([1.0, np.nan, np.nan])),
    )
    case(
        "minimum of int16",
        lambda: S(pp.minimum, np.array([5, -3, 7, -9], np.int16)),
        Value(np.array([5, -3, -3, -9]), dtype="int16"),
    )
    case("logaddexp of int", lambda: S(pp.logaddexp, np.arange(3)), Error("elems"))
    case(
        "logaddexp of [inf, inf]",
        lambda: S(pp.logaddexp, np.array([np.inf, np.inf])),
        Value(np.array([np.inf, np.inf])),
    )
    case(
        "logaddexp of [1000, 1000, -inf]",
        lambda: S(pp.logaddexp, np.array([1000.0, 1000.0, -np.inf])),
        Value(np.array([1000.0, 1000.0 + math.log(2), 1000.0 + math.log(2)])),
    )
    case(
        "float32, 10^4 x 0.1",
        lambda: S(pp.add, np.full(10_000, 0.1, np.float32)),
        Value(
            lambda: cumsum64(np.full(10_000, np.float32(0.1))), rtol=1e4 * 2.0**-24, dtype="float32"
        ),
    )
    case(
        "float16 3000 ones (float32 inside)",
        lambda: S(pp.add, np.ones(3000, np.float16)),
        Value(
            lambda: np.arange(1, 3001).astype(np.float16).astype(np.float64),
            rtol=2**-11,
            dtype="float16",
        ),
    )
    case(
        "float16 overflow to inf on narrowing",
        lambda: S(pp.add, np.array([60000, 60000], np.float16)),
        Value(np.array([60000.0, np.inf])),
    )
    if ml_dtypes is not None:
        case(
            "ml_dtypes bfloat16",
            lambda: S(pp.add, np.ones(300, ml_dtypes.bfloat16)),
            Value(
                lambda: np.arange(1, 301).astype(ml_dtypes.bfloat16).astype(np.float64),
                rtol=2**-8,
                dtype="bfloat16",
            ),
        )
        case(
            "ml_dtypes float8_e4m3fn",
            lambda: S(pp.add, np.ones(3, ml_dtypes.float8_e4m3fn)),
            Either(Value([1.0, 2.0, 3.0]), "elems", "float8_e4m3fn"),
        )
        case(
            "ml_dtypes int4",
            lambda: S(pp.add, np.ones(3, ml_dtypes.int4)),
            Either(Value(np.array([1, 2, 3])), "elems", "int4"),
        )
    if torch is not None:
        case(
            "torch requires grad",
            lambda: S(pp.add, torch.arange(1.0, 4.0, requires_grad=True)),
            Value([1.0, 3.0, 6.0]),
        )
        case(
            "torch gradient of the scan",
            lambda: (lambda t: (S(pp.add, t).sum().backward(), t.grad)[1])(
                torch.ones(4, requires_grad=True)
            ),
            Value([4.0, 3.0, 2.0, 1.0]),
        )
        case(
            "torch bfloat16",
            lambda: S(pp.add, torch.ones(300, dtype=torch.bfloat16)),
            Value(
                lambda: (
                    np.arange(1, 301).astype(ml_dtypes.bfloat16).astype(np.float64)
                    if ml_dtypes
                    else np.arange(1, 301)
                ),
                rtol=2**-8,
            ),
        )
        case("torch int64", lambda: S(pp.add, torch.arange(5)), Value(np.array([0, 1, 3, 6, 10])))
        case(
            "torch non-contiguous",
            lambda: S(pp.add, torch.arange(12.0).reshape(3, 4).t(), axis=1),
            Value(lambda: np.cumsum(np.arange(12.0).reshape(3, 4).T, axis=1)),
        )
        case(
            "numpy and torch leaves mixed",
            lambda: S(pp.linear_recurrence, (np.ones(4), torch.ones(4, dtype=torch.float64))),
            Error("elems"),
        )
    if pd is not None:
        case(
            "pandas Series",
            lambda: S(pp.add, pd.Series([1.0, 2.0, 3.0])),
            Either(Value([1.0, 3.0, 6.0]), "elems"),
        )


SCAN = Table("associative_scan", scan_cases)


@pytest.mark.parametrize("c", SCAN.params())
def test_scan(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
