"""Bad inputs of ``threads``: one test per case (``_judge``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import propopt as pp
from tests.bad_inputs._judge import Case, Error, Table, Value, judge

pytestmark = pytest.mark.bad_inputs


def threads_cases(case: Table) -> None:
    most = __import__("numba").config.NUMBA_NUM_THREADS
    case("set_num_threads(0)", lambda: pp.set_num_threads(0), Error("n"))
    case("set_num_threads(1.0)", lambda: pp.set_num_threads(1.0), Error("n"))
    case("set_num_threads(10**6)", lambda: pp.set_num_threads(10**6), Error("n"))
    case("set_num_threads('2')", lambda: pp.set_num_threads("2"), Error("n"))
    case("set_num_threads(True)", lambda: pp.set_num_threads(True), Error("n"))

    def ctx() -> Any:
        with pp.set_num_threads(np.int64(1)):
            inside = pp.get_num_threads()
        return inside, pp.get_num_threads() >= 1

    case("context manager with np.int64(1)", ctx, Value((1, True)))
    case(
        "a scan inside set_num_threads(1)",
        lambda: (
            lambda: [
                pp.set_num_threads(1),
                pp.associative_scan(pp.add, np.ones(5)),
                pp.set_num_threads(None),
            ][1]
        )(),
        Value(np.arange(1.0, 6.0)),
    )
    case(
        f"set_num_threads({most}) then None",
        lambda: [pp.set_num_threads(most), pp.set_num_threads(None), pp.get_num_threads() >= 1][-1],
        Value(True),
    )


THREADS = Table("threads", threads_cases)


@pytest.mark.parametrize("c", THREADS.params())
def test_threads(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
