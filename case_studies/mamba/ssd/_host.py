"""Host side of the chunked SSD scan: chunk bookkeeping, GEMMs, the three phases.

The scan is the three-phase chunked scan of :func:`propopt.associative_scan`
written out with the SSD's chunk as the piece (the carry pass over a few
dozen chunks is sequential; there is no depth to win):

1. **local** (every chunk on its own): the decays and the state products'
   right operand ``w o X`` (:func:`._cpu.prep`), ``C B^T`` of the chunk
   (a GEMM, shared by the heads of a group) and the chunk's end state from
   zero ``S_c = B_c^T (w o X_c)`` (a GEMM for all heads);
2. **carry**: ``H_c = a_c H_{c-1} + S_c`` over the chunks, the
   linear-recurrence monoid ``(a1, S1) . (a2, S2) = (a1 a2, a2 S1 + S2)``
   (:func:`._cpu.pass_states`, parallel over the state, in place);
3. **fix-up**: the carried states' outputs ``C_c H_{c-1}`` (a GEMM for all
   heads, straight into ``y``), then per chunk the intra-chunk term, ``D``
   and the gate (:func:`._cpu.finish`, tiles of rows in vector code).

Only the intra-chunk term is per head, and it is the one product outside
BLAS: ``(C B^T o L_h) X_h`` with ``L_h`` the head's decays.  Tried and
rejected (batch 1, L 4096, 32 heads x 64, dstate 128, float32, one thread,
the 2-core machine shared with other work):

* ``M_h = C B^T o L_h o dt`` built per (chunk, head) and ``M_h X_h`` as small
  BLAS products, as mamba_ssm's kernels do: 22-24 GFLOP/s (64 x 64 x 64 and
  128 x 128 x 64), building ``M`` cost 27-53 ms and writing and reading it 4
  more passes over 32-64 MB.  The tiles of :mod:`._tile` read ``C B^T``
  as it is, take one ``exp`` per token and tile, and run at 70-80 GFLOP/s.
* The mask's rank-one factors ``exp(cs_i - r) exp(r - cs_j)`` over a whole
  chunk, which fold the intra-chunk term into the carried state's GEMM
  (``[C B^T o mask | C] @ [v dt o X ; e^r H]``, one product for all heads):
  the factors overflow once a chunk's decay spans more than 80 e-folds, and
  at the Mamba2-130m shape (chunk 256, ``dt`` up to 10, ``A`` down to -24)
  85% of the (chunk, head) pairs did, each then computed with its own
  explicit mask: 70-140 ms a layer, against 13 ms of GEMM work.
* Writing each chunk's state straight into the next chunk's operand (a
  strided ``out=`` of torch's batched matmul): 12x slower than a contiguous
  output (torch copies through a temporary); the states go to their own
  array.  A transposed operand (``B_c^T`` as a view) ran at 7 GFLOP/s
  against 70-100 for a contiguous copy.
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

from propopt import threads
from propopt.arrays import frozen, mapped_empty

from . import _cpu

try:  # torch is optional: the GEMM backend of choice when present
    import torch as _torch
except ImportError:  # pragma: no cover - exercised by forcing GEMM_BACKEND
    _torch = None

#: ``'torch'`` or ``'numpy'``: the library whose matmul runs the GEMMs.
GEMM_BACKEND = "torch" if _torch is not None else "numpy"


#: Longest chunk ``method='fused'`` uses (a longer ``chunk_size`` is cut to it).
#: The state products cost the same per token at any chunk size; the
#: intra-chunk triangle costs ``chunk / 2`` multiply-adds per token and
#: channel, and the carry pass a pass over ``dstate / chunk`` numbers per
#: token and channel.  At the Mamba2-130m shape (24 heads of 64, dstate 128,
#: 2048 tokens, one thread) chunks of 32 / 64 / 128 / 256 took 41 / 34-35 /
#: 36-41 / 38-41 ms of CPU time.
CPU_CHUNK = 64

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
            softplus: bool, dt_limit: tuple[float, float], h0: np.ndarray | None,
            starts: np.ndarray,
            cu_seqlens: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, Any, bool]:  # fmt: skip
    """The chunked scan on validated, contiguous arrays of the compute dtype.

    Returns ``(y, final_states, varlen_states or None, clean)``: ``clean`` is
    False when a ``dt`` or decay was not finite (taken as 0,
    :func:`._cpu.prep`) or an output or state came out inf or nan; the
    caller then recomputes (:mod:`._nonfinite`).  ``h0`` None: the
    state before the sequence is zero.

    The numba kernels run under propopt's thread policy
    (:func:`propopt.threads.sized`), and so do torch's GEMMs: they run on at
    most that many threads (torch's own count if lower).  With one core
    taken by another process, torch's two threads made the call 1.3x slower
    than one (72 against 54 ms at the Mamba2-130m shape).
    """
    with threads.sized() as n, gemm_threads(n):
        return _forward(x, dt, A, B, C, Q, Dv, z, bias, softplus, dt_limit, h0, starts,
                        cu_seqlens)  # fmt: skip


@contextmanager
def gemm_threads(n: int) -> Iterator[None]:
    """Run the enclosed GEMMs on at most ``n`` threads (torch's count is lowered, then restored)."""
    fewer = GEMM_BACKEND == "torch" and n < _torch.get_num_threads()
    with threads.torch_threads(n if fewer else None):
        yield


def _forward(x: np.ndarray, dt: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray,
             Q: int, Dv: np.ndarray | None, z: np.ndarray | None, bias: np.ndarray,
             softplus: bool, dt_limit: tuple[float, float], h0: np.ndarray | None,
             starts: np.ndarray,
             cu_seqlens: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, Any, bool]:  # fmt: skip  # noqa: E501
    nb, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    hg = H // G
    W = hg * P  # columns of one group
    T = x.dtype
    nck = -(-L // Q)
    run0, first = chunk_meta(starts, Q)
    dtp = np.empty((nb, H, L), T)
    cs = np.empty((nb, H, L))
    e = np.empty((nb, L, H), T)
    a = np.empty((nb, nck, H), T)
    mono, flagged = np.empty((nb, nck, H), np.uint8), np.empty((nb, nck, H), np.uint8)
    lo, hi = (T.type(v) for v in dt_limit)
    tiny = float(np.finfo(T).tiny)
    floor = _cpu.DECAY_FLOOR[T]
    # y holds w o X (the state products' right operand) until the carry-in
    # products overwrite it with C H_{c-1}
    y = mapped_empty((nb, L, H, P), T)  # mapped here, not by the threads at once
    _cpu.prep(dt, A, bias, softplus, lo, hi, starts, run0, first, Q, _cpu.FACTORED,
                  tiny, floor, x, y, dtp, cs, e, a, mono, flagged)  # fmt: skip
    Ct = np.ascontiguousarray(C.transpose(0, 2, 1, 3))  # (b, g, l, n)
    Bt = np.ascontiguousarray(B.transpose(0, 2, 1, 3))
    CB = scratch((nb, G, nck, Q, Q), T)
    S = scratch((nb, G, nck, N, W), T)
    ranges = [(0, L // Q, Q)] if L >= Q else []
    if L % Q:
        ranges.append((L // Q, 1, L % Q))
    yv = y.reshape(nb, L, H * P)
    for c0, nc, Qc in ranges:  # every chunk on its own: C B^T and the state from zero
        t0, t1 = c0 * Q, c0 * Q + nc * Qc
        rows, fold = _batching(nb, G, nc * Qc == L)
        for b in rows:
            for g in range(G):
                Cc = fold(Ct[b, g, t0:t1].reshape(-1, nc, Qc, N))
                # B^T of each chunk, contiguous: torch's batched product with a
                # transposed operand ran at 7 GFLOP/s here, against 70-100
                BTc = np.ascontiguousarray(fold(Bt[b, g, t0:t1].reshape(-1, nc, Qc, N))
                                           .transpose(0, 2, 1))  # fmt: skip
                matmul(Cc, BTc, fold(CB[b, g, c0 : c0 + nc, :Qc, :Qc]))
                Xc = fold(yv[b, t0:t1].reshape(-1, nc, Qc, H * P)[..., g * W : (g + 1) * W])
                matmul(BTc, Xc, fold(S[b, g, c0 : c0 + nc]))
    final = np.empty((nb, H, P, N), T)
    zero_h0 = h0 is None or not h0.any()
    if h0 is None:
        h0 = np.zeros((nb, H, P, N), T)
    _cpu.pass_states(S, a, h0, final)  # the carries: S becomes H_{c-1}
    if zero_h0:  # the first chunk carries nothing: no product, and e = 0 discards y there
        e[:, : min(Q, L)] = 0
    varlen = None
    if cu_seqlens is not None:
        varlen = varlen_states(x, B, A, cs, dtp, run0, S, e, cu_seqlens, Q)
    for c0, nc, Qc in ranges:  # each chunk's carried state: y = C H_{c-1}
        skip = 1 if zero_h0 and c0 == 0 else 0
        if nc == skip:
            continue
        t0, t1, m = (c0 + skip) * Q, c0 * Q + nc * Qc, nc - skip
        rows, fold = _batching(nb, G, m * Qc == L)
        for b in rows:
            for g in range(G):
                Cc = fold(Ct[b, g, t0:t1].reshape(-1, m, Qc, N))
                Yc = fold(yv[b, t0:t1].reshape(-1, m, Qc, H * P)[..., g * W : (g + 1) * W])
                matmul(Cc, fold(S[b, g, c0 + skip : c0 + nc]), Yc)
    release(S)
    zz = z if z is not None else np.zeros((1, 1, 1, 1), T)  # contiguous: one compiled kernel
    nonfinite = np.empty((nb, L, H), np.uint8)
    Dz = Dv if Dv is not None else np.zeros((1, 1), T)
    # inputs read-only whatever the caller passed: one compiled kernel (propopt.arrays.frozen)
    xr, zr, Dr, CBr, csr, dtr, Ar, r0, er = map(frozen, (x, zz, Dz, CB, cs, dtp, A, run0, e))
    _cpu.finish(y, xr, zr, z is not None, Dv is not None, Dr, CBr, csr, dtr, Ar, r0, er,
                    mono, Q, T.type(1), floor, nonfinite)  # fmt: skip
    release(CB)
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
                  dtp: np.ndarray, run0: np.ndarray, Hprev: np.ndarray, e: np.ndarray,
                  cu: np.ndarray, Q: int) -> np.ndarray:  # fmt: skip
    """State after the last token of each packed sequence (batch 1): (nseq, h, p, n).

    The state at token ``t`` of chunk ``c`` is the carry ``e_t H_{c-1}``
    (``e_t = exp(cs_t)`` if neither a sequence start nor a cut of the head
    comes before ``t`` in the chunk, else 0) plus the tokens of ``t``'s run of
    the head, ``sum_j exp(cs_t - cs_j) dt_j B_j x_j^T``; both masks are
    selections.  ``Hprev[0, g, c]`` (n, hg p) is ``H_{c-1}``.  Empty sequences
    get zeros.
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
        cut = np.where(la < _cpu.CUT_BELOW, np.arange(c * Q, t + 1), -1).max(axis=1)
        run = np.arange(jm, t + 1) >= np.maximum(jm, cut)[:, None]  # (h, k)
        gap = np.where(run, cs[0, :, t, None] - cs[0, :, jm : t + 1], -np.inf)
        wt = (np.exp(gap) * dtp[0, :, jm : t + 1]).T
        Xs = x[0, jm : t + 1] * wt[:, :, None].astype(x.dtype)  # (k, h, p)
        for g in range(G):
            hs = slice(g * hg, (g + 1) * hg)
            St = np.empty((N, hg * P), x.dtype)
            matmul(np.ascontiguousarray(B[0, jm:t + 1, g].T),
                   np.ascontiguousarray(Xs[:, hs].reshape(-1, hg * P)), St)  # fmt: skip
            carry = Hprev[0, g, c].reshape(N, hg, P).transpose(1, 2, 0)
            et = e[0, t, hs]
            add = et[:, None, None] * np.where((et != 0)[:, None, None], carry, 0)
            out[s, hs] = St.reshape(N, hg, P).transpose(1, 2, 0) + add
    return out
