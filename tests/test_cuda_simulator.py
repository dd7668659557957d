"""The simulator fix in tests/conftest.py: one shared array per block and call site.

The simulator runs a block's threads as Python threads that all allocate
each ``cuda.shared.array``.  Slowing ``np.empty`` down widens the window
between one thread's lookup and its store; without the fix every thread
that looks up in that window writes to an array of its own.
"""

import time

import numpy as np
import pytest

cuda = pytest.importorskip("numba.cuda")


@cuda.jit
def _rotate(out):
    sh = cuda.shared.array(8, np.float64)
    tid = cuda.threadIdx.x
    sh[tid] = tid + 10 * cuda.blockIdx.x
    cuda.syncthreads()
    out[cuda.blockIdx.x, tid] = sh[(tid + 1) % 8]


def test_every_thread_of_a_block_sees_one_shared_array(monkeypatch):
    empty = np.empty

    def slow_empty(*args, **kwargs):
        time.sleep(0.002)
        return empty(*args, **kwargs)

    monkeypatch.setattr(np, "empty", slow_empty)
    out = cuda.device_array((3, 8), np.float64)
    _rotate[3, 8](out)
    monkeypatch.undo()
    expected = (np.arange(1, 9) % 8)[None, :] + 10.0 * np.arange(3)[:, None]
    np.testing.assert_array_equal(out.copy_to_host(), expected)
