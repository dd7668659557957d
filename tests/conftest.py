"""Test configuration shared by the whole suite.

* CUDA kernels run in numba's simulator unless ``NUMBA_ENABLE_CUDASIM`` is
  already set (set it to 0 on a machine with a GPU to test the real thing).
  It must be set before numba.cuda is first imported, hence here.
* The simulator's ``cuda.shared.array`` looks up a per-launch dict and then
  stores a new array if none was found, without a lock, while every thread
  of the block runs it: a thread that looks up between another thread's
  lookup and store gets an array of its own, and its writes never reach the
  others (seen as a carry off by one element, about once in eight full
  runs).  Real GPUs allocate shared memory per block in hardware, so the
  kernels are not at fault; ``serialize_shared_arrays`` makes the lookup and
  store one step (tested in tests/test_cuda_simulator.py).
* hypothesis runs deterministically and without deadlines: JIT compilation
  makes the first example of a test slow.
* After each ``slow`` test the worker collects cyclic garbage and hands
  freed heap memory back to the system (``malloc_trim``): those tests build
  full-size models (hundreds of MiB to GiB each), and a worker that ran many
  of them grew to 15-19 GB and was killed on a 24 GiB machine.
* Under pytest-xdist each worker's torch gets its share of the cores
  (``torch.set_num_threads``), restored after the test.  torch's default is
  every core in every worker, and its threads spin between the thousands of
  small ops of transformers' reference paths: two workers on 2 cores made a
  full-size float64 Mamba training step 7-9x slower than alone (10.7 s
  against 74-94 s; 18 s with one thread each), and one such step ran past
  the 600 s timeout in CI.
"""

import ctypes
import gc
import os
import sys

import numpy as np
import pytest
from hypothesis import settings

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")


def serialize_shared_arrays() -> None:
    """Make the simulator's ``cuda.shared.array`` one array per launch and call site.

    The same lookup as the simulator's (static arrays keyed by the caller's
    file and line), with the lookup and the store made one step by
    ``dict.setdefault``; dynamic (size 0) arrays go to the simulator as before.
    """
    from numba.core import types
    from numba.np import numpy_support

    try:
        from numba.cuda.simulator import kernelapi
    except ImportError:  # no numba-cuda (a core-only install): the CUDA tests skip
        return

    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "serialized", False):
        return
    simulator_array = shared.array

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:
            return simulator_array(self, shape, dtype, alignment)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        found = self._allocations.get(key)
        if found is None:
            found = self._allocations.setdefault(key, np.empty(shape, dtype))
        return found

    array.serialized = True
    shared.array = array


if os.environ["NUMBA_ENABLE_CUDASIM"] == "1":
    serialize_shared_arrays()

settings.register_profile("propopt", deadline=None, derandomize=True, max_examples=40)
settings.load_profile("propopt")


def _malloc_trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _xdist_share() -> int | None:
    """Cores per pytest-xdist worker, or None when not running under xdist."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return None
    return max(1, (os.cpu_count() or 1) // workers)


@pytest.fixture(autouse=True)
def _torch_threads_per_worker():  # type: ignore[no-untyped-def]
    share, torch = _xdist_share(), sys.modules.get("torch")
    if share is None or torch is None or torch.get_num_threads() <= share:
        yield
        return
    from propopt.threads import torch_threads

    with torch_threads(share):
        yield


@pytest.fixture(autouse=True)
def _release_memory_after_slow_tests(request):  # type: ignore[no-untyped-def]
    yield
    if request.node.get_closest_marker("slow") is not None:
        gc.collect()
        _malloc_trim()
