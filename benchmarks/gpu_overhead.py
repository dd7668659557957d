"""Where the host time of small CUDA calls goes, run on a GPU.

    NUMBA_ENABLE_CUDASIM=0 python -m benchmarks.gpu_overhead

First the pieces of a launch timed alone (microseconds per call, host
wall clock, nothing waits for the device), then cProfile of whole calls.
"""

import cProfile
import pstats
import time
from collections.abc import Callable
from typing import Any

import torch

import propopt as pp


def per_call_us(fn: Callable[[], Any], reps: int = 2000) -> float:
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / reps * 1e6


def pieces() -> None:
    from numba import cuda

    x = torch.randn(1 << 16, device="cuda")
    ptr = torch.cuda.current_stream().cuda_stream
    dx = cuda.as_cuda_array(x, sync=False)
    stream = cuda.external_stream(ptr)

    @cuda.jit
    def one(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] += 1

    @cuda.jit
    def five(a, b, c, d, e, n, m):
        i = cuda.grid(1)
        if i < n:
            a[i] += b[i] + c[i] + d[i] + e[i] + m

    one[1, 32, stream](dx)
    five[1, 32, stream](dx, dx, dx, dx, dx, 4, 1.0)
    compiled = next(iter(one.overloads.values()))
    rows = {
        "torch.cumsum (for scale)": lambda: torch.cumsum(x, 0),
        "torch.empty_like": lambda: torch.empty_like(x),
        "torch.zeros(4097, int32)": lambda: torch.zeros(4097, dtype=torch.int32, device="cuda"),
        "cuda.as_cuda_array(t, sync=False)": lambda: cuda.as_cuda_array(x, sync=False),
        "cuda.as_cuda_array(t) (syncs the stream)": lambda: cuda.as_cuda_array(x),
        "cuda.external_stream(ptr)": lambda: cuda.external_stream(ptr),
        "torch.cuda.current_stream()": lambda: torch.cuda.current_stream(x.device),
        "launch, 1 array argument": lambda: one[1, 32, stream](dx),
        "launch, 5 arrays + 2 scalars": lambda: five[1, 32, stream](dx, dx, dx, dx, dx, 4, 1.0),
        "compiled kernel .launch(), 1 array": lambda: compiled.launch((dx,), (1,), (32,), stream),
        "pp.associative_scan(add), method='tiled'": lambda: pp.associative_scan(
            pp.add, x, method="tiled"
        ),
        "pp.associative_scan(add), method='native'": lambda: pp.associative_scan(
            pp.add, x, method="native"
        ),
        "pp.topk(x, 1000)": lambda: pp.topk(x, 1000),
    }
    print("host microseconds per call (n = 2^16):")
    for name, fn in rows.items():
        print(f"  {name:44s} {per_call_us(fn, 300 if 'sync' in name else 2000):8.1f} us")


def main() -> None:
    import sys

    if "--calls-only" not in sys.argv:
        pieces()
    x = torch.randn(1 << 16, device="cuda")
    calls = {
        "scan add, method='tiled', n = 2^16": lambda: pp.associative_scan(
            pp.add, x, method="tiled"
        ),
        "topk k = 1000, n = 2^16": lambda: pp.topk(x, 1000),
    }
    for name, fn in calls.items():
        fn()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        prof.disable()
        print(f"== {name}: 200 calls")
        pstats.Stats(prof).sort_stats("tottime").print_stats(16)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
