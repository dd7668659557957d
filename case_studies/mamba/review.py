"""The capstone table's rows for Problem 1 (``propopt`` CLI, ``_capstone.PROBLEMS``)."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from propopt._capstone import gpu_rows, median_ms, review_row

from ._reference import naive
from ._workload import chapter_inputs
from .scan import chapter_scan

#: (L, d_model) per size; d_state 16, batch 1, float32.
SHAPES = {"small": (256, 512), "default": (2048, 2048), "large": (4096, 2048)}


def _rel_error(got: Any, exact: np.ndarray) -> float:
    diff = np.abs(got.cpu().numpy().astype(np.float64) - exact)
    return float(diff.max() / max(np.abs(exact).max(), 1e-300))


def review(size: str = "default") -> list[dict[str, Any]]:
    """The fused scan beside the chapter's loop, error against float64.

    ``size``: 'small' (L 256, d_model 512), 'default' (2048, 2048) or
    'large' (4096, 2048); d_state 16, batch 1, float32, negative A.  With a
    CUDA GPU a second row runs both on it: the chapter's loop on CUDA
    tensors against the numba.cuda kernel.
    """
    import numba
    import torch

    if size not in SHAPES:
        raise ValueError(f"size={size!r} is not one of {', '.join(map(repr, SHAPES))}")
    L, d_model = SHAPES[size]
    args = chapter_inputs(L, d_model)
    repeats = 5 if size == "small" else 3
    exact = naive(*(a.to(torch.float64) for a in args)).numpy()

    row = partial(review_row, "Mamba selective scan", "sequential loop over tokens",
                  "associativity + locality")  # fmt: skip

    def on_gpu(device: str) -> list[dict[str, Any]]:
        dev = [a.cuda() for a in args]
        sync = torch.cuda.synchronize
        return [
            row(
                "fused scan, a thread per channel (numba.cuda)",
                "chapter's torch loop on the GPU",
                median_ms(lambda: naive(*dev), repeats, sync, warmup_s=0),
                median_ms(lambda: chapter_scan(*dev), 2 * repeats + 1, sync, warmup_s=0),
                _rel_error(chapter_scan(*dev), exact),
                device,
            )
        ]

    cpu = row(
        "fused scan, channels in SIMD lanes, polynomial exp",
        "chapter's torch loop",
        median_ms(lambda: naive(*args), repeats, warmup_s=0),
        median_ms(lambda: chapter_scan(*args), 2 * repeats + 1, warmup_s=0),
        _rel_error(chapter_scan(*args), exact),
        f"cpu ({numba.get_num_threads()} threads)",
    )
    return [cpu, *gpu_rows("Mamba selective scan", on_gpu)]
