"""numba kernels for the layer around the scan, used by :mod:`.hf`.

transformers' Mamba mixers run, around the scan, a causal depthwise conv1d,
its SiLU and the padding mask as separate torch operations in prefill, and
about thirty small torch operations per layer for one decoded token.  Here:

* :func:`conv_silu`: the causal depthwise conv1d (kernel ``K``), its bias,
  the SiLU and the padding mask in one pass over token-major
  ``(batch, T, channels)`` input, written straight into up to three outputs
  (Mamba-2 splits the conv's channels into ``x``, ``B`` and ``C``).
* :func:`group_rms_norm`: Mamba-2's grouped RMS norm (the gate is already
  applied by :func:`propopt_case_studies.mamba.ssd_scan`'s ``z``).
* :func:`mamba_token` / :func:`mamba2_token`: one decoded token of a layer
  between ``in_proj`` and ``out_proj``: the conv-state roll and update, the
  conv and its SiLU, (Mamba-1) the ``x_proj`` and ``dt_proj`` products,
  softplus, the state update, ``D``, the gate and (Mamba-2) the grouped RMS
  norm, in one call.
* :func:`mamba_layer_token` / :func:`mamba2_layer_token` /
  :func:`final_logits`: one decoded token of a whole block (the block's
  RMS norm, ``in_proj``, the mixer's token, ``out_proj`` and the residual
  add) and of the model's head (final norm and ``lm_head``), in one call
  each.  The matrix-vector products read each weight row once, rows split
  between threads (:func:`_gemv`): decoding one token reads every weight of
  the model once, so it runs at the memory's read bandwidth.  The mixer's
  own work runs on threads too (Mamba-1: ``x_proj`` and blocks of channels;
  Mamba-2: heads), and ``A = -exp(A_log)`` comes in precomputed.

The SiLU and softplus use the vectorizable ``fexp`` / ``fsoftplus`` of
:mod:`._exp` (``math.exp`` in a numba loop is a scalar libm call, about 25x
slower). Kernels compute in float32 or float64; the caller casts half
precisions to float32.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from propopt import threads

from .._compute import FASTMATH
from .._exp import fexp, fsoftplus

#: numba keys its on-disk cache on this file only: change this line when
#: editing what the kernels compile in from ``_exp``.
DEPENDS_ON = "_exp: fexp, fsoftplus"

# FASTMATH (.._compute), as the scan's kernels: no nnan/ninf, so NaN and inf propagate;
# 'reassoc' vectorizes the dot products and sums (rounding order, not the math).

#: Tokens per task of :func:`conv_silu`: 2048 tokens of one sequence make
#: 64 tasks, enough to balance two to sixteen threads.
CONV_TILE = 32

#: Batch rows from which the decode kernels run rows on parallel threads;
#: below it one serial call (a parallel region costs more than a row).
PARALLEL_ROWS = 4

#: Weight rows per task of :func:`_gemv` (a multiple of 8): 3,072 rows make 96 tasks.
GEMV_ROWS = 32


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _conv_silu(x, wT, bias, mask, has_mask, o1, o2, o3, one, tile):  # type: ignore[no-untyped-def]
    nb, T, C = x.shape
    K = wT.shape[0]
    L = o1.shape[1]
    s1 = o1.shape[2]
    s2 = s1 + o2.shape[2]
    off = T - L  # input position of output token 0
    ntile = (L + tile - 1) // tile
    for job in prange(nb * ntile):
        b = job // ntile
        t0 = (job % ntile) * tile
        t1 = min(t0 + tile, L)
        acc = np.empty(C, x.dtype)
        for t in range(t0, t1):
            p = off + t
            for c in range(C):
                acc[c] = bias[c]
            for k in range(K):
                q = p - (K - 1) + k
                if q >= 0:
                    xr = x[b, q]
                    wr = wT[k]
                    for c in range(C):
                        acc[c] += wr[c] * xr[c]
            m = mask[b, t] if has_mask else one
            r1 = o1[b, t]
            for c in range(s1):
                v = acc[c]
                r1[c] = v / (one + fexp(-v)) * m
            r2 = o2[b, t]
            for c in range(s1, s2):
                v = acc[c]
                r2[c - s1] = v / (one + fexp(-v)) * m
            r3 = o3[b, t]
            for c in range(s2, C):
                v = acc[c]
                r3[c - s2] = v / (one + fexp(-v)) * m


@threads.parallel
def conv_silu(x: np.ndarray, wT: np.ndarray, bias: np.ndarray, mask: np.ndarray | None,
              L: int, splits: tuple[int, ...]) -> list[np.ndarray]:  # fmt: skip
    """``silu(causal_conv1d(x) + bias) * mask`` for the last ``L`` of ``T`` tokens.

    ``x``: (batch, T, C) C-contiguous, float32 or float64; ``wT``: (K, C) the
    depthwise weights transposed; ``bias``: (C,); ``mask``: (batch, L) or
    None.  Output token ``t`` is input position ``T - L + t`` and sees inputs
    ``T - L + t - K + 1 .. T - L + t`` (zeros before position 0), as
    ``F.conv1d(padding=K - 1)[..., :T][..., -L:]``.  Returns contiguous
    (batch, L, c_i) arrays, one per channel range ``splits`` (at most three,
    summing to C).
    """
    nb, _, C = x.shape
    if sum(splits) != C or not 1 <= len(splits) <= 3:
        raise ValueError(f"splits={splits} must be 1 to 3 sizes summing to C={C}")
    outs = [np.empty((nb, L, s), x.dtype) for s in splits]
    outs += [np.empty((nb, L, 0), x.dtype)] * (3 - len(outs))
    m = np.ones((1, 1), x.dtype) if mask is None else mask
    _conv_silu(x, wT, bias, m, mask is not None, outs[0], outs[1], outs[2], x.dtype.type(1),
               CONV_TILE)  # fmt: skip
    return outs[: len(splits)]


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _group_rms_norm(y, w, eps, gsize, inv_g, out, one):  # type: ignore[no-untyped-def]
    M, Di = y.shape
    G = Di // gsize
    zero = one - one
    for i in prange(M):
        yr = y[i]
        orow = out[i]
        for g in range(G):
            a = g * gsize
            s = zero
            for j in range(a, a + gsize):
                s += yr[j] * yr[j]
            r = one / math.sqrt(s * inv_g + eps)
            for j in range(a, a + gsize):
                orow[j] = w[j] * (yr[j] * r)


@threads.parallel
def group_rms_norm(y: np.ndarray, w: np.ndarray, eps: float, gsize: int,
                   out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``w * y / sqrt(mean(y^2 over each group of gsize channels) + eps)``; ``y``: (M, Di).

    ``out``: where to write it (``y`` itself works: each row is read before it
    is written).  A fresh 12 MiB result per call (a 2048-token Mamba2-130m
    layer) was faulted in page by page: 5.4 ms a layer against 1.5 ms.
    """
    if out is None:
        out = np.empty_like(y)
    t = y.dtype.type
    _group_rms_norm(y, w, t(eps), gsize, t(1.0 / gsize), out, t(1))
    return out


