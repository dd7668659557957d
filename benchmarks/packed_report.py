"""Packed variable-length batches against an unpacked batch of the same tokens.

``python -m benchmarks.packed_report``: Mamba-1 ``selective_scan`` (forward on
NumPy arrays, and forward + backward under torch autograd) and Mamba-2
``ssd_scan`` (forward).  Each ratio comes from
:func:`propopt_case_studies.capstone.measure.compare`: both sides in
alternating rounds, the median of the per-round ratios and its interquartile
range, with the load of other processes.

The packed side is one row of four sequences of unequal lengths with
``seq_idx``; the unpacked side is a batch of four equal sequences, the same
number of tokens.  The target (docs/mamba.md) is packed within 1.2x.  For
Mamba-1 the same row without ``seq_idx`` is timed too, which separates the
cost of packing (the resets) from that of the shape (one long row).
"""

from __future__ import annotations

import argparse

import numpy as np

from propopt_case_studies.capstone.measure import compare
from propopt_case_studies.capstone.workloads import mamba_inputs
from propopt_case_studies.mamba import selective_scan, ssd_scan

from . import bench_ssd as bs


def _line(what: str, batch: object, packed: object, rounds: int) -> None:
    c = compare(batch, packed, rounds=rounds)  # type: ignore[arg-type]
    print(
        f"{what}: {c.optimized_ms:.1f} / {c.baseline_ms:.1f} ms = "
        f"{1 / c.ratio:.2f}x (IQR {1 / c.ratio_hi:.2f}-{1 / c.ratio_lo:.2f}, {c.rounds} "
        f"rounds, other load {c.load:.1f} cores)"
    )


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
    what = f"Mamba-1 forward, d_model {dim}, d_state 16, float32, {lengths} packed vs 4 x {q}"
    _line(
        what,
        lambda: selective_scan(**batch),
        lambda: selective_scan(**packed, seq_idx=seq_idx),
        rounds,
    )
    _line(
        "  the same row without seq_idx, vs the batch",
        lambda: selective_scan(**batch),
        lambda: selective_scan(**packed),
        rounds,
    )
    _line(
        "  packed vs the same row without seq_idx",
        lambda: selective_scan(**packed),
        lambda: selective_scan(**packed, seq_idx=seq_idx),
        rounds,
    )

    tp = {k: torch.from_numpy(v).requires_grad_() for k, v in packed.items()}
    tb = {k: torch.from_numpy(v).requires_grad_() for k, v in batch.items()}
    si = torch.from_numpy(seq_idx)
    _line(
        "Mamba-1 forward + backward (autograd), same shapes",
        lambda: selective_scan(**tb).sum().backward(),
        lambda: selective_scan(**tp, seq_idx=si).sum().backward(),
        rounds,
    )


def mamba2(tokens: int, rounds: int) -> None:
    lengths = _lengths(tokens)
    q = tokens // 4
    d = bs.ssd_inputs(tokens, batch=1)
    seq_idx = np.repeat(np.arange(4), lengths)[None]
    batch = {k: (v.reshape(4, q, *v.shape[2:]) if v.ndim > 1 else v) for k, v in d.items()}
    _line(
        f"Mamba-2 forward, 32 heads x 64, dstate 128, chunk 64, {lengths} packed vs 4 x {q}",
        lambda: ssd_scan(**batch, chunk_size=64),
        lambda: ssd_scan(**d, chunk_size=64, seq_idx=seq_idx),
        rounds,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="a fixed thread count (default: propopt's per-call policy, which "
        "sizes each call to the cores other processes leave free)",
    )
    args = ap.parse_args()
    import numba

    from propopt import set_num_threads

    print(
        f"numba threads {numba.get_num_threads()}, propopt threads "
        f"{args.threads or 'sized per call'}"
    )
    with set_num_threads(args.threads):
        mamba1(args.tokens, args.dim, args.rounds)
        mamba2(args.tokens, args.rounds)


if __name__ == "__main__":
    main()
