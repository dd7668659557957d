"""The full double loop in plain Python and float64: what the tests trust."""

from __future__ import annotations

from typing import Any

import numpy as np


def pair_sum(
    kernel: Any,
    X: np.ndarray,
    w: np.ndarray,
    args: tuple[Any, ...],
    k: int,
    targets: np.ndarray | None = None,
) -> np.ndarray:
    """``out[i] = sum_{j != i} w[j] f(X[i], X[j])`` (or over all sources for targets)."""
    f = getattr(kernel, "py_func", kernel)
    X = np.asarray(X, dtype=np.float64)
    T = X if targets is None else np.asarray(targets, dtype=np.float64)
    out = np.zeros((T.shape[0], k))
    for i in range(T.shape[0]):
        for j in range(X.shape[0]):
            if targets is None and i == j:
                continue
            out[i] += float(w[j]) * np.asarray(f(T[i], X[j], *args), dtype=np.float64)
    return out