@njit(fastmath=FASTMATH, cache=True)
def _conv_token(b, xin, x0, cs, cw, cb, xbuf, one):  # type: ignore[no-untyped-def]
    """Roll the conv state of row ``b`` by one token (channels of ``xin[b, x0:]``); SiLU out."""
    C = cs.shape[1]
    K = cs.shape[2]
    for c in range(C):
        acc = cb[c] * one
        for k in range(K - 1):
            v = cs[b, c, k + 1]
            cs[b, c, k] = v
            acc += cw[c, k] * v
        xn = xin[b, x0 + c]
        cs[b, c, K - 1] = xn
        acc += cw[c, K - 1] * xn
        xbuf[c] = acc / (one + fexp(-acc))


@njit(fastmath=FASTMATH, cache=True)
def _mamba_channels(b, c0, c1, xz, Wdt, dtb, A, D, h, y, xbuf, dbl, dv, gv, one):  # type: ignore[no-untyped-def]
    """Channels ``c0:c1`` of row ``b`` after ``x_proj``: ``dt_proj``, softplus, state, gate.

    In passes over the channels, each a vector loop: ``dt`` (into ``dv``), its
    softplus, the gate ``silu(z)`` (into ``gv``), then the state update
    (vectorized over the state); a loop doing all of it per channel ran the
    softplus and the SiLU one channel at a time, 4x slower.
    """
    Di = Wdt.shape[0]
    R = Wdt.shape[1]
    N = A.shape[1]
    zero = one - one
    for c in range(c0, c1):  # dt_proj
        wr = Wdt[c]
        acc = zero
        for r in range(R):
            acc += wr[r] * dbl[r]
        dv[c] = acc + dtb[c]
    for c in range(c0, c1):
        dv[c] = fsoftplus(dv[c])
    for c in range(c0, c1):
        zc = xz[b, Di + c]
        gv[c] = zc / (one + fexp(-zc))
    for c in range(c0, c1):
        d = dv[c]
        xc = xbuf[c]
        s = zero
        for n in range(N):
            hv = fexp(d * A[c, n]) * h[b, c, n] + (d * dbl[R + n]) * xc
            h[b, c, n] = hv
            s += hv * dbl[R + N + n]
        y[b, c] = (s + D[c] * xc) * gv[c]


