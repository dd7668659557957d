"""Check and time the CUDA scan kernels on a real GPU (run where one exists).

    NUMBA_ENABLE_CUDASIM=0 python benchmarks/cuda_scan_report.py

Correctness against the float64 fold on fresh random data (several sizes,
reverse and exclusive), then medians of CUDA-event timings at N = 2^24
float32 beside torch.cumsum and a device-to-device copy.
"""

import os
import sys

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import warnings

import numpy as np
import torch

import propopt as pp


def check() -> None:
    rng = np.random.default_rng(0)
    dev = torch.device("cuda")
    worst = 0.0
    for m in (pp.add, pp.linear_recurrence, pp.matmul2x2, pp.maximum, pp.logaddexp):
        for shape, axis in (((1,), 0), ((4097,), 0), ((1_000_003,), 0), ((3, 5001, 7), 1)):
            for reverse in (False, True):
                for exclusive in (False, True):
                    host = [rng.uniform(0.45, 0.55, shape) for _ in range(m.arity)]
                    kw = dict(axis=axis, reverse=reverse, exclusive=exclusive)
                    ref = pp.associative_scan(m, host, **kw)  # float64 CPU kernel
                    if shape[0] < 5000:
                        ref = pp.associative_scan(m, host, method="reference", **kw)
                    out = pp.associative_scan(m, [torch.from_numpy(h).to(dev) for h in host], **kw)
                    for o, r in zip(out, ref):
                        assert o.is_cuda and o.dtype == torch.float64
                        o = o.cpu().numpy()
                        fin = np.isfinite(r)
                        assert np.array_equal(np.isfinite(o), fin), (m.name, shape, kw)
                        # relative error; underflowing products (< 1e-250) compared absolutely
                        err = np.max(
                            np.abs(o[fin] - r[fin]) / np.maximum(np.abs(r[fin]), 1e-250),
                            initial=0.0,
                        )
                        worst = max(worst, float(err))
    print(f"correctness: worst relative error vs float64 reference {worst:.2e}")
    assert worst < 1e-9


def timed(fn, reps: int = 30) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return float(np.median(ts))


def bench() -> None:
    n = 1 << 24
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, device="cuda", generator=g)
    a = torch.rand(n, device="cuda", generator=g) * 0.1 + 0.9
    rows = {
        "copy (x.clone)": timed(lambda: x.clone()),
        "torch.cumsum": timed(lambda: torch.cumsum(x, 0)),
        "propopt add": timed(lambda: pp.associative_scan(pp.add, x)),
        "propopt linear_recurrence": timed(
            lambda: pp.associative_scan(pp.linear_recurrence, (a, x))
        ),
        "propopt generic linrec (torch ops)": timed(
            lambda: pp.associative_scan(lambda p, q: (p[0] * q[0], q[0] * p[1] + q[1]), (a, x)), 5
        ),
    }
    print(f"device: {torch.cuda.get_device_name()}  N = 2^24 float32, median ms")
    for k, v in rows.items():
        print(f"  {k:38s} {v:8.3f} ms  {n / v / 1e6:7.2f} G elem/s")


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    check()
    bench()
