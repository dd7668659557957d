"""The oracle for top-k: sort every (score, id) pair with Python's ``sorted``.

Slow and obviously correct; the kernels are tested against it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def _number(score: Any) -> int | float:
    """``score`` as an exact Python number: ints stay ints, anything else is a float.

    Scalars of ml_dtypes floats (``bfloat16``...) are not ``np.floating``:
    testing for floats instead would turn them into truncated ints.
    """
    if isinstance(score, (bool, int, np.bool_, np.integer)):
        return int(score)
    return float(score)


def _isnan(score: Any) -> bool:
    s = _number(score)
    return isinstance(s, float) and math.isnan(s)


def order_key(score: Any, ident: int, largest: bool, nan_largest: bool) -> tuple[Any, ...]:
    """Sort key putting the best ``(score, id)`` first: ties by smaller id."""
    s = _number(score)
    if _isnan(s):
        # NaN ranks above every number (torch's convention)
        return (0 if largest else 2, 0, ident)
    return (1, -s if largest else s, ident)


def best(
    scores: Sequence[Any],
    ids: Sequence[int],
    k: int,
    largest: bool = True,
    nan: str = "ignore",
) -> list[int]:
    """Positions of the best ``min(k, n)`` pairs, best first.

    NaNs are dropped unless ``nan='largest'``.
    """
    nan_largest = nan == "largest"
    keep = [i for i in range(len(scores)) if nan_largest or not _isnan(scores[i])]
    keep.sort(key=lambda i: order_key(scores[i], int(ids[i]), largest, nan_largest))
    return keep[:k]


def topk(x: np.ndarray, k: int, largest: bool = True, nan: str = "ignore") -> np.ndarray:
    """Positions of the top ``k`` of each row of a 2-D array (ragged rows padded with -1)."""
    rows, n = x.shape
    out = np.full((rows, min(k, n)), -1, np.int64)
    for r in range(rows):
        row = x[r].tolist()
        pos = best(row, list(range(n)), k, largest, nan)
        out[r, : len(pos)] = pos
    return out
