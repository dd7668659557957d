"""Process-wide memory behaviour that the kernels depend on."""

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
    then 3.4 ms.  Allocating and freeing one untouched 16 MiB array does
    that once; where the threshold is already set it is harmless.
    """
    global _settled
    if not _settled:
        _settled = True
        np.empty(1 << 24, np.uint8)


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