@njit(fastmath=FASTMATH, cache=True)
def _mamba_row(b, xz, cs, cw, cb, Wx, Wdt, dtb, A, D, h, y, xbuf, dbl, dv, gv, one):  # type: ignore[no-untyped-def]
    Di = cs.shape[1]
    zero = one - one
    _conv_token(b, xz, 0, cs, cw, cb, xbuf, one)
    for j in range(Wx.shape[0]):  # x_proj
        wr = Wx[j]
        acc = zero
        for c in range(Di):
            acc += wr[c] * xbuf[c]
        dbl[j] = acc
    _mamba_channels(b, 0, Di, xz, Wdt, dtb, A, D, h, y, xbuf, dbl, dv, gv, one)


#: Channels per task of the Mamba-1 mixer's token on threads (1,536 make 24).
MIXER_CHANNELS = 64


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _mamba_channels_par(b, xz, Wdt, dtb, A, D, h, y, xbuf, dbl, dv, gv, one):  # type: ignore[no-untyped-def]
    """:func:`_mamba_channels` for every channel of row ``b``, channel blocks on threads."""
    Di = Wdt.shape[0]
    for task in prange((Di + MIXER_CHANNELS - 1) // MIXER_CHANNELS):
        c0 = task * MIXER_CHANNELS
        _mamba_channels(b, c0, min(Di, c0 + MIXER_CHANNELS), xz, Wdt, dtb, A, D, h, y,
                        xbuf, dbl, dv, gv, one)  # fmt: skip


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _mamba_rows(xz, cs, cw, cb, Wx, Wdt, dtb, A, D, h, y, xbuf, dbl, dv, gv, one):  # type: ignore[no-untyped-def]
    for b in prange(xz.shape[0]):
        _mamba_row(b, xz, cs, cw, cb, Wx, Wdt, dtb, A, D, h, y, xbuf[b], dbl[b], dv[b], gv[b],
                   one)  # fmt: skip


def mamba_token(xz: np.ndarray, cs: np.ndarray, cw: np.ndarray, cb: np.ndarray, Wx: np.ndarray,
                Wdt: np.ndarray, dtb: np.ndarray, A: np.ndarray, D: np.ndarray,
                h: np.ndarray) -> np.ndarray:  # fmt: skip
    """One token of a Mamba-1 mixer from ``in_proj``'s output to ``out_proj``'s input.

    ``xz`` (batch, 2 Di): ``x`` then the gate ``z``; ``cs`` (batch, Di, K) the
    conv state and ``h`` (batch, Di, N) the SSM state, both updated in place;
    ``cw`` (Di, K), ``cb`` (Di,) the conv; ``Wx`` (R + 2N, Di) ``x_proj``;
    ``Wdt`` (Di, R), ``dtb`` (Di,) ``dt_proj``; ``A`` (Di, N) (``-exp(A)``);
    ``D`` (Di,).
    Returns ``y`` (batch, Di): ``(C . h + D x) silu(z)``.
    """
    nb, Di = xz.shape[0], cs.shape[1]
    y = np.empty((nb, Di), xz.dtype)
    one = xz.dtype.type(1)
    xbuf = np.empty((nb, Di), xz.dtype)
    dbl = np.empty((nb, Wx.shape[0]), xz.dtype)
    dv, gv = np.empty((2, nb, Di), xz.dtype)
    if nb < PARALLEL_ROWS:
        for b in range(nb):
            _mamba_row(b, xz, cs, cw, cb, Wx, Wdt, dtb, A, D, h, y, xbuf[b], dbl[b], dv[b],
                       gv[b], one)  # fmt: skip
    else:
        with threads.sized():
            _mamba_rows(xz, cs, cw, cb, Wx, Wdt, dtb, A, D, h, y, xbuf, dbl, dv, gv, one)
    return y


@njit(fastmath=FASTMATH, cache=True)
def _mamba2_head(b, hh, zxbcdt, A, D, dtb, h, G, out, xbuf, one):  # type: ignore[no-untyped-def]
    """The state update and output of head ``hh`` of row ``b`` (after the conv)."""
    _, H, P, N = h.shape
    Di = H * P
    conv_dim = xbuf.shape[0]
    zero = one - one
    g = hh // (H // G)
    b0 = Di + g * N
    c0 = Di + G * N + g * N
    d = fsoftplus(zxbcdt[b, Di + conv_dim + hh] + dtb[hh])
    dA = fexp(d * A[hh])
    for p in range(P):
        xv = xbuf[hh * P + p]
        s = zero
        for n in range(N):
            hv = h[b, hh, p, n] * dA + (d * xbuf[b0 + n]) * xv
            h[b, hh, p, n] = hv
            s += hv * xbuf[c0 + n]
        s += D[hh] * xv
        gv = zxbcdt[b, hh * P + p]
        out[b, hh * P + p] = s * (gv / (one + fexp(-gv)))


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _mamba2_heads(b, zxbcdt, A, D, dtb, h, G, out, xbuf, one):  # type: ignore[no-untyped-def]
    """:func:`_mamba2_head` for every head of row ``b``, heads on threads (batch 1 decode)."""
    for hh in prange(h.shape[1]):
        _mamba2_head(b, hh, zxbcdt, A, D, dtb, h, G, out, xbuf, one)


@njit(fastmath=FASTMATH, cache=True)
def _group_norm_row(b, out, nw, eps, inv_g, G, one):  # type: ignore[no-untyped-def]
    Di = out.shape[1]
    zero = one - one
    gsize = Di // G
    for g in range(G):
        a = g * gsize
        s = zero
        for j in range(a, a + gsize):
            s += out[b, j] * out[b, j]
        r = one / math.sqrt(s * inv_g + eps)
        for j in range(a, a + gsize):
            out[b, j] = nw[j] * (out[b, j] * r)


@njit(fastmath=FASTMATH, cache=True)
def _mamba2_row(b, zxbcdt, cs, cw, cb, A, D, dtb, h, nw, eps, inv_g, G, out, xbuf, one):  # type: ignore[no-untyped-def]
    Di = h.shape[1] * h.shape[2]
    _conv_token(b, zxbcdt, Di, cs, cw, cb, xbuf, one)
    for hh in range(h.shape[1]):
        _mamba2_head(b, hh, zxbcdt, A, D, dtb, h, G, out, xbuf, one)
    _group_norm_row(b, out, nw, eps, inv_g, G, one)


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _mamba2_rows(zxbcdt, cs, cw, cb, A, D, dtb, h, nw, eps, inv_g, G, out, xbuf, one):  # type: ignore[no-untyped-def]
    for b in prange(zxbcdt.shape[0]):
        _mamba2_row(b, zxbcdt, cs, cw, cb, A, D, dtb, h, nw, eps, inv_g, G, out, xbuf[b], one)


def mamba2_token(zxbcdt: np.ndarray, cs: np.ndarray, cw: np.ndarray, cb: np.ndarray,
                 A: np.ndarray, D: np.ndarray, dtb: np.ndarray, h: np.ndarray, nw: np.ndarray,
                 eps: float, G: int) -> np.ndarray:  # fmt: skip
    """One token of a Mamba-2 mixer from ``in_proj``'s output to ``out_proj``'s input.

    ``zxbcdt`` (batch, Di + conv_dim + H): gate, then the conv channels
    (``x``, ``B``, ``C``), then ``dt``; ``cs`` (batch, conv_dim, K) and ``h``
    (batch, H, P, N) updated in place; ``A`` (H,) (``-exp(A)``), ``D``,
    ``dtb`` (H,); ``nw`` (Di,)
    the gated norm's weight, ``G`` its groups (``B`` and ``C`` groups too).
    Returns ``norm((C . h + D x) silu(gate))`` (batch, Di).
    """
    nb = zxbcdt.shape[0]
    _, H, P, _ = h.shape
    out = np.empty((nb, H * P), zxbcdt.dtype)
    one = zxbcdt.dtype.type(1)
    xbuf = np.empty((nb, cs.shape[1]), zxbcdt.dtype)
    e = zxbcdt.dtype.type(eps)
    ig = zxbcdt.dtype.type(G / (H * P))
    if nb < PARALLEL_ROWS:
        for b in range(nb):
            _mamba2_row(b, zxbcdt, cs, cw, cb, A, D, dtb, h, nw, e, ig, G, out, xbuf[b], one)
    else:
        with threads.sized():
            _mamba2_rows(zxbcdt, cs, cw, cb, A, D, dtb, h, nw, e, ig, G, out, xbuf, one)
    return out


# ------------------------------------------------- whole blocks, one token
@njit(fastmath=FASTMATH, cache=True)
def _dot_rows(W, r, x, out, b, bias, accumulate, zero):  # type: ignore[no-untyped-def]
    """``out[b, r + i] (+)= W[r + i] . x + bias[r + i]`` for ``i < 8``, one pass over ``x``."""
    w0, w1, w2, w3 = W[r], W[r + 1], W[r + 2], W[r + 3]
    w4, w5, w6, w7 = W[r + 4], W[r + 5], W[r + 6], W[r + 7]
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = zero
    for j in range(x.shape[0]):
        xj = x[j]
        a0 += w0[j] * xj
        a1 += w1[j] * xj
        a2 += w2[j] * xj
        a3 += w3[j] * xj
        a4 += w4[j] * xj
        a5 += w5[j] * xj
        a6 += w6[j] * xj
        a7 += w7[j] * xj
    sums = (a0, a1, a2, a3, a4, a5, a6, a7)
    for i in range(8):
        v = sums[i] + bias[r + i]
        if accumulate:
            out[b, r + i] += v
        else:
            out[b, r + i] = v


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _gemv(W, bias, x, out, accumulate, one):  # type: ignore[no-untyped-def]
    """``out[b, r] = W[r] . x[b] + bias[r]`` (``+=`` when ``accumulate``), rows on threads.

    Eight rows share one pass over ``x[b]``: eight streams from memory and
    eight independent sums (measured over a token's worth of the 130m
    model's matrices: 8% more read bandwidth than four rows at a time, and
    15% more than one).
    """
    n, k = W.shape
    nb = x.shape[0]
    zero = one - one
    for task in prange((n + GEMV_ROWS - 1) // GEMV_ROWS):
        r0 = task * GEMV_ROWS
        r1 = min(n, r0 + GEMV_ROWS)
        r = r0
        while r + 8 <= r1:
            for b in range(nb):
                _dot_rows(W, r, x[b], out, b, bias, accumulate, zero)
            r += 8
        for rr in range(r, r1):
            wr = W[rr]
            for b in range(nb):
                xb = x[b]
                acc = zero
                for j in range(k):
                    acc += wr[j] * xb[j]
                v = acc + bias[rr]
                if accumulate:
                    out[b, rr] += v
                else:
                    out[b, rr] = v


@njit(fastmath=FASTMATH, cache=True)
def _rms(x, w, eps, out, one):  # type: ignore[no-untyped-def]
    """transformers' ``MambaRMSNorm``: ``w * x / sqrt(mean(x^2) + eps)`` per row."""
    nb, d = x.shape
    zero = one - one
    for b in range(nb):
        s = zero
        for j in range(d):
            s += x[b, j] * x[b, j]
        r = one / math.sqrt(s / d + eps)
        for j in range(d):
            out[b, j] = w[j] * (x[b, j] * r)


@njit(fastmath=FASTMATH, cache=True)
def _mamba_block(hid, nw, eps, Win, bin_, cs, cw, cb, Wx, Wdt, dtb, A, D, h, Wout, bout,
                 hn, xz, y, xbuf, dbl, dv, gv, nobias, one):  # type: ignore[no-untyped-def]  # fmt: skip
    _rms(hid, nw, eps, hn, one)
    _gemv(Win, bin_, hn, xz, False, one)
    for b in range(hid.shape[0]):  # x_proj and the channels on threads
        _conv_token(b, xz, 0, cs, cw, cb, xbuf[b], one)
        _gemv(Wx, nobias, xbuf[b : b + 1], dbl[b : b + 1], False, one)
        _mamba_channels_par(b, xz, Wdt, dtb, A, D, h, y, xbuf[b], dbl[b], dv[b], gv[b], one)
    _gemv(Wout, bout, y, hid, True, one)


@njit(fastmath=FASTMATH, cache=True)
def _mamba2_block(hid, nw, eps, Win, bin_, cs, cw, cb, A, D, dtb, h, gw, geps, inv_g, G,
                  Wout, bout, hn, zx, y, xbuf, one):  # type: ignore[no-untyped-def]  # fmt: skip
    _rms(hid, nw, eps, hn, one)
    _gemv(Win, bin_, hn, zx, False, one)
    Di = h.shape[1] * h.shape[2]
    for b in range(hid.shape[0]):  # heads on threads: a row's state is 0.8 MiB at 130m
        _conv_token(b, zx, Di, cs, cw, cb, xbuf[b], one)
        _mamba2_heads(b, zx, A, D, dtb, h, G, y, xbuf[b], one)
        _group_norm_row(b, y, gw, geps, inv_g, G, one)
    _gemv(Wout, bout, y, hid, True, one)


@njit(fastmath=FASTMATH, cache=True)
def _head(hid, nw, eps, W, bias, hn, logits, one):  # type: ignore[no-untyped-def]
    _rms(hid, nw, eps, hn, one)
    _gemv(W, bias, hn, logits, False, one)


class Scratch:
    """Buffers one decoded token's blocks share (allocated once per token, not per block)."""

    def __init__(self, nb: int, d: int, rows_in: int, inner: int, xwidth: int, dbl: int,
                 dtype: np.dtype) -> None:  # fmt: skip
        self.one = dtype.type(1)
        self.hn = np.empty((nb, d), dtype)
        self.proj = np.empty((nb, rows_in), dtype)
        self.y = np.empty((nb, inner), dtype)
        self.xbuf = np.empty((nb, xwidth), dtype)
        self.dbl = np.empty((nb, dbl), dtype)
        self.nobias = np.zeros(dbl, dtype)
        self.dv = np.empty((nb, inner), dtype)
        self.gv = np.empty((nb, inner), dtype)


def mamba_layer_token(hid: np.ndarray, nw: np.ndarray, eps: float, Win: np.ndarray,
                      bin_: np.ndarray, cs: np.ndarray, cw: np.ndarray, cb: np.ndarray,
                      Wx: np.ndarray, Wdt: np.ndarray, dtb: np.ndarray, A: np.ndarray,
                      D: np.ndarray, h: np.ndarray, Wout: np.ndarray, bout: np.ndarray,
                      s: Scratch) -> None:  # fmt: skip
    """One token through a whole Mamba-1 block, in place: ``hid += out_proj(mixer(norm(hid)))``.

    ``hid`` (batch, d) the residual stream; ``nw``, ``eps`` the block's RMS
    norm; ``Win`` (2 Di, d), ``bin_`` ``in_proj``; ``Wout`` (d, Di), ``bout``
    ``out_proj``; the rest as :func:`mamba_token` (``cs`` and ``h`` updated
    in place).  Run it under :func:`propopt.threads.sized`.
    """
    _mamba_block(hid, nw, hid.dtype.type(eps), Win, bin_, cs, cw, cb, Wx, Wdt, dtb, A, D, h,
                 Wout, bout, s.hn, s.proj, s.y, s.xbuf, s.dbl, s.dv, s.gv, s.nobias,
                 s.one)  # fmt: skip


def mamba2_layer_token(hid: np.ndarray, nw: np.ndarray, eps: float, Win: np.ndarray,
                       bin_: np.ndarray, cs: np.ndarray, cw: np.ndarray, cb: np.ndarray,
                       A: np.ndarray, D: np.ndarray, dtb: np.ndarray, h: np.ndarray,
                       gw: np.ndarray, geps: float, G: int, Wout: np.ndarray, bout: np.ndarray,
                       s: Scratch) -> None:  # fmt: skip
    """One token through a whole Mamba-2 block, in place (see :func:`mamba_layer_token`).

    ``gw``, ``geps``, ``G``: the gated norm's weight, epsilon and groups; the
    mixer's arguments as :func:`mamba2_token`.
    """
    t = hid.dtype.type
    Di = h.shape[1] * h.shape[2]
    _mamba2_block(hid, nw, t(eps), Win, bin_, cs, cw, cb, A, D, dtb, h, gw, t(geps),
                  t(G / Di), G, Wout, bout, s.hn, s.proj, s.y, s.xbuf, s.one)  # fmt: skip


def final_logits(hid: np.ndarray, nw: np.ndarray, eps: float, W: np.ndarray,
                 bias: np.ndarray, s: Scratch) -> np.ndarray:  # fmt: skip
    """``lm_head(norm_f(hid))``: (batch, vocab) logits of the last token."""
    logits = np.empty((hid.shape[0], W.shape[0]), hid.dtype)
    _head(hid, nw, hid.dtype.type(eps), W, bias, s.hn, logits, s.one)
    return logits
