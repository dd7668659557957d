"""Results that parallel kernels write are mapped by the calling thread first (propopt._memory)."""

import ctypes
import ctypes.util
import mmap
import sys

import numpy as np
import pytest

import propopt as pp
from propopt import _memory


def _resident_pages(a: np.ndarray) -> tuple[int, int]:
    """(resident, total) pages of ``a``'s buffer, by the kernel's ``mincore``."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    page = mmap.PAGESIZE
    start = a.ctypes.data // page * page
    n = (a.ctypes.data + a.nbytes - start + page - 1) // page
    vec = (ctypes.c_ubyte * n)()
    rc = libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(n * page), vec)
    assert rc == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec), n


linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore is Linux's")


@linux
@pytest.mark.parametrize("shape", [(1 << 22,), (3, 1000, 700)])
def test_large_results_are_mapped_before_threads_write(shape):
    a = _memory.mapped_empty(shape, np.dtype(np.float32))
    assert a.shape == shape and a.dtype == np.float32 and a.flags.c_contiguous
    resident, total = _resident_pages(a)
    assert resident == total


@linux
def test_a_fresh_mapping_is_not_resident_until_written():
    # what the test above relies on: mincore sees an untouched anonymous mapping as absent
    m = mmap.mmap(-1, 1 << 22)
    a = np.frombuffer(m, np.uint8)
    assert _resident_pages(a)[0] == 0
    a[::4096] = 1
    assert _resident_pages(a) == (1024, 1024)
    del a
    m.close()


def test_small_results_are_plain_empty_arrays():
    a = _memory.mapped_empty((10,), np.dtype(np.int64))
    assert a.shape == (10,) and a.dtype == np.int64


def test_a_scan_into_prefaulted_results_matches_a_loop():
    n = _memory.PREFAULT_BYTES // 8  # float64 results of exactly the threshold
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 1, n)
    b = rng.normal(size=n)
    A, H = pp.associative_scan(pp.linear_recurrence, (a, b))
    h, p = 0.0, 1.0
    ref_h, ref_p = np.empty(n), np.empty(n)
    for i, (ai, bi) in enumerate(zip(a.tolist(), b.tolist())):
        h, p = ai * h + bi, p * ai
        ref_h[i], ref_p[i] = h, p
    np.testing.assert_allclose(H, ref_h, rtol=1e-12, atol=1e-13 * np.abs(ref_h).max())
    np.testing.assert_allclose(A, ref_p, rtol=1e-12, atol=np.finfo(np.float64).tiny)


@linux
def test_scan_results_are_mapped_first_only_below_a_fresh_mapping():
    """Below FRESH_MAP_BYTES a scan's result is faulted in by the calling thread; from there
    up it is a fresh mapping that the kernel's threads fault in as they write it."""
    below = _memory.scan_result_empty((_memory.FRESH_MAP_BYTES // 8,), np.dtype(np.float32))
    resident, total = _resident_pages(below)
    assert resident == total
    above = _memory.scan_result_empty((_memory.FRESH_MAP_BYTES // 4,), np.dtype(np.float32))
    assert above.nbytes == _memory.FRESH_MAP_BYTES
    resident, total = _resident_pages(above)
    assert resident < total // 2


def test_a_scan_into_a_fresh_mapping_matches_the_float64_sum():
    n = _memory.FRESH_MAP_BYTES // 4  # a float32 result of exactly the size
    x = np.random.default_rng(1).uniform(0, 1, n).astype(np.float32)
    want = np.cumsum(x.astype(np.float64))
    for threads in (1, 2):
        with pp.set_num_threads(threads):
            got = pp.associative_scan(pp.add, x)
        np.testing.assert_allclose(got, want, rtol=1e-4)


SETTLED = """
import resource, sys
import numpy as np
from propopt import _memory
if len(sys.argv) > 1:
    _memory.SETTLE_BYTES = int(sys.argv[1])
_memory.settle_allocator()
n = 1 << 22
keep = [np.ones(n, np.float32) for _ in range(3)]  # inputs that live on
for _ in range(3):
    np.copy(keep[0]), np.copy(keep[1]), np.copy(keep[2])
faults = []
for _ in range(4):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = _memory.mapped_empty((n,), np.dtype(np.float32))
    h = _memory.mapped_empty((n,), np.dtype(np.float32))
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    del a, h
print(max(faults[1:]))
"""


@linux
def test_two_16_mib_results_reuse_their_pages_after_the_allocator_settles():
    """glibc keeps the top of its heap below twice the mmap threshold that
    settle_allocator sets, so two 16 MiB results freed together are not given back
    and faulted in again on the next call (a fresh process: settling happens once)."""
    import subprocess

    run = subprocess.run([sys.executable, "-c", SETTLED], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert int(run.stdout) < 64, run.stdout
