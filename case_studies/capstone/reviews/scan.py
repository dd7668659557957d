"""Associativity: the prefix sum and the linear recurrence (Mamba's core)."""

from __future__ import annotations

import numpy as np

import propopt as pp

from ..measure import compare, median_seconds
from ..peers import sequential_recurrence
from ..progress import Progress
from ..rows import Row, row
from .common import cpu_device, gpu_rows, max_rel

LENGTH = {"small": 1 << 20, "default": 1 << 24, "large": 1 << 26}
"""float32 elements per size."""

ROUNDS = {"small": 9, "default": 7, "large": 5}
PLAN_S = {"small": 2.0, "default": 8.0, "large": 30.0}
TICKS = {size: 3 * r for size, r in ROUNDS.items()}

SUM = ("one dependency chain", "associativity", "3-phase parallel scan in cache-sized blocks")
REC = ("a loop over time", "associativity", "scan of affine maps (a, b)")
SUM_GPU = (*SUM[:2], "one pass, decoupled look-back (numba.cuda)")
#: propopt's own CUDA kernel: for a torch CUDA tensor, method='auto' hands a
#: plain cumsum to torch.cumsum, which would compare torch with itself
GPU_METHOD = "tiled"


def review(size: str, progress: Progress) -> list[Row]:
    """Prefix sum against ``np.cumsum`` and ``torch.cumsum``; the recurrence against a loop."""
    import torch

    n, rounds = LENGTH[size], ROUNDS[size]
    rng = np.random.default_rng(0)
    x = rng.normal(size=n).astype(np.float32)
    a = rng.uniform(0.9, 1.0, n).astype(np.float32)
    xt = torch.from_numpy(x)
    sum_exact = np.cumsum(x.astype(np.float64))
    rec_exact = sequential_recurrence(a.astype(np.float64), x.astype(np.float64))
    name = f"2^{n.bit_length() - 1} float32"
    dev = cpu_device()
    copy_x = 1e3 * median_seconds(lambda: np.copy(x))
    copy_ax = 1e3 * median_seconds(lambda: (np.copy(a), np.copy(x)))

    def scan_sum() -> np.ndarray:
        return pp.associative_scan(pp.add, x)

    def scan_rec() -> np.ndarray:
        return pp.associative_scan(pp.linear_recurrence, (a, x))[1]

    sum_err = max_rel(scan_sum(), sum_exact)
    rows = [
        row(f"prefix sum, {name}", size, *SUM, "np.cumsum (1 thread)",
            compare(lambda: np.cumsum(x), scan_sum, rounds=rounds, tick=progress.tick),
            sum_err, "max rel", dev, floor="copy", floor_ms=copy_x, flops=n, bytes=8 * n),
        row(f"prefix sum, {name}", size, *SUM, "torch.cumsum",
            compare(lambda: torch.cumsum(xt, 0), scan_sum, rounds=rounds, torch_baseline=True,
                    tick=progress.tick),
            sum_err, "max rel", dev, floor="copy", floor_ms=copy_x, flops=n, bytes=8 * n),
        row(f"linear recurrence, {name}", size, *REC, "sequential numba loop",
            compare(lambda: sequential_recurrence(a, x), scan_rec, rounds=rounds,
                    tick=progress.tick, baseline_compiles=True),
            max_rel(scan_rec(), rec_exact), "max rel", dev, floor="copy of a, b",
            floor_ms=copy_ax, flops=3 * n, bytes=16 * n),
    ]  # fmt: skip

    def on_gpu(device: str) -> list[Row]:
        xg = xt.cuda()
        sync = torch.cuda.synchronize
        c = compare(
            lambda: torch.cumsum(xg, 0),
            lambda: pp.associative_scan(pp.add, xg, method=GPU_METHOD),
            rounds=rounds,
            sync=sync,
        )
        err = max_rel(pp.associative_scan(pp.add, xg, method=GPU_METHOD).cpu().numpy(), sum_exact)
        return [
            row(f"prefix sum, {name}", size, *SUM_GPU, "torch.cumsum", c, err, "max rel", device)
        ]

    return rows + gpu_rows("scan", on_gpu)
