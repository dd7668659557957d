"""Packed variable-length batches against an unpacked batch of the same tokens.

``python -m benchmarks.packed_report``: Mamba-1 ``selective_scan`` (forward on
NumPy arrays, and forward + backward under torch autograd) and Mamba-2
``ssd_scan`` (forward), each side of a ratio alternating call by call
(:func:`benchmarks.bench_ssd.alternating_medians`), medians of ``--rounds``.

The packed side is one row of four sequences of unequal lengths with
``seq_idx``; the unpacked side is a batch of four equal sequences, the same
number of tokens.  The target (docs/mamba.md) is packed within 1.2x.
"""

from __future__ import annotations

import argparse

import numpy as np

from capstone.workloads import mamba_inputs
from case_studies.mamba import selective_scan, ssd_scan

from . import bench_ssd as bs


def _lengths(tokens: int) -> list[int]:
    q = tokens // 4
    return [q + q // 2, q // 2, q - q // 4, q + q // 4]


def mamba1(tokens: int, dim: int, rounds: int) -> None:
    import torch

    lengths = _lengths(tokens)
    seq_idx = np.repeat(np.arange(4), lengths)[None]
    one = mamba_inputs(tokens, dim, batch=1)  # (1, dim, tokens); B, C per token
    packed = {k: v.numpy() for k, v in one.items()}
    q = tokens // 4
    batch = dict(packed)
    for k in ("u", "delta", "B", "C"):  # (1, c, tokens) -> (4, c, q), the same tokens
        v = packed[k]
        batch[k] = np.ascontiguousarray(v.reshape(v.shape[1], 4, q).transpose(1, 0, 2))
    t = bs.alternating_medians({
        "packed": lambda: selective_scan(**packed, seq_idx=seq_idx),
        "batch": lambda: selective_scan(**batch)}, rounds=rounds)  # fmt: skip
    print(f"Mamba-1 forward, d_model {dim}, d_state 16, float32, {lengths} packed vs 4 x {q}: "
          f"{t['packed'] * 1e3:.1f} / {t['batch'] * 1e3:.1f} ms = "
          f"{t['packed'] / t['batch']:.2f}x")  # fmt: skip

    tp = {k: torch.from_numpy(v).requires_grad_() for k, v in packed.items()}
    tb = {k: torch.from_numpy(v).requires_grad_() for k, v in batch.items()}
    si = torch.from_numpy(seq_idx)
    t = bs.alternating_medians({
        "packed": lambda: selective_scan(**tp, seq_idx=si).sum().backward(),
        "batch": lambda: selective_scan(**tb).sum().backward()}, rounds=rounds)  # fmt: skip
    print(f"Mamba-1 forward + backward (autograd), same shapes: {t['packed'] * 1e3:.1f} / "
          f"{t['batch'] * 1e3:.1f} ms = {t['packed'] / t['batch']:.2f}x")  # fmt: skip


def mamba2(tokens: int, rounds: int) -> None:
    lengths = _lengths(tokens)
    q = tokens // 4
    d = bs.ssd_inputs(tokens, batch=1)
    seq_idx = np.repeat(np.arange(4), lengths)[None]
    batch = {k: (v.reshape(4, q, *v.shape[2:]) if v.ndim > 1 else v) for k, v in d.items()}
    t = bs.alternating_medians({
        "packed": lambda: ssd_scan(**d, chunk_size=64, seq_idx=seq_idx),
        "batch": lambda: ssd_scan(**batch, chunk_size=64)}, rounds=rounds)  # fmt: skip
    print(f"Mamba-2 forward, 32 heads x 64, dstate 128, chunk 64, {lengths} packed vs 4 x {q}: "
          f"{t['packed'] * 1e3:.1f} / {t['batch'] * 1e3:.1f} ms = "
          f"{t['packed'] / t['batch']:.2f}x")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    import numba

    print(f"numba threads {numba.get_num_threads()}")
    mamba1(args.tokens, args.dim, args.rounds)
    mamba2(args.tokens, args.rounds)


if __name__ == "__main__":
    main()
