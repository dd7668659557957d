"""Where the host time of small CUDA calls goes (cProfile), run on a GPU.

NUMBA_ENABLE_CUDASIM=0 python -m benchmarks.gpu_overhead
"""

import cProfile
import pstats

import torch

import propopt as pp


def main() -> None:
    x = torch.randn(1 << 16, device="cuda")
    calls = {
        "scan add, n = 2^16": lambda: pp.associative_scan(pp.add, x),
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
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
