"""Problem 2 of the chapter: the top-k of a stream, in O(k) memory."""

from __future__ import annotations

import numpy as np

import propopt as pp

from ..machine import read_pass
from ..measure import compare, median_seconds
from ..progress import Progress
from ..rows import Row, row
from .common import cpu_device, gpu_rows

SIZES = {"small": (10**6, 10**5), "default": (10**7, 10**6), "large": (10**8, 10**6)}
"""(n, chunk) per size: random float32 scores, streamed in chunks; k = 1000."""
K = 1000
ROUNDS = {"small": 9, "default": 7, "large": 5}
PLAN_S = {"small": 2.0, "default": 6.0, "large": 40.0}
TICKS = {size: 2 * r for size, r in ROUNDS.items()}

WHAT = ("sorting everything is O(n log n)", "associativity + redundancy")


def review(size: str, progress: Progress) -> list[Row]:
    """Streaming TopK against ``np.argpartition``; in-memory ``topk`` against ``torch.topk``."""
    import torch

    n, chunk = SIZES[size]
    rounds = ROUNDS[size]
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    xt = torch.from_numpy(x)
    exact = np.argsort(-x, kind="stable")[:K]
    dev = cpu_device()
    floor = dict(floor="read pass", floor_ms=1e3 * median_seconds(lambda: read_pass(x)))
    problem = f"top-{K}, {n:.0e} float32".replace("e+0", "e")

    def argpartition() -> np.ndarray:
        part = np.argpartition(-x, K - 1)[:K]
        return part[np.lexsort((part, -x[part]))]  # best first, ties by index

    def streamed() -> pp.TopK:
        s = pp.TopK.empty(K, np.float32)
        for c in range(0, n, chunk):
            s.update(x[c : c + chunk])
        return s

    def mismatches(ids: np.ndarray) -> int:
        return int((np.asarray(ids) != exact[: len(ids)]).sum()) + abs(len(ids) - K)

    rows = [
        row(f"streaming {problem} in chunks of {chunk:.0e}".replace("e+0", "e"), size, *WHAT,
            "threshold filter + mergeable TopK summary", "np.argpartition (1 thread)",
            compare(argpartition, streamed, rounds=rounds, tick=progress.tick),
            mismatches(streamed().result()[1]), "ids", dev, **floor),
        row(problem, size, *WHAT, "threshold filter on all threads, merged summaries",
            "torch.topk", compare(lambda: torch.topk(xt, K), lambda: pp.topk(x, K),
                                  rounds=rounds, torch_baseline=True, tick=progress.tick),
            mismatches(pp.topk(x, K)[1]), "ids", dev, **floor),
    ]  # fmt: skip

    def on_gpu(device: str) -> list[Row]:
        xg = xt.cuda()
        c = compare(
            lambda: torch.topk(xg, K),
            lambda: pp.topk(xg, K),
            rounds=rounds,
            sync=torch.cuda.synchronize,
        )
        return [
            row(
                problem,
                size,
                *WHAT,
                "radix select of the k-th key (numba.cuda)",
                "torch.topk on the GPU",
                c,
                mismatches(pp.topk(xg, K)[1].cpu().numpy()),
                "ids",
                device,
            )
        ]

    return rows + gpu_rows("top-K", on_gpu)
