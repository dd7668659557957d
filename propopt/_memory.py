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
