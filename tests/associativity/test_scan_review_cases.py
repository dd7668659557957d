"""Edge cases of the CPU scan's in-block forms and of its flush-to-zero bit.

A kernel that sets MXCSR's flush-to-zero bit (``_cpu_ftz.py``) must put it
back on every path, including a combine that raises: a thread left flushing
turns the user's later subnormal results into zeros.
"""

from __future__ import annotations

import contextlib

import numba
import numpy as np
import pytest

import propopt as pp
from propopt.associativity import _cpu_ftz


@numba.njit(parallel=True, cache=False)
def _tiny_products(n):  # pragma: no cover - numba
    out = np.empty(n, np.float32)
    for i in numba.prange(n):
        out[i] = np.float32(1e-20) * np.float32(1e-19 + i * 1e-30)
    return out


def _subnormal_here() -> bool:
    x = np.array([1e-20], np.float32)
    return bool((x * np.float32(1e-19))[0] != 0)


def _parallel(a, b):  # resistors in parallel: associative, 0/0 raises in numba
    return a * b / (a + b)


@pytest.mark.skipif(not _cpu_ftz.HARDWARE, reason="the flush bit is x86-64's")
@pytest.mark.parametrize(("n", "threads"), [(1000, 1), (1 << 21, 2)])
def test_a_raising_combine_leaves_no_thread_flushing(n, threads):
    m = pp.Monoid(_parallel, identity=(np.inf,), kinds="f", name="par", flush_subnormals=True)
    x = np.ones(n, np.float32)
    x[n - 10 : n - 8] = 0  # 0 * 0 / (0 + 0) in the last block
    assert _subnormal_here() and np.all(_tiny_products(64) != 0)
    with pp.set_num_threads(threads):
        if threads == 1:  # the calling thread: the combine's own exception
            with pytest.raises(ZeroDivisionError):
                pp.associative_scan(m, x)
        else:  # numba does not pass on an exception of a thread of its pool
            with contextlib.suppress(ZeroDivisionError, SystemError):
                pp.associative_scan(m, x)
    assert _subnormal_here(), "the calling thread was left flushing to zero"
    assert np.all(_tiny_products(64) != 0), "a thread of numba's pool was left flushing to zero"
