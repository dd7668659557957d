"""Host side of the chunked SSD scan: chunk bookkeeping, GEMMs, the three phases.

The scan is the three-phase chunked scan of :func:`propopt.associative_scan`
written out with the SSD's chunk as the piece (the carry pass over a few
dozen chunks is sequential; there is no depth to win):

1. **local** (every chunk on its own): ``C B^T`` of the chunk (a GEMM), the
   head-independent left operand ``[C B^T o mask | C o carry]``
   (:func:`._ssd_cpu.left_operand`), the right operand's token rows
   ``v dt o X`` (:func:`._ssd_cpu.fill_x`), and the chunk's end state from
   zero ``S'_c = (B o lastrun)^T (v dt o X)`` (a GEMM for all heads);
2. **carry**: ``H_c = a_c H_{c-1} + s1_c S'_c`` over the chunks, the
   linear-recurrence monoid ``(a1, S1) . (a2, S2) = (a1 a2, a2 S1 + S2)``
   (:func:`._ssd_cpu.pass_states`, parallel over the state), written
   scaled by ``exp(r)`` into the right operand's state rows;
3. **fix-up**: one GEMM per chunk, ``y_c = L_c @ R_c`` (diagonal block and
   carried state at once), then ``u``, ``D`` and the gate
   (:func:`._ssd_cpu.finish`).  (Chunk, head) pairs whose decay is too wide
   for the rank-one factors get the explicit mask (:func:`._ssd_cpu.pair_operands`).

Tried and rejected (batch 1, L 4096, 32 heads x 64, dstate 128, float32,
one thread, the 2-core machine shared with other work):

* The explicit mask per head, as mamba_ssm's kernels do: ``M_h = C B^T o L_h
  o dt`` built per (chunk, head) and ``M_h X_h`` as 32 small products per
  chunk.  Those products ran at 22-24 GFLOP/s (64 x 64 x 64 and 128 x 128 x
  64), building ``M`` cost 27-53 ms and writing and reading it and the
  per-head outputs 4 more passes over 32-64 MB: 262 ms at chunk 64.  The
  rank-one factors make the same work one (64 x 192) @ (192 x 2048) product
  per chunk (37-42 GFLOP/s) with no per-head matrices; the explicit mask
  stays as the fallback for wide decays.
* Writing each chunk's state straight into the next chunk's right operand
  (a strided ``out=`` of torch's batched matmul): 12x slower than a
  contiguous output (torch copies through a temporary), and per-chunk 2-D
  products were no better; the states go to their own array.
* NumPy's stacked ``matmul`` for the GEMMs: 1-30 GFLOP/s against torch's
  36-80 (for some of these shapes NumPy's batched loop is not BLAS).  NumPy
  is the fallback when torch is missing, with one 2-D product per chunk.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from . import _ssd_cpu

try:  # torch is optional: the GEMM backend of choice when present
    import torch as _torch
except ImportError:  # pragma: no cover - exercised by forcing GEMM_BACKEND
    _torch = None

#: ``'torch'`` or ``'numpy'``: the library whose matmul runs the GEMMs.
GEMM_BACKEND = "torch" if _torch is not None else "numpy"


#: Scratch arrays kept between calls (the chunks' right operands and states),
#: at most this many bytes.  Fresh arrays of that size cost their page
#: faults on first touch: filling 100 MB took 21 ms fresh and 9 ms reused
#: here, about 12 ms per 100 MB, a tenth of the forward at the 2.7B shape.
WORKSPACE_BYTES = 512 << 20

_workspace: dict[tuple[tuple[int, ...], str], np.ndarray] = {}
_workspace_lock = threading.Lock()


def scratch(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized array, taken from the workspace if one of that shape is there."""
    key = (tuple(shape), np.dtype(dtype).str)
    with _workspace_lock:
        arr = _workspace.pop(key, None)
    return np.empty(shape, dtype) if arr is None else arr


