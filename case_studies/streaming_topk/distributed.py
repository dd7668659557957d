"""Top-k of a dask array or dask dataframe: a tree reduction of TopK summaries.

Each block (partition) is reduced to a :class:`propopt.TopK` (with the
payload rows of its winners, for dataframes); summaries are merged
pairwise in a tree of fan-in ``split_every``.  The merge is associative and
commutative and ties go to the smaller global row number, so the answer is
the in-memory answer exactly, whatever the chunking and the tree.  Only
``O(k)`` per block crosses the network (summaries pickle through their
checksummed byte format).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import propopt as pp

#: Rows of one dataframe partition are numbered ``(partition << ROW_BITS) + position``:
#: ordered like global row numbers without a pass to count partition lengths.
ROW_BITS = 40


def _block_summary(block: np.ndarray, offset: int, k: int, largest: bool, nan: str) -> pp.TopK:
    return pp.TopK.empty(k, block.dtype, largest, nan=nan, start=offset).update(block.ravel())


def _tree(leaves: list[Any], combine: Any, split_every: int) -> Any:
    import dask

    level = leaves
    while len(level) > 1:
        nxt = []
        for s in range(0, len(level), split_every):
            group = level[s : s + split_every]
            nxt.append(group[0] if len(group) == 1 else dask.delayed(combine)(*group))
        level = nxt
    return level[0]


def _merge_many(*summaries: pp.TopK) -> pp.TopK:
    out = summaries[0]
    for s in summaries[1:]:
        out = pp.merge_topk(out, s)
    return out


def _check_split(split_every: int) -> int:
    if (
        isinstance(split_every, bool)
        or not isinstance(split_every, (int, np.integer))
        or split_every < 2
    ):
        raise ValueError(f"split_every={split_every!r}: the tree's fan-in must be an int >= 2")
    return int(split_every)


def _check_summary(k: int, dtype: Any, largest: bool, nan: str, what: str) -> None:
    """``k``, ``largest``, ``nan`` and the scores' dtype, checked here, not on a worker.

    A dtype top-k cannot rank (object, strings) is an error naming ``what``,
    the scores the caller passed.
    """
    try:
        pp.TopK.empty(0, dtype)
    except TypeError:
        raise TypeError(
            f"{what} has dtype {dtype}, which top-k cannot rank (bool, integer and float "
            "scores); cast it to a number dtype first"
        ) from None
    pp.TopK.empty(k, dtype, largest, nan=nan)


def top_k_dask_array(
    x: Any,
    k: int,
    largest: bool = True,
    *,
    nan: str = "ignore",
    split_every: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of a 1-D dask array: ``(values, indices)`` as NumPy arrays, best first.

    Computed with the current dask scheduler (a ``distributed.Client`` if
    one is active).  Equal to ``propopt.topk(x.compute(), k)``.  Masked
    entries (``dask.array.ma``) are never selected.  ``k = 0`` gives empty
    arrays.
    """
    import dask
    import dask.array as da

    if not isinstance(x, da.Array):
        raise TypeError(
            f"x is a {_type_name(x)}, not a dask array; for an in-memory array call "
            "propopt.topk(x, k), or wrap it with dask.array.from_array(x, chunks=...)"
        )
    if x.ndim != 1:
        raise ValueError(
            f"x must be a 1-D dask array, got shape {x.shape}; flatten it first (x.ravel())"
        )
    if any(np.isnan(c) for c in x.chunks[0]):
        raise ValueError("x has unknown chunk sizes; call x.compute_chunk_sizes() first")
    _check_summary(k, x.dtype, largest, nan, "x")
    split_every = _check_split(split_every)
    offsets = np.concatenate([[0], np.cumsum(x.chunks[0])[:-1]]).astype(np.int64)
    leaves = [
        dask.delayed(_block_summary)(b, int(o), k, largest, nan)
        for b, o in zip(x.to_delayed().ravel(), offsets)
    ]
    total = _tree(leaves, _merge_many, split_every).compute()
    return total.result()


def _type_name(x: Any) -> str:
    return f"{type(x).__module__.split('.')[0]}.{type(x).__name__}"


def _partition(df: Any, part: int, k: int, score: str, largest: bool, nan: str) -> tuple[Any, Any]:
    s = df[score].to_numpy()
    summary = pp.TopK.empty(k, s.dtype, largest, nan=nan, start=part << ROW_BITS).update(s)
    _, ids = summary.result()
    return summary, df.iloc[ids - (part << ROW_BITS)]


def _merge_rows(*pairs: tuple[Any, Any]) -> tuple[Any, Any]:
    import pandas as pd

    total = _merge_many(*(p[0] for p in pairs))
    _, ids = total.result()
    rows = pd.concat([p[1] for p in pairs])
    all_ids = np.concatenate([p[0].result()[1] for p in pairs])
    where = {int(i): n for n, i in enumerate(all_ids)}
    return total, rows.iloc[[where[int(i)] for i in ids]]


def top_k_dask_dataframe(
    df: Any,
    k: int,
    score: str = "score",
    largest: bool = True,
    *,
    nan: str = "ignore",
    split_every: int = 8,
) -> Any:
    """The ``k`` best rows of a dask dataframe by ``score``, best first (a pandas DataFrame).

    Ties go to the earlier row (partition order, then position).  Equal to
    the same selection on ``df.compute()``.
    """
    import dask

    if not (hasattr(df, "to_delayed") and hasattr(df, "npartitions")):
        raise TypeError(
            f"df is a {_type_name(df)}, not a dask dataframe; wrap it with "
            "dask.dataframe.from_pandas(df, npartitions=...), or for in-memory data call "
            f"propopt.topk(df[{score!r}].to_numpy(), k) and take those rows"
        )
    if score not in df.columns:
        raise ValueError(
            f"df has no column {score!r} (columns: {', '.join(map(str, df.columns))}); "
            "pass score=<name of the score column>"
        )
    copies = sum(1 for c in df.columns if c == score)
    if copies > 1:
        raise ValueError(
            f"df has {copies} columns named {score!r}, so the score column is ambiguous; "
            "rename all but one (df.columns = [...]) or pass score= of a unique column"
        )
    _check_summary(k, df[score].dtype, largest, nan, f"the score column {score!r}")
    split_every = _check_split(split_every)
    leaves = [
        dask.delayed(_partition)(p, i, k, score, largest, nan)
        for i, p in enumerate(df.to_delayed())
    ]
    _, rows = _tree(leaves, _merge_rows, split_every).compute()
    return rows
