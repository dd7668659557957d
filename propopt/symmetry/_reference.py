"""The full double loop in plain Python and float64: what the tests trust."""

from __future__ import annotations

import numpy as np

from ._plan import PairPlan


def pair_sum(p: PairPlan) -> np.ndarray:
    """``out[i] = sum_{j != i} w[j] f(X[i], X[j])`` (or over all sources for targets ``T``)."""
    f, w, args, k, targets = getattr(p.kernel, "py_func", p.kernel), p.w, p.args, p.k, p.T
    X = np.asarray(p.X, dtype=np.float64)
    T = X if targets is None else np.asarray(targets, dtype=np.float64)
    out = np.zeros((T.shape[0], k))
    for i in range(T.shape[0]):
        for j in range(X.shape[0]):
            if targets is None and i == j:
                continue
            out[i] += float(w[j]) * np.asarray(f(T[i], X[j], *args), dtype=np.float64)
    return out
