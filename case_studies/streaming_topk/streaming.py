"""Top-k rows of a stream of event chunks, on several threads, in O(k) memory.

Each chunk is a NumPy structured array or a pandas DataFrame with a score
column and any payload columns.  Worker threads pull chunks from the
iterator (one lock; the chunk's first row number is assigned as it is
taken), and each keeps its own :class:`propopt.TopK` and the payload rows of
its current winners only.  At the end the per-thread summaries are merged
(:func:`propopt.merge_topk`, associative and commutative, so the answer does
not depend on which thread took which chunk) and the winners' rows are
gathered.  Memory: ``O(k)`` per thread plus the chunks in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import numba
import numpy as np

import propopt as pp
from propopt.arrays import count


def _columns(chunk: Any) -> list[str]:
    if isinstance(chunk, np.ndarray):
        return list(chunk.dtype.names or ())
    return [str(c) for c in chunk.columns]


def _scores(chunk: Any, score: str, index: int) -> np.ndarray:
    if isinstance(chunk, np.ndarray):
        if chunk.dtype.names is None:
            raise TypeError(
                f"chunk {index} is a plain array of dtype {chunk.dtype}; pass structured "
                "arrays (a score field and payload fields) or pandas DataFrames"
            )
        if score not in chunk.dtype.names:
            raise ValueError(
                f"chunk {index} has no column {score!r} (columns: {', '.join(_columns(chunk))}); "
                "pass score=<name of the score column>"
            )
        return np.ascontiguousarray(chunk[score])
    if not hasattr(chunk, "columns"):
        raise TypeError(
            f"chunk {index} is a {type(chunk).__name__}; pass NumPy structured arrays or "
            "pandas DataFrames"
        )
    if score not in chunk.columns:
        raise ValueError(
            f"chunk {index} has no column {score!r} (columns: {', '.join(_columns(chunk))}); "
            "pass score=<name of the score column>"
        )
    copies = sum(1 for c in chunk.columns if c == score)
    if copies > 1:
        raise ValueError(
            f"chunk {index} has {copies} columns named {score!r}, so the score column is "
            "ambiguous; rename all but one (df.columns = [...]) or pass score= of a unique column"
        )
    return np.ascontiguousarray(chunk[score].to_numpy())


def _describe(chunk: Any) -> str:
    return "a structured array" if isinstance(chunk, np.ndarray) else "a DataFrame"


def _same_as_first(chunk: Any, scores: np.ndarray, index: int, first: dict[str, Any],
                   score: str) -> None:  # fmt: skip
    """Chunk ``index`` is of chunk 0's kind, fields and score dtype, or a one-line error.

    Checked in stream order as each chunk is taken (under the lock), so the
    error does not depend on which thread took which chunk.
    """
    if index == 0:
        first.update(kind=_describe(chunk), names=_columns(chunk), dtype=scores.dtype)
        try:  # the dtypes top-k ranks, by the summary's own check
            pp.TopK.empty(0, scores.dtype)
        except TypeError:
            raise TypeError(
                f"chunk 0: the score column {score!r} has dtype {scores.dtype}, which top-k "
                "cannot rank (bool, integer and float scores); cast that column to a number "
                "dtype first"
            ) from None
        return
    if _describe(chunk) != first["kind"]:
        raise TypeError(
            f"chunk {index} is {_describe(chunk)} but chunk 0 is {first['kind']}: pass chunks "
            "of one kind (pandas.DataFrame(array) converts a structured array)"
        )
    if isinstance(chunk, np.ndarray) and _columns(chunk) != first["names"]:
        raise TypeError(
            f"chunk {index} has fields ({', '.join(_columns(chunk))}) but chunk 0 has "
            f"({', '.join(first['names'])}): pass chunks with the same fields, in one order"
        )
    if scores.dtype != first["dtype"]:
        raise TypeError(
            f"chunk {index}: the score column {score!r} has dtype {scores.dtype} but chunk 0's "
            f"has {first['dtype']}; cast it to one dtype in every chunk"
        )


def _take(chunk: Any, positions: np.ndarray) -> Any:
    if isinstance(chunk, np.ndarray):
        return chunk[positions]
    return chunk.iloc[positions]


def _concat(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if isinstance(a, np.ndarray):
        return np.concatenate([a, b])
    import pandas as pd

    return pd.concat([a, b])


class _Worker:
    """One thread's summary and the payload rows of its winners."""

    def __init__(self) -> None:
        self.summary: pp.TopK | None = None
        self.rows: Any = None  # rows of the current winners, in summary order
        self.ids = np.empty(0, np.int64)

    def add(self, chunk: Any, scores: np.ndarray, offset: int, k: int, **opts: Any) -> None:
        if self.summary is None:
            self.summary = pp.TopK.empty(k, scores.dtype, **opts)
        self.summary.update(scores, offset=offset)
        _, ids = self.summary.result()
        new = ids[(ids >= offset) & (ids < offset + len(scores))]
        if new.shape[0] == 0:  # nothing entered: the winners are unchanged
            if self.rows is None:
                self.rows = _take(chunk, new)
            return
        both = _concat(self.rows, _take(chunk, new - offset))
        both_ids = np.concatenate([self.ids, new])
        where = {int(i): p for p, i in enumerate(both_ids)}
        self.rows = _take(both, np.array([where[int(i)] for i in ids], np.int64))
        self.ids = ids


