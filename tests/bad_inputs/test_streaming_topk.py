"""Bad inputs of ``streaming_topk``: one test per case (``_judge``)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.bad_inputs._judge import Case, Either, Error, Table, Value, judge

try:
    import pandas as pd
except ImportError:  # the cases that need it are left out
    pd = None

try:
    import dask.array as da
except ImportError:  # the cases that need it are left out
    da = None

pytestmark = pytest.mark.bad_inputs


def streaming_cases(case: Table) -> None:
    from propopt_case_studies import streaming_topk as st

    def rec() -> np.ndarray:
        r = np.zeros(6, dtype=[("score", "f8"), ("id", "i8")])
        r["score"] = [3, 1, 4, 1, 5, 9]
        r["id"] = np.arange(6) * 10
        return r

    case(
        "top_k_chunks of two chunks",
        lambda: st.top_k_chunks([rec()[:3], rec()[3:]], 2)[1],
        Value(np.array([5, 4])),
    )
    case("k=-1", lambda: st.top_k_chunks([rec()], -1), Error("k"))
    case("score column missing", lambda: st.top_k_chunks([rec()], 2, score="x"), Error("score"))
    case("threads=0", lambda: st.top_k_chunks([rec()], 2, threads=0), Error("threads"))
    case(
        "threads=np.int64(1)",
        lambda: st.top_k_chunks([rec()], 2, threads=np.int64(1))[1],
        Either(Value(np.array([5, 4])), "threads"),
    )
    case(
        "chunks with other fields",
        lambda: st.top_k_chunks([rec(), rec()[["score"]]], 2),
        Error("chunk", "chunks"),
    )
    case(
        "plain arrays as chunks",
        lambda: st.top_k_chunks([np.array([1.0, 2.0])], 1),
        Error("chunk", "chunks"),
    )
    case("chunks=5 (not iterable)", lambda: st.top_k_chunks(5, 2), Error("chunks"))
    case(
        "generator of chunks",
        lambda: st.top_k_chunks((c for c in [rec()[:2], rec()[2:]]), 3)[1],
        Value(np.array([5, 4, 2])),
    )
    case("largest='no'", lambda: st.top_k_chunks([rec()], 2, largest="no"), Error("largest"))
    if pd is not None:
        case(
            "DataFrames",
            lambda: st.top_k_chunks(
                [pd.DataFrame({"score": [1.0, 5.0, 2.0]}), pd.DataFrame({"score": [7.0, 0.0]})], 2
            )[1],
            Value(np.array([3, 1])),
        )
        case(
            "score dtype changes between chunks (depends on the thread schedule)",
            lambda: st.top_k_chunks(
                [pd.DataFrame({"score": [1.0, 5.0]}), pd.DataFrame({"score": [7, 0]})], 2
            ),
            Error("score"),
        )
        case(
            "score dtype changes between chunks, int first",
            lambda: st.top_k_chunks(
                [pd.DataFrame({"score": [7, 0]}), pd.DataFrame({"score": [1.0, 5.0]})], 2
            ),
            Error("score"),
        )
        case(
            "one DataFrame as chunks",
            lambda: st.top_k_chunks(pd.DataFrame({"score": [1.0, 5.0]}), 1),
            Error("chunks"),
        )
        case(
            "structured array then DataFrame",
            lambda: st.top_k_chunks([rec(), pd.DataFrame({"score": [7.0, 0.0]})], 2),
            Error("chunk", "chunks"),
        )
        case(
            "string score column",
            lambda: st.top_k_chunks([pd.DataFrame({"score": ["a", "b"]})], 1),
            Error("score"),
        )
    if da is not None:
        case(
            "top_k_dask_array",
            lambda: st.top_k_dask_array(da.from_array(np.arange(10.0), chunks=3), 2),
            Value((np.array([9.0, 8.0]), np.array([9, 8]))),
        )
        case(
            "top_k_dask_array of numpy", lambda: st.top_k_dask_array(np.arange(10.0), 2), Error("x")
        )
        case(
            "top_k_dask_array 2-D",
            lambda: st.top_k_dask_array(da.ones((3, 3), chunks=2), 2),
            Error("x"),
        )


STREAMING_TOPK = Table("streaming_topk", streaming_cases)


@pytest.mark.parametrize("c", STREAMING_TOPK.params())
def test_streaming_topk(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