def release(arr: np.ndarray) -> None:
    """Give a scratch array back; kept if the workspace has room (else freed)."""
    key = (arr.shape, arr.dtype.str)
    with _workspace_lock:
        held = sum(a.nbytes for a in _workspace.values())
        if key not in _workspace and held + arr.nbytes <= WORKSPACE_BYTES:
            _workspace[key] = arr
        elif key not in _workspace:  # make room: the newest shape wins
            _workspace.clear()
            if arr.nbytes <= WORKSPACE_BYTES:
                _workspace[key] = arr


def clear_workspace() -> None:
    """Free the scratch arrays kept between calls."""
    with _workspace_lock:
        _workspace.clear()


_gemm_log: list[tuple[float, float]] | None = None


@contextmanager
def gemm_profile() -> Iterator[list[tuple[float, float]]]:
    """Record ``(seconds, flops)`` of every GEMM issued inside the block (benchmarks)."""
    global _gemm_log
    log: list[tuple[float, float]] = []
    _gemm_log = log
    try:
        yield log
    finally:
        _gemm_log = None


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a @ b`` (batched), written in place, on :data:`GEMM_BACKEND`."""
    if _gemm_log is not None:
        t0 = time.perf_counter()
        _matmul(a, b, out)
        flops = 2.0 * out.size * a.shape[-1]
        _gemm_log.append((time.perf_counter() - t0, flops))
        return
    _matmul(a, b, out)


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    if GEMM_BACKEND == "torch":
        with warnings.catch_warnings():  # read-only inputs are only read
            warnings.simplefilter("ignore", UserWarning)
            ta, tb, to = (_torch.from_numpy(v) for v in (a, b, out))
        if to.is_contiguous():
            _torch.matmul(ta, tb, out=to)
        else:
            to.copy_(_torch.matmul(ta, tb))
        return
    if out.ndim == 2:
        np.matmul(a, b, out=out)
        return
    for i in range(out.shape[0]):  # 2-D products: NumPy's stacked loop is slow here
        np.matmul(a[i], b[i], out=out[i])


def chunk_meta(starts: np.ndarray, Q: int) -> tuple[np.ndarray, np.ndarray]:
    """``run0`` (b, l) and ``first`` (b, c) from the sequence starts.

    ``run0[b, t]``: first token of the run holding ``t`` (the last chunk or
    sequence start at or before ``t``); ``first[b, c]``: offset of the first
    sequence start inside chunk ``c`` (``Q`` if none).
    """
    nb, L = starts.shape
    nck = -(-L // Q)
    pos = np.arange(L)
    reset = starts.astype(bool)
    reset[:, ::Q] = True
    run0 = np.maximum.accumulate(np.where(reset, pos, 0), axis=1)
    padded = np.zeros((nb, nck * Q), bool)
    padded[:, :L] = starts.astype(bool)
    blocks = padded.reshape(nb, nck, Q)
    first = np.where(blocks.any(-1), blocks.argmax(-1), Q)
    return run0, first


def forward(x: np.ndarray, dt: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray,
            Q: int, Dv: np.ndarray | None, z: np.ndarray | None, bias: np.ndarray,
            softplus: bool, dt_limit: tuple[float, float], h0: np.ndarray,
            starts: np.ndarray,
            cu_seqlens: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, Any, bool]:  # fmt: skip
    """The chunked scan on validated, contiguous arrays of the compute dtype.

    Returns ``(y, final_states, varlen_states or None, clean)``: ``clean`` is
    False when a ``dt`` or decay was not finite (taken as 0,
    :func:`._ssd_cpu.prep`) or an output or state came out inf or nan; the
    caller then recomputes (:mod:`._ssd_nonfinite`).
    """
    nb, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    hg = H // G
    W = hg * P  # columns of one group
    T = x.dtype
    one = T.type(1)
    nck = -(-L // Q)
    run0, first = chunk_meta(starts, Q)
    dtp = np.empty((nb, H, L), T)
    cs = np.empty((nb, H, L))
    u, vdt = np.empty((nb, L, H), T), np.empty((nb, L, H), T)
    a, s1, er = (np.empty((nb, nck, H), T) for _ in range(3))
    safe, flagged = np.empty((nb, nck, H), np.uint8), np.empty((nb, nck, H), np.uint8)
    lo, hi = (T.type(v) for v in dt_limit)
    _ssd_cpu.prep(dt, A, bias, softplus, lo, hi, starts, run0, first, Q,
                  _ssd_cpu.SEPARABLE_RANGE[T], dtp, cs, u, vdt, a, s1, er, safe,
                  flagged)  # fmt: skip
    Ct = np.ascontiguousarray(C.transpose(0, 2, 1, 3))  # (b, g, l, n)
    Bt = np.ascontiguousarray(B.transpose(0, 2, 1, 3))
    # R[b, c]: the chunk's right operand, Q rows of (v dt o X) then N state rows.
    R = scratch((nb, nck, Q + N, H * P), T)
    S = scratch((nb, G, nck, N, W), T)
    ranges = [(0, L // Q, Q)] if L >= Q else []
    if L % Q:
        ranges.append((L // Q, 1, L % Q))
    lefts = []
    for c0, nc, Qc in ranges:  # phase 1: every chunk on its own
        t0, t1, row0 = c0 * Q, c0 * Q + nc * Qc, Q - Qc
        CB = np.empty((nb, G, nc, Qc, Qc), T)
        rows, fold = _batching(nb, G, nc * Qc == L)
        for b in rows:
            for g in range(G):
                Cc = fold(Ct[b, g, t0:t1].reshape(-1, nc, Qc, N))
                Bc = fold(Bt[b, g, t0:t1].reshape(-1, nc, Qc, N))
                matmul(Cc, Bc.transpose(0, 2, 1), fold(CB[b, g]))
        Lm = np.empty((nb, G, nc, Qc, Qc + N), T)
        Bm = np.empty((nb, G, nc, N, Qc), T)
        _ssd_cpu.left_operand(CB, C, run0, first, c0, Q, Lm, Bm, B)
        _ssd_cpu.fill_x(x, vdt, c0, nc, Qc, Q, R)
        for b in rows:
            for g in range(G):
                matmul(fold(Bm[b, g]), fold(R[b, c0:c0 + nc, row0:Q, g * W:(g + 1) * W]),
                       fold(S[b, g, c0:c0 + nc]))  # fmt: skip
        lefts.append(Lm)
    final = np.empty((nb, H, P, N), T)
    _ssd_cpu.pass_states(S, a, s1, er, h0, R, final)  # phase 2: carries
    release(S)
    varlen = None
    if cu_seqlens is not None:  # before phase 3 clears the unsafe pairs' columns of R
        varlen = varlen_states(x, B, A, cs, dtp, run0, first, R, u, safe, cu_seqlens, Q)
    y = np.empty((nb, L, H, P), T)
    for (c0, nc, Qc), Lm in zip(ranges, lefts):  # phase 3: each chunk from its carry
        t0, t1, row0 = c0 * Q, c0 * Q + nc * Qc, Q - Qc
        bad = np.argwhere(safe[:, c0 : c0 + nc] == 0)
        if len(bad):  # unsafe (batch, chunk, head): the explicit mask
            bad[:, 1] += c0
            Lp = np.empty((len(bad), Qc, Qc + N), T)
            Rp = np.empty((len(bad), Qc + N, P), T)
            _ssd_cpu.pair_operands(bad, Lm, c0, Q, cs, dtp, A, run0, x, R, one, Lp, Rp)
            Yp = np.empty((len(bad), Qc, P), T)
            matmul(Lp, Rp, Yp)
        rows, fold = _batching(nb, G, nc * Qc == L)
        for b in rows:
            yb = fold(y[b, t0:t1].reshape(-1, nc, Qc, H * P))
            for g in range(G):
                matmul(fold(Lm[b, g]), fold(R[b, c0:c0 + nc, row0:, g * W:(g + 1) * W]),
                       yb[:, :, g * W:(g + 1) * W])  # fmt: skip
        if len(bad):
            _ssd_cpu.put_pairs(bad, Yp, Q, y)
    zz = z if z is not None else np.zeros((1, 1, 1, 1), T)  # contiguous: one compiled kernel
    nonfinite = np.empty((nb, L, H), np.uint8)
    _ssd_cpu.finish(y, u, x, zz, z is not None, Dv is not None,
                    Dv if Dv is not None else np.zeros((1, 1), T), one, nonfinite)  # fmt: skip
    release(R)
    clean = not (flagged.any() or nonfinite.any() or not np.isfinite(final).all()
                 or (varlen is not None and not np.isfinite(varlen).all()))  # fmt: skip
    return y, final, varlen, clean


def _batching(nb: int, G: int, whole_rows: bool) -> tuple[Any, Any]:
    """Row indices to loop over, and how to fold (row, chunk) axes into one GEMM batch.

    With one group and chunk ranges that cover whole rows, all rows go into
    one batched GEMM (``rows = [slice(None)]``, the leading two axes folded);
    otherwise one call per row, whose arrays start at the chunk axis.
    """
    if not (G == 1 and whole_rows and nb > 1):
        return range(nb), lambda v: v.reshape(v.shape[-3:]) if v.ndim > 3 else v

    def fold(v: np.ndarray) -> np.ndarray:
        out = v.reshape(-1, *v.shape[-2:])
        if not np.may_share_memory(out, v):  # outputs must be views
            raise RuntimeError(f"internal: a GEMM operand of shape {v.shape} is not foldable")
        return out

    return [slice(None)], fold


def varlen_states(x: np.ndarray, B: np.ndarray, A: np.ndarray, cs: np.ndarray,
                  dtp: np.ndarray, run0: np.ndarray, first: np.ndarray, R: np.ndarray,
                  u: np.ndarray, safe: np.ndarray, cu: np.ndarray,
                  Q: int) -> np.ndarray:  # fmt: skip
    """State after the last token of each packed sequence (batch 1): (nseq, h, p, n).

    The state at token ``t`` of chunk ``c`` is the carry ``exp(cs_t) H_{c-1}``
    (if neither a sequence start nor a cut of the head comes before ``t`` in
    the chunk) plus the tokens of ``t``'s run of the head,
    ``sum_j exp(cs_t - cs_j) dt_j B_j x_j^T``; both masks are selections.
    Empty sequences get zeros.  ``R[0, c, Q:]`` holds ``exp(r) H_{c-1}`` for
    safe heads, so the carry is ``u_t R`` there (``exp(cs_t) R`` for unsafe
    heads, whose ``r`` is 0).
    """
    _, _, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    hg = H // G
    a64 = A.astype(np.float64)[:, None]
    out = np.zeros((len(cu) - 1, H, P, N), x.dtype)
    for s in range(len(cu) - 1):
        if cu[s + 1] <= cu[s]:
            continue
        t = int(cu[s + 1]) - 1
        c = t // Q
        jm = int(run0[0, t])
        # each head's last cut in the chunk up to t (-1 if none), found as prep finds it
        la = dtp[0, :, c * Q : t + 1].astype(np.float64) * a64
        cut = np.where(la < _ssd_cpu.CUT_BELOW, np.arange(c * Q, t + 1), -1).max(axis=1)
        run = np.arange(jm, t + 1) >= np.maximum(jm, cut)[:, None]  # (h, k)
        gap = np.where(run, cs[0, :, t, None] - cs[0, :, jm : t + 1], -np.inf)
        w = (np.exp(gap) * dtp[0, :, jm : t + 1]).T
        Xs = x[0, jm : t + 1] * w[:, :, None].astype(x.dtype)  # (k, h, p)
        for g in range(G):
            hs = slice(g * hg, (g + 1) * hg)
            St = np.empty((N, hg * P), x.dtype)
            matmul(np.ascontiguousarray(B[0, jm:t + 1, g].T),
                   np.ascontiguousarray(Xs[:, hs].reshape(-1, hg * P)), St)  # fmt: skip
            out[s, hs] = St.reshape(N, hg, P).transpose(1, 2, 0)
            if t - c * Q < first[0, c]:
                carry = R[0, c, Q:, hs.start * P : hs.stop * P].reshape(N, hg, P)
                scale = np.where(safe[0, c, hs], u[0, t, hs], np.exp(cs[0, hs, t]))
                add = scale.astype(x.dtype)[:, None, None] * carry.transpose(1, 2, 0)
                out[s, hs] += np.where((cut[hs] < 0)[:, None, None], add, 0)
    return out
