"""The machine a figure was measured on, and the physical floors it is compared with.

Machines of one kind differ by up to 4x on the same kernel, so every figure
is recorded with the CPU model and two roofs measured in the same run: the
float32 matrix product (numpy's BLAS) and the copy bandwidth.  The floors a
row is compared with (a copy of its input, one read pass, the exps of the
Mamba recurrence) are timed beside it.
"""

from __future__ import annotations

import platform
import subprocess
import time
from typing import Any

import numba
import numpy as np

import propopt as pp


def cpu_model() -> str:
    """``lscpu``'s model name (the processor string elsewhere)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def _best(fn: Any, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def sgemm_gflops(n: int = 2048, repeats: int = 3) -> float:
    """float32 ``n^3`` matrix product through numpy's BLAS, best of ``repeats``."""
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    return 2.0 * n**3 / _best(lambda: a @ b, repeats) / 1e9


def copy_gbs(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """``np.copy`` of ``nbytes``, counting the read and the write, best of ``repeats``."""
    x = np.ones(nbytes // 4, np.float32)
    return 2.0 * nbytes / _best(lambda: np.copy(x), repeats) / 1e9


def record() -> dict[str, Any]:
    """What a set of figures is quoted with: CPU, cores, roofs, versions."""
    return {
        "cpu": cpu_model(),
        "cores": pp.threads.usable_cpus(),
        "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "sgemm_gflops": round(sgemm_gflops(), 1),
        "copy_gbs": round(copy_gbs(), 1),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "propopt": pp.__version__,
    }


_max: Any = None


def read_pass(x: np.ndarray) -> float:
    """The largest value of ``x`` on all threads: one read of it from memory, the floor of a
    filter that must look at every element (top-k)."""
    global _max
    if _max is None:
        from numba import njit, prange

        @njit(parallel=True, cache=True)
        def pmax(x: Any) -> Any:
            n = x.shape[0]
            T = 64
            best = np.full(T, -np.inf)
            for t in prange(T):
                lo = t * n // T
                hi = (t + 1) * n // T
                m = -np.inf
                for i in range(lo, hi):
                    m = max(m, x[i])
                best[t] = m
            return best.max()

        _max = pmax
    with pp.threads.sized():
        return float(_max(x))
