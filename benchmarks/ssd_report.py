"""One-run report of the Mamba-2 SSD figures (docs/mamba.md): ``python -m benchmarks.ssd_report``.

Everything is measured in one process, the sides of each ratio alternating
call by call: the minimal SSD at 1 and 2 torch threads, ``ssd_scan`` at
several chunk sizes, NumPy's sgemm roof, the GEMM phase, packed against
batched sequences, and forward + backward under autograd.
"""

from __future__ import annotations

import argparse
import platform
import subprocess

import numpy as np

from propopt_case_studies.mamba import ssd_scan
from propopt_case_studies.mamba.ssd import GEMM_BACKEND, phase_times

from . import bench_ssd as bs
from .ssd_minimal import ssd_minimal_discrete


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor()
    for line in out.splitlines():
        if line.startswith("Model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--L", type=int, default=4096)
    ap.add_argument("--chunks", default="64,128,256")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import numba
    import torch

    print(
        f"CPU: {cpu_model()}; torch threads {torch.get_num_threads()}, numba threads "
        f"{numba.get_num_threads()}, GEMMs on {GEMM_BACKEND}"
    )
    d = bs.ssd_inputs(args.L)
    print(f"shape: batch 1, L {args.L}, 32 heads x 64, dstate 128, 1 group, float32")
    rows = []
    for Q in map(int, args.chunks.split(",")):
        ref = lambda Q=Q: ssd_minimal_discrete(*bs.minimal_args(d, Q))  # noqa: E731
        ours = lambda Q=Q: ssd_scan(**d, chunk_size=Q)  # noqa: E731
        sides = {"ref1": bs.with_threads(1, ref), "ref2": bs.with_threads(2, ref), "ours": ours}
        t = bs.alternating_medians(sides, rounds=args.rounds)
        roof = bs.sgemm_roof()
        secs, flops = min((bs.gemm_phase(ours) for _ in range(3)), key=lambda sf: sf[0])
        roof2 = bs.sgemm_roof()
        rows.append((Q, t, secs, flops, max(roof, roof2)))
        best = min(t["ref1"], t["ref2"])
        print(
            f"chunk {Q}: minimal 1 thread {t['ref1'] * 1e3:.0f} ms, 2 threads "
            f"{t['ref2'] * 1e3:.0f} ms; ssd_scan {t['ours'] * 1e3:.1f} ms -> "
            f"{best / t['ours']:.1f}x; "
            f"GEMM phase {secs * 1e3:.1f} ms, {flops / 1e9:.2f} GFLOP, {flops / secs / 1e9:.1f} "
            f"GFLOP/s = {flops / secs / max(roof, roof2):.2f} of the sgemm roof "
            f"({roof / 1e9:.0f}, {roof2 / 1e9:.0f} GFLOP/s before, after)"
        )
        ph = phase_times(ours)
        print("   decomposition (ms): " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in ph.items()))
    best_ref = min(min(r[1]["ref1"], r[1]["ref2"]) for r in rows)
    best_ours = min(r[1]["ours"] for r in rows)
    print(f"best minimal / best ssd_scan: {best_ref / best_ours:.1f}x")

    q = args.L // 4
    lengths = [q + q // 2 + 3, q - q // 3, q - 3, args.L - (3 * q + q // 2 - q // 3)]
    cu = np.concatenate([[0], np.cumsum(lengths)])
    batch = {k: (v.reshape(4, q, *v.shape[2:]) if v.ndim > 1 else v) for k, v in d.items()}
    t = bs.alternating_medians(
        {
            "packed": lambda: ssd_scan(**d, chunk_size=64, cu_seqlens=cu),
            "batch": lambda: ssd_scan(**batch, chunk_size=64),
        },
        rounds=args.rounds + 2,
    )
    print(
        f"packed {lengths} vs batch 4 x {q}: {t['packed'] * 1e3:.1f} / {t['batch'] * 1e3:.1f} ms "
        f"= {t['packed'] / t['batch']:.2f}x"
    )

    small = {
        k: v.requires_grad_()
        for k, v in bs.ssd_inputs(1024, nheads=8, headdim=32, dstate=32).items()
    }
    t = bs.alternating_medians(
        {
            "ref": lambda: ssd_minimal_discrete(*bs.minimal_args(small, 64))[0].sum().backward(),
            "ours": lambda: ssd_scan(**small, chunk_size=64).sum().backward(),
        },
        rounds=args.rounds,
    )
    print(
        f"fwd+bwd, L 1024, 8 heads x 32, dstate 32: minimal {t['ref'] * 1e3:.1f} ms, "
        f"ssd_scan {t['ours'] * 1e3:.1f} ms -> {t['ref'] / t['ours']:.1f}x"
    )


if __name__ == "__main__":
    main()
