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


_ABS = np.int32(0x7FFFFFFF)
_SHIFT = np.int32(31)
_kernels: Any = None


def _compile() -> Any:
    from numba import njit, prange

    @njit(cache=True)
    def max_key(bits: Any) -> Any:
        # the max through order-preserving int32 keys: an integer max reduction
        # vectorizes (vpmaxsd); a float max with a select does not in numba
        # 0.68, which makes a float "floor" several times slower than memory
        m = np.int32(-(2**31))
        for i in range(bits.shape[0]):
            v = bits[i]
            m = max(m, np.int32(v ^ ((v >> _SHIFT) & _ABS)))
        return m

    @njit(parallel=True, cache=True)
    def parallel_max_bits(bits: Any, t: Any) -> Any:
        n = bits.shape[0]
        step = (n + t - 1) // t
        part = np.full(t, np.int32(-(2**31)))
        for p in prange(t):
            s = min(p * step, n)
            part[p] = max_key(bits[s : min(s + step, n)])
        return part.max()

    return parallel_max_bits


def read_pass(x: np.ndarray) -> np.float32:
    """``x.max()`` of float32 scores (no NaN) in one pass on all threads: one read of ``x``
    from memory, the floor of a filter that must look at every element (top-k)."""
    global _kernels
    if _kernels is None:
        _kernels = _compile()
    with pp.threads.sized() as t:
        m = np.int32(_kernels(np.ascontiguousarray(x, np.float32).view(np.int32), t))
    return np.array([m ^ ((m >> 31) & 0x7FFFFFFF)], np.int32).view(np.float32)[0]
