"""The CPU's flush-to-zero bit (``_cpu_ftz.py``): set only inside the kernels, never left set.

On x86-64 the kernels of a monoid whose every component flushes run with
MXCSR's flush-to-zero bit set and put the register back on exit.  A thread
that ran a kernel, the caller's or a worker of numba's pool, must compute
subnormals afterwards as before; and the code form of the flush, which the
other machines run, must keep the same contract (tests/associativity/test_flush.py).
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

import propopt as pp
from propopt.associativity import _cpu, _cpu_ftz, _cpu_source

from .test_flush import _affine64, assert_flushed, decays

F32_TINY = float(np.finfo(np.float32).tiny)

pytestmark = pytest.mark.skipif(not _cpu_ftz.HARDWARE, reason="the flush bit is x86-64's")


@numba.njit(parallel=True, cache=False)
def _tiny_products(n):  # pragma: no cover - numba
    # each of numba's threads multiplies two float32 values whose product is subnormal
    out = np.empty(n, np.float32)
    for i in numba.prange(n):
        out[i] = np.float32(1e-20) * np.float32(1e-19 + i * 1e-30)
    return out


def _subnormal_here() -> bool:
    x = np.array([1e-20], np.float32)
    return bool((x * np.float32(1e-19))[0] != 0)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_bit_is_put_back_in_every_thread(threads):
    assert _subnormal_here() and np.all(_tiny_products(64) != 0)  # the setting before
    a, b = decays(1 << 20, np.float32, lo=0.5)
    with pp.set_num_threads(threads):
        A, _ = pp.associative_scan(pp.linear_recurrence, (a, b))
        pp.associative_scan(pp.mul, a[:5000])  # a short scan: the calling thread only
        pp.associative_scan(pp.mul, a[:5000].reshape(50, 100), axis=0)  # the column kernels
    assert np.count_nonzero(A == 0) > 0  # the kernels did flush
    assert _subnormal_here(), "the calling thread was left flushing to zero"
    assert np.all(_tiny_products(64) != 0), "a thread of numba's pool was left flushing to zero"


def test_only_monoids_that_flush_every_component_use_the_bit():
    f32 = np.dtype(np.float32)
    assert _cpu_source.hardware_flush(2, f32, (0, 1))
    assert not _cpu_source.hardware_flush(2, f32, ())  # add-like: nothing to flush
    assert not _cpu_source.hardware_flush(3, f32, (1, 2))  # a segmented form's flag is left alone
    assert not _cpu_source.hardware_flush(1, np.dtype(np.complex64), (0,))  # products of parts
    assert not _cpu_source.hardware_flush(1, np.dtype(np.int32), (0,))


def _code_form(monkeypatch, dtype):
    monkeypatch.setattr(_cpu_ftz, "HARDWARE", False)
    _cpu_source._source.cache_clear()
    try:
        return _cpu.inspectable(pp.linear_recurrence, np.dtype(dtype))
    finally:
        _cpu_source._source.cache_clear()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_code_form_of_the_flush_keeps_the_contract(monkeypatch, dtype):
    mod = _code_form(monkeypatch, dtype)
    assert "ftz_enter" not in mod.__dict__  # the form the other machines run
    n = 50_000 if dtype is np.float32 else 20_000
    a, b = decays(n, dtype, lo=0.5 if dtype is np.float32 else 0.9)
    b[n // 2 :] = 0
    A, h = np.empty_like(a), np.empty_like(b)
    e0, e1 = (dtype(1), dtype(0))
    mod._block(a, b, A, h, 0, n, n, False, False, e0, e1, e0, e1, True)
    A64, h64 = _affine64(a.astype(np.float64), b.astype(np.float64))
    rtol = 2e-3 if dtype is np.float32 else 1e-9
    assert_flushed(A, A64, dtype, rtol, "A")
    assert_flushed(h, h64, dtype, rtol, "h")
    assert np.count_nonzero(A == 0) > n // 4  # the flush really ran


def test_the_bit_and_the_code_give_the_same_scan_away_from_the_boundary(monkeypatch):
    a, b = decays(30_000, np.float32, seed=5, lo=0.5)
    b[15_000:] = 0
    bit = pp.associative_scan(pp.linear_recurrence, (a, b))
    mod = _code_form(monkeypatch, np.float32)
    A, h = np.empty_like(a), np.empty_like(b)
    one, zero = np.float32(1), np.float32(0)
    mod._block(a, b, A, h, 0, a.size, a.size, False, False, one, zero, one, zero, True)
    for fast, code in zip(bit, (A, h)):
        far = (np.abs(code) >= 2 * F32_TINY) | (code == 0) & (np.abs(fast) < F32_TINY)
        np.testing.assert_array_equal(fast[far], code[far])
        assert np.all((fast == 0) | (np.abs(fast) >= F32_TINY))
