"""Bad inputs of ``TopK / merge_topk``: one test per case (``_judge``)."""

from __future__ import annotations

import numpy as np
import pytest

import propopt as pp
from tests.bad_inputs._judge import Case, Check, Either, Error, Table, Value, judge

try:
    import torch
except ImportError:  # the cases that need it are left out
    torch = None

try:
    import pandas as pd
except ImportError:  # the cases that need it are left out
    pd = None

pytestmark = pytest.mark.bad_inputs


def topk_summary_cases(case: Table) -> None:
    E = pp.TopK.empty
    res = lambda t: t.result()  # noqa: E731
    case("k=-1", lambda: E(-1, np.float64), Error("k"))
    case("k=2.5", lambda: E(2.5, np.float64), Error("k"))
    case(
        "dtype='float32' (a string)",
        lambda: res(E(2, "float32").update(np.array([1.0, 5.0, 3.0], np.float32))),
        Value((np.array([5.0, 3.0]), np.array([1, 2])), dtype=None),
    )
    case("dtype='banana'", lambda: E(3, "banana"), Error("dtype"))
    case("dtype=complex128", lambda: E(3, np.complex128), Error("dtype"))
    case(
        "dtype=None",
        lambda: res(E(3, None).update([1.0])),
        Either(Value((np.array([1.0]), np.array([0]))), "dtype"),
    )
    if torch is not None:
        case(
            "dtype=torch.float32",
            lambda: E(3, torch.float32),
            Either(Check(lambda t: (t.dtype == np.float32, str(t.dtype))), "dtype"),
        )
    case("start=1.5", lambda: E(3, np.float64, start=1.5), Error("start"))
    case("start=2**63", lambda: E(3, np.float64, start=2**63), Error("start"))
    case("largest='no'", lambda: E(3, np.float64, largest="no"), Error("largest"))
    case("nan='drop'", lambda: E(3, np.float64, nan="drop"), Error("nan"))
    case(
        "update with a list",
        lambda: res(E(2, np.float64).update([1.0, 3.0, 2.0])),
        Value((np.array([3.0, 2.0]), np.array([1, 2]))),
    )
    case(
        "list int 2^24+1 into float32",
        lambda: E(2, np.float32).update([16777217, 1]),
        Error("scores"),
    )
    case(
        "float64 array into float32",
        lambda: E(2, np.float32).update(np.array([1.0, 2.0])),
        Error("scores"),
    )
    case(
        "int64 2^53+1 into float64 (inexact)",
        lambda: res(E(2, np.float64).update(np.array([2**53 + 1, 1]))),
        Either(Value((np.array([2**53 + 1, 1], dtype=object), np.array([0, 1]))), "scores"),
    )
    case(
        "uint64 2^64-1 into float64 (inexact)",
        lambda: res(E(1, np.float64).update(np.array([2**64 - 1], np.uint64))),
        Either(Value((np.array([2**64 - 1], dtype=object), np.array([0]))), "scores"),
    )
    case(
        "int32 into float64",
        lambda: res(E(2, np.float64).update(np.array([5, 1, 7], np.int32))),
        Value((np.array([7.0, 5.0]), np.array([2, 0]))),
    )
    case(
        "uint8 into float32",
        lambda: res(E(2, np.float32).update(np.array([5, 1, 7], np.uint8))),
        Value((np.array([7.0, 5.0]), np.array([2, 0]))),
    )
    case(
        "int64 into float32",
        lambda: E(2, np.float32).update(np.array([5, 1])),
        Either(Value((np.array([5.0, 1.0]), np.array([0, 1]))), "scores"),
    )
    case("2-D scores", lambda: E(2, np.float64).update(np.ones((2, 2))), Error("scores"))
    case("0-d scores", lambda: E(2, np.float64).update(np.array(3.0)), Error("scores"))
    case(
        "Python scalar scores",
        lambda: E(2, np.float64).update(3.0),
        Either(Value((np.array([3.0]), np.array([0]))), "scores"),
    )
    case(
        "generator scores", lambda: E(2, np.float64).update(x for x in [1.0, 2.0]), Error("scores")
    )
    if torch is not None:
        case(
            "torch scores",
            lambda: res(E(2, np.float32).update(torch.tensor([1.0, 5.0, 3.0]))),
            Value((np.array([5.0, 3.0]), np.array([1, 2]))),
        )
        case(
            "torch scores requiring grad",
            lambda: res(E(2, np.float32).update(torch.tensor([1.0, 5.0, 3.0], requires_grad=True))),
            Value((np.array([5.0, 3.0]), np.array([1, 2]))),
        )
    if pd is not None:
        case(
            "pandas Series scores",
            lambda: res(E(2, np.float64).update(pd.Series([1.0, 5.0, 3.0]))),
            Value((np.array([5.0, 3.0]), np.array([1, 2]))),
        )
    case(
        "ids of floats",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0, 3.0]), ids=np.array([1.0, 2.0, 3.0])),
        Error("ids"),
    )
    case(
        "ids of the wrong length",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0, 3.0]), ids=np.array([1, 2])),
        Error("ids"),
    )
    case(
        "ids uint64 >= 2^63",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0]), ids=np.array([2**63, 1], np.uint64)),
        Error("ids"),
    )
    case(
        "ids as a list",
        lambda: res(E(2, np.float64).update(np.array([1.0, 5.0]), ids=[10, 20])),
        Value((np.array([5.0, 1.0]), np.array([20, 10]))),
    )
    case(
        "ids masked",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0]), ids=np.ma.array([1, 2], mask=[0, 1])),
        Error("ids"),
    )
    case(
        "ids and offset",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0]), ids=[10, 20], offset=3),
        Error("ids", "offset"),
    )
    case(
        "offset=-5",
        lambda: res(E(2, np.float64).update(np.array([1.0, 5.0]), offset=-5)),
        Value((np.array([5.0, 1.0]), np.array([-4, -5]))),
    )
    case(
        "offset past int64",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0]), offset=2**63 - 1),
        Error("offset"),
    )
    case(
        "offset=1.0",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0]), offset=1.0),
        Error("offset"),
    )
    case(
        "NaN scores ignored",
        lambda: res(E(2, np.float64).update(np.array([np.nan, 5.0, 1.0]))),
        Value((np.array([5.0, 1.0]), np.array([1, 2]))),
    )
    case("NaN into an int TopK", lambda: E(2, np.int64).update([float("nan")]), Error("scores"))
    case(
        "big-endian scores",
        lambda: res(E(2, np.float64).update(np.array([1.0, 5.0, 3.0]).astype(">f8"))),
        Value((np.array([5.0, 3.0]), np.array([1, 2]))),
    )
    case(
        "negative-stride scores",
        lambda: res(E(2, np.float64).update(np.array([1.0, 5.0, 3.0, 7.0])[::-2])),
        Value((np.array([7.0, 5.0]), np.array([0, 1]))),
    )
    case(
        "same positions numbered twice",
        lambda: (
            E(2, np.float64)
            .update(np.array([1.0, 5.0]), offset=0)
            .update(np.array([9.0, 9.0]), offset=0)
        ),
        Error("offset"),
    )
    case(
        "bool into int64",
        lambda: res(E(2, np.int64).update(np.array([True, False]))),
        Value((np.array([1, 0]), np.array([0, 1]))),
    )
    case(
        "uint64 into int64",
        lambda: E(2, np.int64).update(np.array([2**63], np.uint64)),
        Error("scores"),
    )
    case("list with 2**63 into int64", lambda: E(2, np.int64).update([2**63]), Error("scores"))
    case("list with 1.5 into int64", lambda: E(2, np.int64).update([1.5]), Error("scores"))
    case(
        "np.matrix scores",
        lambda: E(2, np.float64).update(np.matrix([[1.0, 5.0, 3.0]])),
        Either(Value((np.array([5.0, 3.0]), np.array([1, 2]))), "scores"),
    )
    case(
        "masked scores",
        lambda: res(E(2, np.float64).update(np.ma.array([1.0, 5.0, 3.0], mask=[0, 1, 0]))),
        Value((np.array([3.0, 1.0]), np.array([2, 0]))),
    )
    case(
        "k=0 summary",
        lambda: res(E(0, np.float64).update(np.ones(3))),
        Value((np.zeros(0), np.zeros(0, np.int64))),
    )
    case(
        "merge k=2 with k=3", lambda: pp.merge_topk(E(2, np.float64), E(3, np.float64)), Error("k")
    )
    case(
        "merge float64 with float32",
        lambda: pp.merge_topk(E(2, np.float64), E(2, np.float32)),
        Error("dtype"),
    )
    case(
        "merge largest with smallest",
        lambda: pp.merge_topk(E(2, np.float64), E(2, np.float64, largest=False)),
        Error("largest"),
    )
    case("merge with a list", lambda: pp.merge_topk(E(2, np.float64), [1, 2]), Error("b"))
    case(
        "merge overlapping positions",
        lambda: pp.merge_topk(
            E(2, np.float64).update(np.ones(3)), E(2, np.float64).update(np.ones(3))
        ),
        Error("start", "offset"),
    )
    case(
        "merge of disjoint streams",
        lambda: res(
            pp.merge_topk(
                E(2, np.float64).update(np.array([1.0, 9.0])),
                E(2, np.float64, start=2).update(np.array([9.0, 3.0])),
            )
        ),
        Value((np.array([9.0, 9.0]), np.array([1, 2]))),
    )
    case("from_bytes(b'garbage')", lambda: pp.TopK.from_bytes(b"garbage"), Error("bytes", "data"))
    case("from_bytes(str)", lambda: pp.TopK.from_bytes("garbage"), Error("data"))
    case("from_bytes(None)", lambda: pp.TopK.from_bytes(None), Error("data"))
    case(
        "from_bytes truncated",
        lambda: pp.TopK.from_bytes(E(2, np.float64).update(np.ones(3)).to_bytes()[:-3]),
        Error("bytes", "data"),
    )

    def resealed(data: bytes, at: int, value: bytes) -> bytes:
        """``data`` with ``value`` written at ``at`` and its CRC-32 recomputed."""
        import struct
        import zlib

        body = data[:at] + value + data[at + len(value) : -4]
        return body + struct.pack("<I", zlib.crc32(body))

    two = E(4, np.float64).update(np.array([1.0, 2.5])).to_bytes()
    scores_at = 6 + 2 + 8 * 3 + 2 + 1 + 3 + 8  # header, dtype code '<f8', count
    case(
        "from_bytes unsorted pairs, valid checksum",
        lambda: pp.TopK.from_bytes(resealed(two, scores_at, np.array([1.0, 2.5]).tobytes())),
        Error("bytes", "data"),
    )
    case(
        "from_bytes NaN-policy byte 2, valid checksum",
        lambda: pp.TopK.from_bytes(resealed(two, 6 + 2 + 8 * 3 + 1, b"\x02")),
        Error("bytes", "data"),
    )
    case(
        "from_bytes(memoryview)",
        lambda: res(
            pp.TopK.from_bytes(memoryview(E(2, np.float64).update(np.array([1.0, 4.0])).to_bytes()))
        ),
        Value((np.array([4.0, 1.0]), np.array([1, 0]))),
    )
    case(
        "pickle round trip",
        lambda: res(
            __import__("pickle").loads(
                __import__("pickle").dumps(
                    E(2, np.float32).update(np.array([2.0, 8.0], np.float32))
                )
            )
        ),
        Value((np.array([8.0, 2.0]), np.array([1, 0]))),
    )


TOPK_SUMMARY = Table("TopK / merge_topk", topk_summary_cases)


@pytest.mark.parametrize("c", TOPK_SUMMARY.params())
def test_topk_summary(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