def top_k_chunks(
    chunks: Iterable[Any],
    k: int,
    score: str = "score",
    largest: bool = True,
    *,
    threads: int | None = None,
    nan: str = "ignore",
) -> tuple[Any, np.ndarray]:
    """The ``k`` best rows of a stream of chunks, best first, and their row numbers.

    Parameters
    ----------
    chunks : iterable of structured arrays or DataFrames
        Read once, lazily; all of one kind (structured arrays with the same
        fields, or DataFrames), each with a ``score`` column of one dtype
        throughout (checked in stream order: a chunk that differs from
        chunk 0 is an error, whichever thread takes it).
    k : int
        How many rows (>= 0).
    score : str
        Name of the score column.
    largest, nan
        As for :class:`propopt.TopK`.
    threads : int, optional
        Worker threads (default: :func:`propopt.get_num_threads`, numba's
        thread count or fewer when other processes keep cores busy, and
        at most :func:`propopt.set_num_threads`).  Each runs the top-k
        kernel on its own chunk on one core.

    Returns
    -------
    rows, ids
        The winners' rows (same type as the chunks) and their row numbers
        in the stream (int64); ties go to the earlier row.
    """
    threads = pp.get_num_threads() if threads is None else count("threads", threads)
    pp.TopK.empty(k, np.float64)  # validates k early
    if isinstance(chunks, np.ndarray) or hasattr(chunks, "columns"):
        what = "NumPy array" if isinstance(chunks, np.ndarray) else "DataFrame"
        raise TypeError(
            f"chunks is one {what}, not an iterable of chunks: pass [chunks] for a single chunk"
        )
    try:
        it = iter(chunks)
    except TypeError:
        raise TypeError(
            f"chunks={chunks!r} is not iterable: pass a list or generator of structured "
            "arrays or DataFrames"
        ) from None
    lock = threading.Lock()
    state = {"offset": 0, "index": 0}
    # the error of the earliest chunk: every chunk before it was taken and
    # finishes, so which error is raised does not depend on the threads' timing
    errors: dict[int, Exception] = {}
    first: dict[str, Any] = {}  # chunk 0's kind, fields and score dtype
    workers = [_Worker() for _ in range(threads)]

    def run(w: _Worker) -> None:
        numba.set_num_threads(1)  # this thread's kernels stay on one core
        while True:
            with lock:
                if errors:
                    return
                index, offset = state["index"], state["offset"]
                try:
                    chunk = next(it)
                except StopIteration:
                    return
                except Exception as exc:  # the iterator's own error
                    errors[index] = exc
                    return
                try:
                    scores = _scores(chunk, score, index)
                    _same_as_first(chunk, scores, index, first, score)
                except Exception as exc:
                    errors[index] = exc
                    return
                state["index"] = index + 1
                state["offset"] = offset + len(scores)
            try:
                w.add(chunk, scores, offset, k, largest=largest, nan=nan)
            except Exception as exc:
                with lock:
                    errors[index] = exc
                return

    pool = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[min(errors)]
    live = [w for w in workers if w.summary is not None]
    if not live:
        raise ValueError("chunks is empty; top-k of no rows is undefined")
    total = live[0].summary
    for w in live[1:]:
        total = pp.merge_topk(total, w.summary)  # type: ignore[arg-type]
    _, ids = total.result()  # type: ignore[union-attr]
    rows = None
    all_ids = np.empty(0, np.int64)
    for w in live:
        rows = _concat(rows, w.rows)
        all_ids = np.concatenate([all_ids, w.ids])
    where = {int(i): p for p, i in enumerate(all_ids)}
    return _take(rows, np.array([where[int(i)] for i in ids], np.int64)), ids
