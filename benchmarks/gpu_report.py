"""Time every CUDA kernel against the torch CUDA op a user would pick (run on a GPU).

    NUMBA_ENABLE_CUDASIM=0 python -m benchmarks.gpu_report [--quick]

Each row is the median of CUDA-event timings (after warm-up launches that
also compile), with its peer and its floor timed in the same process on the
same device.  Floors: a device-to-device copy of the bytes the kernel must
read and write, and for the pair sums the device's FMA rate, measured here
with a float32 / float64 FMA chain.  ``--quick`` runs small sizes (to check
the script).  docs/gpu.md records the runs.
"""

from __future__ import annotations

import argparse
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")

import numpy as np
import torch

import propopt as pp


def timed(fn: Callable[[], Any], reps: int = 20, warm: int = 2) -> float:
    """Median milliseconds of ``fn`` by CUDA events."""
    for _ in range(warm):
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


def first_call(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def row(name: str, ms: float, ref: float | None = None, what: str = "") -> None:
    ratio = f"{ms / ref:6.2f}x" if ref else "       "
    print(f"  {name:44s} {ms:9.3f} ms {ratio}  {what}", flush=True)


def copy_ms(nbytes: int) -> float:
    """A device-to-device copy moving ``nbytes`` in all (read + write counted)."""
    x = torch.empty(max(nbytes // 2, 1), dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    return timed(lambda: y.copy_(x))


def _fma_chain(typ: Any) -> Any:
    from numba import cuda

    @cuda.jit
    def chain(x, reps):
        i = cuda.grid(1)
        a = typ(x[i])
        b = a + typ(1)
        c = a + typ(2)
        d = a + typ(3)
        m = typ(0.9999999)
        p = typ(1e-7)
        for _ in range(reps):  # four independent FMA chains per thread
            a = cuda.fma(a, m, p)
            b = cuda.fma(b, m, p)
            c = cuda.fma(c, m, p)
            d = cuda.fma(d, m, p)
        x[i] = a + b + c + d

    return chain


def fma_peak() -> dict[str, float]:
    """FMA flop/s of register-resident chains, float32 and float64 (numba.cuda)."""
    from numba import cuda, float32, float64

    out = {}
    n, reps = 132 * 2048 * 4, 4096
    for name, typ, dt in (("float32", float32, np.float32), ("float64", float64, np.float64)):
        chain = _fma_chain(typ)
        x = cuda.to_device(np.ones(n, dt))
        t = timed(lambda c=chain, x=x: c[n // 256, 256](x, reps), reps=5, warm=1)
        out[name] = 2 * 4 * reps * n / (t * 1e-3)
    return out


def device_ms(fn: Callable[[], Any], reps: int = 10) -> str:
    """GPU time per call by kernel (torch.profiler, CUPTI), with the host time left out."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    parts = []
    total = 0.0
    for evt in prof.key_averages():
        us = float(getattr(evt, "device_time_total", 0.0) or getattr(evt, "cuda_time_total", 0.0))
        if us > 0:
            total += us
            parts.append(f"{evt.key[:28]} {us / reps / 1e3:.3f}")
    return f"{total / reps / 1e3:.3f} ms on the GPU: " + "; ".join(parts[:5])


def scans(n: int) -> None:

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, device="cuda", generator=g)
    a = torch.rand(n, device="cuda", generator=g) * 0.1 + 0.9
    print(f"scans, n = {n} float32")
    first = first_call(lambda: pp.associative_scan(pp.add, x, method="tiled"))
    print(f"  first call (compile) add: {first:.1f} s")
    cum = timed(lambda: torch.cumsum(x, 0))
    row("copy floor (read n + write n)", copy_ms(8 * n))
    row("torch.cumsum", cum)
    add = timed(lambda: pp.associative_scan(pp.add, x, method="tiled"))
    row("propopt add, method='tiled'", add, cum, "vs torch.cumsum")
    row("propopt add, method='auto'", timed(lambda: pp.associative_scan(pp.add, x)), cum)
    for name, fn in (
        ("torch.cumsum", lambda: torch.cumsum(x, 0)),
        ("add, method='tiled'", lambda: pp.associative_scan(pp.add, x, method="tiled")),
        ("linear_recurrence", lambda: pp.associative_scan(pp.linear_recurrence, (a, x))),
    ):
        try:
            print(f"  {name}: {device_ms(fn)}")
        except Exception as err:  # the profiler is a diagnosis, not a result
            print(f"  {name}: profiler failed ({err})")
    lr = timed(lambda: pp.associative_scan(pp.linear_recurrence, (a, x)))
    row("propopt linear_recurrence (a, b)", lr, add, "vs propopt add")
    row("copy floor for it (read 2n + write 2n)", copy_ms(16 * n))
    row("propopt maximum", timed(lambda: pp.associative_scan(pp.maximum, x)), cum)
    row("torch.cummax", timed(lambda: torch.cummax(x, 0)), cum)
    xd = x.double()
    row("propopt add float64", timed(lambda: pp.associative_scan(pp.add, xd, method="tiled")),
        timed(lambda: torch.cumsum(xd, 0)), "vs torch.cumsum float64")  # fmt: skip
    print("  crossover with torch's own scans (method='tiled' / torch's op; < 1: propopt faster):")
    peers = (
        (pp.add, "cumsum", x),
        (pp.mul, "cumprod", 1 + x * 1e-7),
        (pp.logaddexp, "logcumsumexp", x),
    )
    for m, op, data in peers:
        for p in range(10, 27, 2):
            xs = data[: 1 << p]
            if xs.numel() < 1 << p:
                break
            ours = timed(lambda xs=xs, m=m: pp.associative_scan(m, xs, method="tiled"))
            theirs = timed(lambda xs=xs, op=op: getattr(torch, op)(xs, 0))
            row(f"{m.name} n = 2^{p}: propopt / torch.{op}", ours, theirs)
    print("  host time per call, n = 2^16 (wall clock of 200 queued calls, then one sync):")
    xs = x[: 1 << 16]
    for name, fn in (
        ("torch.cumsum", lambda: torch.cumsum(xs, 0)),
        ("propopt add, method='tiled'", lambda: pp.associative_scan(pp.add, xs, method="tiled")),
        ("propopt add, method='auto'", lambda: pp.associative_scan(pp.add, xs)),
    ):
        fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        row(name, (time.perf_counter() - t) / 200 * 1e3)


def topk(n: int, k: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, device="cuda", generator=g)
    print(f"top-k, k = {k} of n = {n} float32 (one row)")
    print(f"  first call (compile): {first_call(lambda: pp.topk(x, k)):.1f} s")
    t = timed(lambda: torch.topk(x, k))
    row("torch.amax (one read)", timed(lambda: torch.amax(x)))
    row("torch.topk", t)
    row("propopt topk", timed(lambda: pp.topk(x, k)), t, "vs torch.topk")
    row("propopt topk sorted=False", timed(lambda: pp.topk(x, k, sorted=False)), t)
    print("  by size, k = 1000 (fixed cost and per-element cost):")
    for p in range(16, 28, 3):
        xs = x[: 1 << p]
        row(f"n = 2^{p}: propopt / torch.topk", timed(lambda xs=xs: pp.topk(xs, k)),
            timed(lambda xs=xs: torch.topk(xs, k)))  # fmt: skip
    xs = x.reshape(4096, -1)
    t = timed(lambda: torch.topk(xs, 16))
    print(f"  4096 rows of {xs.shape[1]}, k = 16")
    row("torch.topk", t)
    row("propopt topk", timed(lambda: pp.topk(xs, 16)), t, "vs torch.topk")


def mamba(L: int, d: int, n: int = 16) -> None:
    from propopt_case_studies.capstone.workloads import chapter_inputs
    from propopt_case_studies.mamba import selective_scan

    x, A, B, C, delta = (v.cuda() for v in chapter_inputs(L, d, n))

    def loop() -> Any:  # the chapter's mamba_scan_naive on CUDA tensors, with Mamba's dt B u
        h = torch.zeros(1, d, n, device="cuda")
        ys = []
        for t in range(L):
            dt = delta[:, t, :, None]
            h = torch.exp(dt * A) * h + dt * B[:, t, None, :] * x[:, t, :, None]
            ys.append((C[:, t, None, :] * h).sum(dim=-1))
        return torch.stack(ys, dim=1)

    u, dl = x.transpose(1, 2).contiguous(), delta.transpose(1, 2).contiguous()
    Bc, Cc = B.transpose(1, 2).contiguous(), C.transpose(1, 2).contiguous()

    def ours() -> Any:
        return selective_scan(u, dl, A, Bc, Cc)

    print(f"Mamba forward, B 1, L {L}, d_model {d}, d_state {n}, float32 (mamba_ssm layout)")
    print(f"  first call (compile): {first_call(ours):.1f} s")
    ref = loop().transpose(1, 2)
    got = ours()
    err = float((got - ref).abs().max() / ref.abs().max())
    t_loop = timed(loop, reps=3, warm=1)
    t = timed(ours)
    row("chapter loop (mamba_scan_naive) on CUDA", t_loop)
    row("propopt selective_scan", t, None, f"{t_loop / t:.1f}x faster than the loop; "
        f"max error {err:.1e} of max|y|")  # fmt: skip
    nbytes = 4 * (3 * L * d + 2 * L * n + d * n)
    row("copy floor (read u, delta, B, C; write y)", copy_ms(nbytes))
    uu, dd, AA, BB, CC = (v.detach().clone().requires_grad_() for v in (u, dl, A, Bc, Cc))

    def fwd_bwd() -> None:
        selective_scan(uu, dd, AA, BB, CC).sum().backward()

    ours_fb = timed(fwd_bwd, reps=5, warm=1)
    row("propopt forward + backward (autograd)", ours_fb, t)
    _mamba_peers_fwd_bwd(x, A, B, C, delta, ours_fb)


def _mamba_peers_fwd_bwd(x: Any, A: Any, B: Any, C: Any, delta: Any, ours: float) -> None:
    """mambapy's pscan and mamba_ssm's selective_scan_ref, forward + backward on CUDA."""
    from propopt_case_studies.capstone.peers import selective_scan_ref
    from propopt_case_studies.capstone.workloads import mambapy_selective_scan

    ins = [v.detach().clone().requires_grad_() for v in (x, delta, A, B, C)]

    def mambapy() -> None:
        xx, dd, AA, BB, CC = ins
        mambapy_selective_scan(xx, dd, AA, BB, CC).sum().backward()

    cf = [v.detach().transpose(1, 2).contiguous().requires_grad_() for v in (x, delta, B, C)]
    A2 = A.detach().clone().requires_grad_()

    def ref() -> None:
        selective_scan_ref(cf[0], cf[1], A2, cf[2], cf[3]).sum().backward()

    for name, fn, reps in (("mambapy pscan", mambapy, 5), ("selective_scan_ref", ref, 2)):
        try:
            t = timed(fn, reps=reps, warm=1)
        except ImportError as err:
            print(f"  {name}: not installed ({err})")
            continue
        row(f"{name} forward + backward on CUDA", t, None, f"propopt {t / ours:.1f}x faster")


def gravity(n: int) -> None:
    peaks = fma_peak()
    print(
        f"direct_gravity, N = {n} (halved pairs); FMA chain: float32 "
        f"{peaks['float32'] / 1e12:.1f} TFLOP/s, float64 {peaks['float64'] / 1e12:.1f} TFLOP/s"
    )
    for dt in (np.float32, np.float64):
        _gravity_one(n, dt, peaks)


def _gravity_one(n: int, dt: Any, peaks: dict[str, float]) -> None:
    rng = np.random.default_rng(2)
    pos, m = rng.normal(size=(n, 3)).astype(dt), rng.uniform(0.5, 2, n).astype(dt)
    gp, gm = torch.from_numpy(pos).cuda(), torch.from_numpy(m).cuda()
    name = np.dtype(dt).name

    def ours() -> Any:
        return pp.direct_gravity(gp, gm, eps=0.01)

    def torch_tiles() -> None:  # the obvious torch peer: all pairs, 1024 targets at a time
        acc = torch.zeros_like(gp)
        for s in range(0, n, 1024):
            d = gp[None, :, :] - gp[s : s + 1024, None, :]
            r2 = (d * d).sum(-1) + 1e-4
            w = gm[None, :] * r2.rsqrt() ** 3
            acc[s : s + 1024] = (w[..., None] * d).sum(1)

    print(f"  first call {name} (compile): {first_call(ours):.1f} s")
    t = timed(ours, reps=5, warm=1)
    rate = 20 * n * (n - 1) / (t * 1e-3)  # 20 flops per (target, source) interaction
    row(f"propopt direct_gravity {name}", t, None,
        f"{rate / 1e12:.2f} TFLOP/s at 20 flops/interaction: {rate / peaks['float32']:.0%} "
        f"of float32 FMA, {rate / peaks['float64']:.0%} of float64")  # fmt: skip
    # the full kernel (every ordered pair) runs for separate targets: here the bodies themselves
    full = timed(lambda: pp.direct_gravity(gp, gm, eps=0.01, targets=gp), reps=5, warm=1)
    rate = 20 * n * n / (full * 1e-3)
    row(f"propopt direct_gravity {name}, all ordered pairs", full, t,
        f"{rate / 1e12:.2f} TFLOP/s ({rate / peaks['float32']:.0%} of float32 FMA)")  # fmt: skip
    row(f"torch all-pairs tiles {name}", timed(torch_tiles, reps=3, warm=1), t)


def barnes_hut(n: int) -> None:
    from propopt_case_studies.nbody import Octree, plummer_sphere

    pos, _, m = plummer_sphere(n, seed=3)
    t0 = time.perf_counter()
    tree = Octree.build(pos, m, eps=1e-3)
    build = time.perf_counter() - t0
    print(f"Barnes-Hut, Plummer N = {n}, theta 0.72, quadrupole; build {build * 1e3:.0f} ms (CPU)")
    print(f"  first call (compile): "
          f"{first_call(lambda: tree.field(theta=0.72, device='cuda')):.1f} s")  # fmt: skip
    tree.field(theta=0.72)

    def wall(fn: Callable[[], Any], reps: int = 3) -> float:
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return 1e3 * float(np.median(ts))

    cpu = wall(lambda: tree.field(theta=0.72))
    gpu = wall(lambda: tree.field(theta=0.72, device="cuda"))
    row(f"CPU walk, {pp.get_num_threads()} threads (groups of targets)", cpu)
    row("CUDA walk (one thread per target, with transfers)", gpu, cpu, "vs the CPU walk")
    idx = np.random.default_rng(4).choice(n, 2000, replace=False)
    a, _ = tree.field(theta=0.72, device="cuda")
    ex, _ = pp.direct_gravity(pos, m, eps=1e-3, targets=pos[idx], device="cuda")
    e = np.linalg.norm(a[idx] - ex, axis=1) / np.linalg.norm(ex, axis=1)
    print(f"  CUDA walk error vs exact (2000 bodies): median {np.median(e):.1e}, "
          f"p99 {np.quantile(e, 0.99):.1e}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, to check the script")
    ap.add_argument("--only", default="", help="comma-separated sections")
    args = ap.parse_args()
    q = args.quick
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"propopt {pp.__version__}")  # fmt: skip
    sections = {
        "scans": lambda: scans(1 << (16 if q else 26)),
        "topk": lambda: topk(1 << (16 if q else 27), 1000),
        "mamba": lambda: mamba(*((64, 128) if q else (2048, 2048))),
        "gravity": lambda: gravity(2000 if q else 100_000),
        "barnes_hut": lambda: barnes_hut(20_000 if q else 1_000_000),
    }
    only = [s for s in args.only.split(",") if s] or list(sections)
    for name in only:
        try:
            sections[name]()
        except Exception:  # one section's failure is reported; the others still run
            print(f"{name}: FAILED")
            traceback.print_exc()


if __name__ == "__main__":
    main()
