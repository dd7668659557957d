"""The capstone table's row for Problem 2 (``propopt`` CLI, ``_capstone.PROBLEMS``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import propopt as pp

#: (n, chunk) per size: float32 scores streamed in chunks, k = 1000.
SIZES = {"small": (10**6, 10**5), "default": (10**7, 10**6), "large": (10**8, 10**6)}
K = 1000


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts))


def review(size: str = "default") -> dict[str, Any]:
    """Streaming TopK beside the chapter's sort-everything baseline.

    ``size``: 'small' (n = 10^6 in chunks of 10^5), 'default' (10^7 in
    chunks of 10^6) or 'large' (10^8 in chunks of 10^6); k = 1000 random
    float32 scores.  The baseline sorts everything with NumPy
    (``np.argsort``, stable: the chapter's ``sorted`` without the Python
    objects).  ``rel_error`` is the number of winners (ids) that differ from
    the exact answer: 0 means identical, ties included.
    """
    import numba

    if size not in SIZES:
        raise ValueError(f"size={size!r} is not one of {', '.join(map(repr, SIZES))}")
    n, chunk = SIZES[size]
    x = np.random.default_rng(0).random(n, dtype=np.float32)

    def sort_everything() -> np.ndarray:
        return np.argsort(-x, kind="stable")[:K]

    def streamed() -> pp.TopK:
        s = pp.TopK.empty(K, np.float32)
        for c in range(0, n, chunk):
            s.update(x[c : c + chunk])
        return s

    repeats = 3 if size != "large" else 1
    base = _median_ms(sort_everything, repeats)
    fast = _median_ms(streamed, 2 * repeats + 1)
    exact = sort_everything()
    got = streamed().result()[1]
    mismatches = int((got != exact).sum()) + abs(len(got) - len(exact))
    return dict(
        problem="Streaming top-K",
        bottleneck="O(n log n) sort of everything",
        key_property="associativity + redundancy",
        technique="threshold filter + mergeable TopK",
        baseline="sort everything (np.argsort)",
        baseline_ms=base,
        optimized_ms=fast,
        speedup=base / fast,
        rel_error=float(mismatches),
        device=f"cpu ({numba.get_num_threads()} threads)",
    )
