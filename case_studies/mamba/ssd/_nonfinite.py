"""Infs and nans in the chunked SSD scan: each stays in its sequence, after its token.

The chunked scans (:mod:`._host`, :mod:`._torch`) multiply a chunk's
tokens at once, in matrix products whose operands are masked by zeros (the
causal mask, the sequence starts, the carry's reach).  A matrix product
cannot select, and ``0 * nan`` is nan: one inf or nan in a chunk would reach
the outputs of the chunk's earlier tokens and of the other sequences packed
in it, and, through the chunk's state, every later chunk (seen: a nan at
token 40 of ``cu_seqlens=[0, 36, 48]``, chunk 16, made tokens 32-35 of
sequence 0 nan).  The recurrence token by token has none of this: its reset
at a sequence start is a selection (:mod:`._reference`).  So:

1. the chunked scan runs with every non-finite entry of ``x``, ``B``, ``C``,
   ``initial_states`` and the processed ``dt``, and every nan or ``+inf``
   decay ``dt A``, taken as zero (:func:`bad_tokens` finds them,
   :func:`finite_or_zero` replaces them), so that its outputs are finite and
   each sequence's depend on its own tokens only;
2. every (row, head, sequence) that holds such an entry, or whose outputs or
   states still come out non-finite (an overflow), is computed again by the
   recurrence, in float64, on that sequence's tokens alone, and written over
   (:func:`repair`).

A decay ``exp(dt A)`` that is exactly zero (``A = -inf``, or ``dt A`` below
``_cpu.CUT_BELOW``) is not such an entry: the chunked scans cut the
head's run there, as a sequence start does, and stay exact.

``method='fused'`` does step 1 only when its first pass flags something
(:func:`._cpu.prep` and :func:`._cpu.finish` flag as they go), so
finite inputs cost one comparison per output; ``method='ops'`` checks its
inputs first, so that the gradients of the other sequences never meet a nan
either (gradients through the recomputed sequences are the recurrence's).
The recomputation is a Python loop over the sequence's tokens, all the
sequence's bad heads at once.  Measured (float32, one row of 2048 tokens in
three sequences, chunk 64, the 2-core machine shared with other work), a
nan at one token of the 800-token sequence: with 32 heads x 64 x 128
states, in every head, 1.4 s against 0.13 s for finite inputs (1.1 ms a
token); in one head, 0.23 s against 0.08 s.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from propopt.arrays import array_module

from . import _reference


def processed_dt(dt: Any, dt_bias: Any, softplus: bool, dt_limit: tuple[float, float]) -> Any:
    """``clamp(softplus(dt + dt_bias), *dt_limit)`` as the scans compute it (nan stays nan)."""
    xp = array_module(dt)
    d = dt if dt_bias is None else dt + dt_bias
    if softplus:
        d = xp.where(d <= 20, xp.log1p(xp.exp(xp.clip(d, None, 20))), d)
    return xp.clip(d, dt_limit[0], dt_limit[1])


def bad_tokens(x: Any, dtp: Any, A: Any, B: Any, C: Any, h0: Any, starts: Any) -> Any:
    """(batch, seqlen, nheads) bool: the tokens of a head whose inputs are not all finite.

    ``dtp``: the processed ``dt``; a decay ``dt A`` that is nan or ``+inf``
    counts (``-inf`` does not: the decay is zero).  A non-finite initial
    state counts at token 0 of the heads it belongs to, unless a sequence
    starts there (then it is dropped).
    """
    xp = array_module(x)
    H = x.shape[2]
    hg = H // B.shape[2]
    if xp is np:
        la = dtp.astype(np.float64) * A.astype(np.float64)
        groups = np.isfinite(B).all(-1) & np.isfinite(C).all(-1)
        per_head = np.repeat(groups, hg, axis=2)
    else:
        la = dtp.detach().double() * A.detach().double()
        groups = xp.isfinite(B.detach()).all(-1) & xp.isfinite(C.detach()).all(-1)
        per_head = groups.repeat_interleave(hg, dim=2)
        x, dtp = x.detach(), dtp.detach()
    ok = xp.isfinite(x).all(-1) & xp.isfinite(dtp) & ~xp.isnan(la) & (la != np.inf) & per_head
    if h0 is not None:
        good0 = xp.isfinite(h0 if xp is np else h0.detach()).reshape(*h0.shape[:2], -1).all(-1)
        ok[:, 0] &= good0 | starts[:, 0, None]
    return ~ok


def finite_or_zero(v: Any) -> Any:
    """``v`` with its infs and nans replaced by zeros (``v`` itself if it has none)."""
    if v is None:
        return None
    xp = array_module(v)
    fin = xp.isfinite(v)
    return v if bool(fin.all()) else xp.where(fin, v, 0.0)


def nonfinite_outputs(y: Any, final: Any, varlen: Any, cu: Any) -> Any:
    """(batch, seqlen, nheads) bool: the tokens whose output is not finite.

    Also the last token of a row whose final state, and of a sequence whose
    returned state, is not finite.
    """
    xp = array_module(y)
    if xp is np:
        fin = np.isfinite(y).all(-1)
        fin_final = np.isfinite(final).reshape(*final.shape[:2], -1).all(-1)
    else:
        y, final = y.detach(), final.detach()
        fin = xp.isfinite(y).all(-1)
        fin_final = xp.isfinite(final).flatten(2).all(-1)
    out = ~fin
    out[:, -1] |= ~fin_final
    if varlen is not None:
        fin_v = xp.isfinite(varlen if xp is np else varlen.detach())
        fin_v = fin_v.reshape(*varlen.shape[:2], -1).all(-1)
        for s, (a, e) in enumerate(itertools.pairwise(cu)):
            if e > a:
                out[0, int(e) - 1] |= ~fin_v[s]
    return out


def repair(y: Any, final: Any, varlen: Any, bad: Any, args: dict[str, Any], softplus: bool,
           dt_limit: tuple[float, float], starts: Any,
           cu: Any) -> tuple[Any, Any, Any]:  # fmt: skip
    """Recompute, by the recurrence in float64, every (row, head, sequence) with a bad token.

    ``bad`` (batch, seqlen, nheads) bool; ``args`` the scan's arguments in
    the compute dtype (as :func:`.ssd_scan` passes them to a method);
    ``starts`` (batch, seqlen) bool; ``cu`` the ``cu_seqlens`` whose states
    ``varlen`` holds, or None.  Returns ``(y, final, varlen)``, written over
    (torch: new tensors, so that autograd sees the recurrence there).
    """
    xp = array_module(y)
    bad_np = bad if xp is np else bad.cpu().numpy()
    if not bad_np.any():
        return y, final, varlen
    st = starts if xp is np else starts.cpu().numpy()
    if xp is not np:
        y, final = y.clone(), final.clone()
        varlen = None if varlen is None else varlen.clone()
    nb, L, _ = bad_np.shape
    for b in range(nb):
        bounds = [0, *(np.flatnonzero(st[b, 1:]) + 1).tolist(), L]
        for s0, s1 in itertools.pairwise(bounds):
            heads = np.flatnonzero(bad_np[b, s0:s1].any(0))
            if not len(heads):
                continue
            idx = heads if xp is np else xp.from_numpy(heads).to(y.device)
            use_h0 = s0 == 0 and not st[b, 0]
            ys, last = _recurrence(args, b, s0, s1, idx, use_h0, softplus, dt_limit)
            y[b, s0:s1][:, idx] = ys.astype(y.dtype) if xp is np else ys.to(y.dtype)
            last = last.astype(final.dtype) if xp is np else last.to(final.dtype)
            if s1 == L:
                final[b, idx] = last
            if varlen is not None:
                varlen[int(np.searchsorted(cu, s1)) - 1, idx] = last
    return y, final, varlen


def _recurrence(a: dict[str, Any], b: int, s0: int, s1: int, idx: Any, use_h0: bool,
                softplus: bool, dt_limit: tuple[float, float]) -> tuple[Any, Any]:  # fmt: skip
    """Outputs (s1 - s0, heads, headdim) and last state (heads, headdim, dstate) of heads
    ``idx`` of row ``b`` over tokens ``[s0, s1)``, from zero or the initial state."""
    x = a["x"]
    xp = array_module(x)
    H, G = x.shape[2], a["B"].shape[2]
    groups = idx // (H // G)

    def f64(v: Any) -> Any:
        if v is None:
            return None
        return v.astype(np.float64) if xp is np else v.to(xp.float64)

    def tok(v: Any, cols: Any) -> Any:  # row b, tokens s0..s1, the given heads or groups
        return None if v is None else f64(v[b : b + 1, s0:s1][:, :, cols])

    def head(v: Any) -> Any:
        return None if v is None else f64(v[idx])

    h0 = a["initial_states"]
    h0 = f64(h0[b : b + 1][:, idx]) if use_h0 and h0 is not None else None
    with np.errstate(all="ignore"):  # overflow and nan are the point here
        ys, last, _ = _reference.ssd_reference(
            tok(x, idx), tok(a["dt"], idx), head(a["A"]), tok(a["B"], groups),
            tok(a["C"], groups), head(a["D"]), tok(a["z"], idx), head(a["dt_bias"]),
            softplus, dt_limit, h0)  # fmt: skip
    return ys[0], last[0]
