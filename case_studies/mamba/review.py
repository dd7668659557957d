"""The capstone table's row for Problem 1 (``propopt`` CLI, ``_capstone.PROBLEMS``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ._reference import naive
from ._workload import chapter_inputs
from .scan import chapter_scan

#: (L, d_model) per size; d_state 16, batch 1, float32.
SHAPES = {"small": (256, 512), "default": (2048, 2048), "large": (4096, 2048)}


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts))


def review(size: str = "default") -> dict[str, Any]:
    """The fused CPU scan beside the chapter's loop, error against float64.

    ``size``: 'small' (L 256, d_model 512), 'default' (2048, 2048) or
    'large' (4096, 2048); d_state 16, batch 1, float32, negative A.
    """
    import numba
    import torch

    if size not in SHAPES:
        raise ValueError(f"size={size!r} is not one of {', '.join(map(repr, SHAPES))}")
    L, d_model = SHAPES[size]
    args = chapter_inputs(L, d_model)
    repeats = 5 if size == "small" else 3
    base = _median_ms(lambda: naive(*args), repeats)
    fast = _median_ms(lambda: chapter_scan(*args), 2 * repeats + 1)
    exact = naive(*(a.to(torch.float64) for a in args)).numpy()
    got = chapter_scan(*args).numpy().astype(np.float64)
    err = float(np.abs(got - exact).max() / max(np.abs(exact).max(), 1e-300))
    return dict(
        problem="Mamba selective scan",
        bottleneck="sequential loop over tokens",
        key_property="associativity + locality",
        technique="fused scan, channels in SIMD lanes, polynomial exp",
        baseline="chapter's torch loop",
        baseline_ms=base,
        optimized_ms=fast,
        speedup=base / fast,
        rel_error=err,
        device=f"cpu ({numba.get_num_threads()} threads)",
    )
