"""Process-wide memory behaviour that the kernels depend on."""

import math

import numpy as np

_settled = False


def settle_allocator() -> None:
    """Let glibc's malloc learn that large buffers are reused.

    glibc serves allocations above its mmap threshold (128 KiB at start) with
    fresh ``mmap`` pages, which are faulted in and zeroed on every use, until
    the program frees one large mapping; then the threshold rises to that
    size (at most 32 MiB) and buffers are recycled from the heap.  Measured
    in a fresh process on the development machine: the generic linear
    recurrence at N = 2^24 took 210 ms, then 87 ms; the CPU kernel at
    N = 2^22 (16 MiB outputs, faulted in by two threads at once) 30-66 ms,
    then 3.4 ms.  Allocating and freeing one untouched array does that once;
    where the threshold is already set it is harmless.

    The array is just under 32 MiB, the most the threshold learns, and glibc
    gives the top of its heap back to the system above twice the threshold:
    after a 16 MiB array, the two 16 MiB results of a float32 recurrence at
    2^22, freed together at the top of the heap, were given back and faulted
    in again on every call in some processes (1006 page faults a call, 11.1
    ms against 7.2-7.9 with the larger array, one thread, the 2-core AMD EPYC).
    """
    global _settled
    if not _settled:
        _settled = True
        np.empty(SETTLE_BYTES, np.uint8)


#: The array :func:`settle_allocator` frees: under glibc's largest mmap
#: threshold (32 MiB, ``DEFAULT_MMAP_THRESHOLD_MAX``) by its chunk header and a page.
SETTLE_BYTES = (32 << 20) - 8192


#: Results of at least this many bytes are faulted in by the calling thread
#: before a parallel kernel writes them (:func:`mapped_empty`): NumPy asks for huge
#: pages from 4 MiB up.
PREFAULT_BYTES = 1 << 22

#: Bytes between the writes that fault a fresh result in: a base page.
PAGE_BYTES = 4096


def mapped_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose pages are mapped before threads write it.

    A large result that NumPy has just allocated is often not yet mapped: a
    fresh ``mmap``, or heap pages the allocator gave back.  Its first writes
    fault the pages in, and when two threads fault pages of one process at
    once (as a parallel kernel's first writes do) each fault waits for the
    other.  Measured on the development machine (a 2-core VM, NumPy's huge
    pages): writing two fresh 16 MiB arrays took 38-53 ms on two threads
    against 4-7 ms on one, in a loop that keeps the previous results alive.
    Here the calling thread writes one byte of each 4 KiB page first (8,192
    strided byte stores for 32 MiB; 31 us when the pages are already mapped),
    so that the kernel's threads find them mapped.  The bytes written are
    overwritten by the kernel; the array's contents are undefined, as
    ``np.empty``'s are.  Where two threads would not have waited, the calling
    thread zeroes the pages alone (about 8% of a 2^22 recurrence in a loop
    that reassigns its results), and on a machine with several NUMA nodes the
    result lands on the calling thread's node (docs/performance.md).
    """
    a = np.empty(shape, dtype)
    if a.nbytes >= PREFAULT_BYTES:
        b = a.reshape(-1).view(np.uint8)
        b[::PAGE_BYTES] = 0
        b[-1] = 0  # the buffer need not start on a page: its last page too
    return a


#: glibc serves an allocation of at least this many bytes with a fresh ``mmap``
#: whatever its threshold has grown to (``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit).
FRESH_MAP_BYTES = 32 << 20


def scan_result_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """:func:`mapped_empty` below :data:`FRESH_MAP_BYTES`, ``np.empty`` from there up.

    A result that large is a fresh mapping on every call, which the calling
    thread would zero alone while the kernel's other threads wait; left to the
    threads that write it, each faults in its own part.  Measured on the
    2-core AMD EPYC (znver2) with two threads, shared with other work, in one
    process alternating the two, medians of 9 calls, 5 rounds: float32
    ``add`` at 2^23 took 9.8 ms faulted in first against 7.8 ms without, at
    2^24 18.4 against 15.5 ms (``np.copy`` 10.5 ms), the linear recurrence at
    2^24 43.8 against 41.9 ms; at 2^21 and 2^22 (results the allocator
    reuses) the two were within 0.1 ms.  Advising 4 KiB pages
    (``MADV_NOHUGEPAGE``) at 2^24 kept the order: 48.6 against 44.7 ms.
    """
    if np.dtype(dtype).itemsize * math.prod(shape) >= FRESH_MAP_BYTES:
        return np.empty(shape, dtype)
    return mapped_empty(shape, dtype)
