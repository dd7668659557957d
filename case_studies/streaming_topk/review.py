"""The capstone table's rows for Problem 2 (``propopt`` CLI, ``_capstone.PROBLEMS``)."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import propopt as pp
from propopt._capstone import gpu_rows, median_ms, review_row

#: (n, chunk) per size: float32 scores streamed in chunks, k = 1000.
SIZES = {"small": (10**6, 10**5), "default": (10**7, 10**6), "large": (10**8, 10**6)}
K = 1000


def review(size: str = "default") -> list[dict[str, Any]]:
    """Streaming TopK beside the chapter's sort-everything baseline.

    ``size``: 'small' (n = 10^6 in chunks of 10^5), 'default' (10^7 in
    chunks of 10^6) or 'large' (10^8 in chunks of 10^6); k = 1000 random
    float32 scores.  The baseline sorts everything with NumPy
    (``np.argsort``, stable: the chapter's ``sorted`` without the Python
    objects).  ``rel_error`` is the number of winners (ids) that differ from
    the exact answer: 0 means identical, ties included.  With a CUDA GPU a
    second row holds the scores on it: ``torch.argsort`` of everything
    against :func:`propopt.topk` (radix select).
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
    exact = sort_everything()

    def mismatches(got: Any) -> float:
        got = np.asarray(got)
        return float(int((got != exact[: len(got)]).sum()) + abs(len(got) - len(exact)))

    row = partial(review_row, "Streaming top-K", "O(n log n) sort of everything",
                  "associativity + redundancy")  # fmt: skip

    def on_gpu(device: str) -> list[dict[str, Any]]:
        import torch

        xg = torch.from_numpy(x).cuda()
        sync = torch.cuda.synchronize
        return [
            row(
                "radix select of the k-th key (numba.cuda), in memory",
                "sort everything (torch.argsort on the GPU)",
                median_ms(lambda: torch.argsort(-xg, stable=True)[:K], repeats, sync, warmup_s=0),
                median_ms(lambda: pp.topk(xg, K), 2 * repeats + 1, sync, warmup_s=0),
                mismatches(pp.topk(xg, K)[1].cpu().numpy()),
                device,
            )
        ]

    cpu = row(
        "threshold filter + mergeable TopK",
        "sort everything (np.argsort)",
        median_ms(sort_everything, repeats, warmup_s=0),
        median_ms(streamed, 2 * repeats + 1, warmup_s=0),
        mismatches(streamed().result()[1]),
        f"cpu ({numba.get_num_threads()} threads)",
    )
    return [cpu, *gpu_rows("Streaming top-K", on_gpu)]
