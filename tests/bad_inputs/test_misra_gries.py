"""Bad inputs of ``MisraGries``: one test per case (``_judge``)."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest

from tests.bad_inputs._judge import Case, Check, Either, Error, Table, Value, judge, rng

try:
    import torch
except ImportError:  # the cases that need it are left out
    torch = None

try:
    import pandas as pd
except ImportError:  # the cases that need it are left out
    pd = None

pytestmark = pytest.mark.bad_inputs


def misra_gries_cases(case: Table) -> None:
    from propopt.redundancy import MisraGries as MG

    def bound_check(items: list[int], m: int) -> Check:
        def pred(s: Any) -> tuple[bool, str]:
            f = collections.Counter(items)
            n = len(items)
            keys = sorted(set(items) | set(int(k) for k in s.heavy_hitters(threshold=-1)[0]))
            est = s.estimate(np.array(keys, dtype=np.int64)) if keys else np.zeros(0)
            bad = [
                (k, int(e), f[k])
                for k, e in zip(keys, est)
                if not (f[k] - n / (m + 1) <= e <= f[k])
            ]
            return (not bad and s.n == n), f"violations {bad[:3]}, n={s.n}"

        return Check(pred)

    case("m=0", lambda: MG(0), Error("m"))
    case("m=2.0", lambda: MG(2.0), Error("m"))
    case("m='3'", lambda: MG("3"), Error("m"))
    case("m=True", lambda: MG(True), Error("m"))
    case("float items", lambda: MG(2).update(np.array([1.5])), Error("items"))
    case("string items", lambda: MG(2).update(np.array(["a"])), Error("items"))
    case(
        "uint64 items >= 2^63",
        lambda: MG(2).update(np.array([2**64 - 1, 2**64 - 1, 5], np.uint64)).heavy_hitters(),
        Either(Value((np.array([2**64 - 1, 5], dtype=object), np.array([2, 1]))), "items"),
    )
    case(
        "estimate of 7.9 (a float)",
        lambda: MG(2).update(np.array([7, 7, 7])).estimate([7.9]),
        Either(Value(np.array([0])), "items"),
    )
    case(
        "estimate of 'a'", lambda: MG(2).update(np.array([7, 7, 7])).estimate(["a"]), Error("items")
    )
    case(
        "estimate of 2**64-1 (Python int)",
        lambda: MG(2).update(np.array([7, 7, 7])).estimate([2**64 - 1]),
        Either(Value(np.array([0])), "items"),
    )
    case(
        "estimate of uint64 2**64-1 when -1 is held",
        lambda: MG(2).update(np.array([-1, -1])).estimate(np.array([2**64 - 1], np.uint64)),
        Either(Value(np.array([0])), "items"),
    )
    case(
        "heavy_hitters(threshold='a')",
        lambda: MG(2).update(np.array([7, 7, 7])).heavy_hitters("a"),
        Error("threshold"),
    )
    case(
        "heavy_hitters(threshold=nan)",
        lambda: MG(2).update(np.array([7, 7, 7])).heavy_hitters(float("nan")),
        Error("threshold"),
    )
    case(
        "heavy_hitters(threshold=2): counts that may exceed 2",
        lambda: MG(2).update(np.array([7, 7, 7, 1])).heavy_hitters(2),
        Value((np.array([7, 1]), np.array([3, 1]))),
    )
    case("merge with an int", lambda: MG(2).merge(5), Error("b", "other"))
    case("merge m=2 with m=3", lambda: MG(2).merge(MG(3)), Error("m"))
    case("list items", lambda: MG(2).update([1, 1, 2]), bound_check([1, 1, 2], 2))
    case(
        "generator items",
        lambda: MG(2).update(i for i in [1, 1, 2]),
        Either(bound_check([1, 1, 2], 2), "items"),
    )
    case(
        "bool items", lambda: MG(2).update(np.array([True, True, False])), bound_check([1, 1, 0], 2)
    )
    if pd is not None:
        case(
            "pandas Series items",
            lambda: MG(2).update(pd.Series([1, 1, 2])),
            bound_check([1, 1, 2], 2),
        )
    if torch is not None:
        case(
            "torch items", lambda: MG(2).update(torch.tensor([1, 1, 2])), bound_check([1, 1, 2], 2)
        )
    case(
        "object array of ints",
        lambda: MG(2).update(np.array([1, 1, 2], object)),
        Either(bound_check([1, 1, 2], 2), "items"),
    )
    case("empty items", lambda: MG(2).update(np.array([], np.int64)), bound_check([], 2))
    case("0-d item", lambda: MG(2).update(np.int64(3)), bound_check([3], 2))
    case(
        "int8 negatives",
        lambda: MG(2).update(np.array([-1, -1, -128], np.int8)),
        bound_check([-1, -1, -128], 2),
    )
    case(
        "2-D items (raveled)",
        lambda: MG(2).update(np.array([[1, 2], [1, 1]])),
        Either(bound_check([1, 2, 1, 1], 2), "items"),
    )
    items = [int(v) for v in rng(12).zipf(1.5, 2000) % 50]
    case("zipf stream, m=1", lambda: MG(1).update(np.array(items)), bound_check(items, 1))
    case(
        "zipf stream merged, m=5",
        lambda: MG(5).update(np.array(items[:700])).merge(MG(5).update(np.array(items[700:]))),
        bound_check(items, 5),
    )
    case(
        "int64 extremes",
        lambda: MG(2).update(np.array([-(2**63), 2**63 - 1, 2**63 - 1])),
        bound_check([-(2**63), 2**63 - 1, 2**63 - 1], 2),
    )
    case(
        "masked items are not counted",
        lambda: MG(3).update(np.ma.MaskedArray([1, 1, 2, 1, 1], mask=[1, 1, 0, 1, 1])),
        bound_check([2], 3),
    )


MISRA_GRIES = Table("MisraGries", misra_gries_cases)


@pytest.mark.parametrize("c", MISRA_GRIES.params())
def test_misra_gries(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
