"""numba kernels of the chunked SSD scan: everything except the matrix products.

Notation (per batch row ``b`` and head ``h``; tokens ``t``; chunks of ``Q``
tokens)::

    dt_t  = clamp(softplus(dt_t + dt_bias))          (as mamba_ssm's kernel)
    cs_t  = sum of dt_s A over s in (r, t], r the last reset before t
            (a chunk start or a sequence start), in float64
    decay from token j to token i of one run:  exp(cs_i - cs_j)

A *run* is a maximal stretch of tokens inside one chunk with no sequence
start after its first token; two tokens of a chunk interact only when they
are in the same run.  A token whose decay ``exp(dt A)`` is exactly zero
(``dt A`` below :data:`CUT_BELOW`, ``-inf`` included) *cuts* its head's run
there: ``cs`` restarts at it, as at a sequence start, so that no two
infinities are ever subtracted (``-inf - -inf`` is nan, where the
recurrence has ``exp(-inf) = 0``).

Per chunk ``c`` and head ``h`` the scan needs (:mod:`._host` runs the
matrix products over all heads at once)::

    y_i = e_i (C_i H_{c-1}) + sum_{j <= i, same run} (C_i . B_j) exp(cs_i - cs_j) dt_j x_j
    H_c = a_c H_{c-1} + sum_j w_j x_j B_j^T

with ``e_i = exp(cs_i)`` on the tokens the carry reaches (before the
chunk's first sequence start and the head's first cut; 0 after),
``a_c = exp(cs_end)`` (0 if the chunk holds a start or a cut) and
``w_j = exp(cs_end - cs_j) dt_j`` on the chunk's last run (0 before it).

**The intra-chunk term** (:func:`finish`) is the only per-head product.
It goes by tiles of ``R`` rows starting at ``i0``: for ``j < i0`` the decay
factors through the tile's first row,

    exp(cs_i - cs_j) = exp(cs_i - cs_i0) exp(cs_i0 - cs_j),

so the tile is ``u_i sum_j (C B^T)_ij (v_j x_j)`` with the head-independent
``C B^T`` read as it is, and only the ``R x R`` triangle at the diagonal
takes an ``exp`` per entry.  When every decay of the (chunk, head) is at
most 1 (``dt A <= 0``: ``cs`` never increases inside a run) both factors
are at most 1 and nothing overflows; otherwise (``A > 0``, or negative
``dt`` with ``dt_limit`` allowing them) the tile's coefficients are built
one ``exp(cs_i - cs_j)`` each.  The products run in :func:`._tile.tile`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .._compute import FASTMATH
from .._exp import fexp
from ._tile import ROWS, epilogue, tile

#: numba keys its on-disk cache on this file only: change this line when
#: editing what the kernels compile in from ``_exp``, ``_lanes`` or ``_tile``.
DEPENDS_ON = "_tile: tile, epilogue + loops (R x 4 vector accumulators); _exp: fexp"

#: Whether (chunk, head) pairs whose decays are all at most 1 use the
#: factored decays (one ``exp`` per token and tile; see the module).  False
#: builds every coefficient with its own ``exp`` (the path of ``A > 0``).
FACTORED = True

#: Decays ``exp(cs_i - cs_j)`` below ``exp(DECAY_FLOOR)`` (2^-64 in float32,
#: 2^-512 in float64) count as 0: such a term changes an output or a state
#: by less than 2^-64 of what the same token gives undecayed, and it keeps
#: subnormal numbers out of the products, where each one costs a microcode
#: assist (seen: the state products of a Mamba2-130m layer, whose decays
#: reach exp(-240) in one token, at 7-11 GFLOP/s against 90-115 without).
DECAY_FLOOR = {
    np.dtype(np.float32): -64 * math.log(2.0),
    np.dtype(np.float64): -512 * math.log(2.0),
}

#: A token's decay ``exp(dt A)`` counts as exactly zero (a cut) when ``dt A``
#: (in float64) is below this: ``exp(-746)`` is 0 in float64 (its smallest
#: subnormal is ``exp(-744.4)``), so the cut changes nothing but the rounding
#: of ``cs`` after it.  One comparison, the same in numba, NumPy and torch.
CUT_BELOW = -746.0


@njit(cache=True)
def is_cut(la):  # type: ignore[no-untyped-def]
    """``exp(la)`` is zero: ``la`` (float64) below :data:`CUT_BELOW`; False for nan."""
    return la < CUT_BELOW


def as_dtype_of(x: float, like: float) -> float:
    """``x`` converted to the float type of ``like`` (in numba code)."""
    return x


@overload(as_dtype_of)
def _as_dtype_of_impl(x, like):  # type: ignore[no-untyped-def]
    if isinstance(like, types.Float) and like.bitwidth == 32:
        return lambda x, like: np.float32(x)
    return lambda x, like: np.float64(x)


@njit(fastmath=FASTMATH, cache=True)
def _softplus(v):  # type: ignore[no-untyped-def]
    # mamba_ssm's threshold: softplus(v) = v above 20.
    return math.log1p(fexp(v)) if v <= 20.0 else v


@njit(cache=True)
def _normal(v, tiny):  # type: ignore[no-untyped-def]
    # flush to zero below the smallest normal number (as fexp does)
    return v if abs(v) >= tiny or v != v else 0.0


@njit(cache=True)
def _decay64(d, floor):  # type: ignore[no-untyped-def]
    """``exp(d)`` in float64, 0 below :data:`DECAY_FLOOR` (``floor``)."""
    return math.exp(d) if d >= floor else 0.0


@njit(fastmath=FASTMATH, cache=True)
def _decay(d, floor, one):  # type: ignore[no-untyped-def]
    """``fexp(d)`` (``d`` float64) in the dtype of ``one``, 0 below ``floor``."""
    return fexp(as_dtype_of(d, one)) if d >= floor else one - one


@njit(parallel=True, cache=True)
def prep(dt, A, bias, softplus, lo, hi, starts, run0, first, Q, factored, tiny, floor, x, wx,
         dtp, cs, e, a, mono, bad):  # type: ignore[no-untyped-def]  # fmt: skip
    """Processed ``dt``, chunk-local ``cs``, the decays, and the state products' right operand.

    ``dt`` (b, l, h); ``starts`` (b, l) uint8, 1 where a sequence starts;
    ``run0[b, t]`` the first token of ``t``'s run; ``first[b, c]`` the offset of
    the chunk's first sequence start (``Q`` if none).  Writes ``dtp``, ``cs``
    (b, h, l) (``cs`` in float64, restarting at every chunk and sequence
    start, and at every cut of the head); ``wx[b, t, h] = w x[b, t, h]``
    (b, l, h, p) with the state weights ``w`` and ``e`` (b, l, h), the
    carry's reach (see the module); and per (b, c, h) the chunk's decay
    ``a``, ``mono`` (1: every decay at most 1 and ``factored``) and ``bad``.
    Parallel over (b, c), every head of a token in turn (rows of ``x`` and
    ``wx`` contiguous).

    A processed ``dt`` that is not finite, or a decay ``dt A`` that is nan or
    ``+inf``, is taken as 0 here (so that it reaches no other token) and
    flagged in ``bad``: the caller recomputes its sequence
    (:mod:`._nonfinite`).  The decays are evaluated in float64 and
    rounded once, those below ``exp(floor)`` taken as 0 (:data:`DECAY_FLOOR`);
    a weight ``w`` below ``tiny`` (the dtype's smallest normal number) is
    taken as 0, as :func:`._exp.fexp` takes its results.
    """
    nb, L, H = dt.shape
    nck = a.shape[1]
    P = x.shape[3]
    for task in prange(nb * nck):
        b = task // nck
        c = task - b * nck
        t0 = c * Q
        t1 = min(t0 + Q, L)
        acc = np.zeros(H)
        cut = np.full(H, -1, np.int64)  # each head's last cut in the chunk
        cut0 = np.full(H, t1, np.int64)  # and its first
        flagged = np.zeros(H, np.bool_)
        grows = np.zeros(H, np.bool_)
        for t in range(t0, t1):
            st = starts[b, t]
            for h in range(H):
                if st:
                    acc[h] = 0.0
                v = dt[b, t, h] + bias[h]
                if softplus:
                    v = _softplus(v)
                # min/max written out so that NaN stays NaN
                v = lo if v < lo else v
                v = hi if v > hi else v
                la = np.float64(v) * np.float64(A[h])
                if not (math.isfinite(v) and la < np.inf):  # nan or inf dt, nan or +inf dt A
                    flagged[h] = True
                    v = as_dtype_of(0.0, v)
                    la = 0.0
                dtp[b, h, t] = v
                grows[h] |= la > 0.0
                if is_cut(la):
                    acc[h] = 0.0
                    cut[h] = t
                    cut0[h] = min(cut0[h], t)
                else:
                    acc[h] += la
                cs[b, h, t] = acc[h]
        jl = np.empty(H, np.int64)
        reach = np.empty(H, np.int64)
        end = np.empty(H)
        for h in range(H):
            bad[b, c, h] = flagged[h]
            mono[b, c, h] = factored and not grows[h]
            end[h] = cs[b, h, t1 - 1]
            a[b, c, h] = _decay64(end[h], floor) if first[b, c] >= t1 - t0 and cut[h] < 0 else 0.0
            jl[h] = max(run0[b, t1 - 1], cut[h])  # the head's last run
            reach[h] = min(t0 + first[b, c], cut0[h])  # the carry's: tokens before it
        for t in range(t0, t1):
            for h in range(H):
                cst = cs[b, h, t]
                wt = _normal(_decay64(end[h] - cst, floor) * dtp[b, h, t], tiny)
                wt = wt if t >= jl[h] else 0.0
                e[b, t, h] = _decay64(cst, floor) if t < reach[h] else 0.0
                src = x[b, t, h]
                dst = wx[b, t, h]
                for p in range(P):
                    dst[p] = src[p] * wt


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def pass_states(S, a, h0, final):  # type: ignore[no-untyped-def]
    """Carry scan over chunks, ``H_c = a_c H_{c-1} + S_c``, in place.

    ``S`` (b, g, c, n, hg p) holds each chunk's state from zero and is
    overwritten with ``H_{c-1}``, the state entering chunk ``c``; ``a``
    (b, c, h); ``h0`` and ``final`` (b, h, p, n), the states before and after
    the sequence.  Parallel over (b, g, n).
    """
    nb, G, nck, N, W = S.shape
    H = a.shape[2]
    hg = H // G
    P = W // hg
    for task in prange(nb * G * N):
        b = task // (G * N)
        r = task - b * (G * N)
        g = r // N
        n = r - g * N
        st = np.empty(W, dtype=S.dtype)
        for hh in range(hg):
            for p in range(P):
                st[hh * P + p] = h0[b, g * hg + hh, p, n]
        for c in range(nck):
            row = S[b, g, c, n]
            for hh in range(hg):
                ac = a[b, c, g * hg + hh]
                for p in range(P):
                    k = hh * P + p
                    cur = row[k]
                    row[k] = st[k]
                    st[k] = ac * st[k] + cur
        for hh in range(hg):
            for p in range(P):
                final[b, g * hg + hh, p, n] = st[hh * P + p]


@njit(fastmath=FASTMATH, cache=True)
def _head_tile(b, c, h, t0, i0, R, Lc, cs, dtp, j0, s, fac, one, floor, v, u, Dm, Mt, ones,
               xf, yf, xo, HP, P):  # type: ignore[no-untyped-def]  # fmt: skip
    """Rows ``i0 .. i0 + R`` of one (chunk, head): ``y = s y + intra`` (see :func:`finish`)."""
    zero = one - one
    jlo = j0[0]
    yo = xo + i0 * HP
    if fac:
        # off the diagonal: exp(cs_i - cs_i0) exp(cs_i0 - cs_j), both <= 1
        csr = cs[b, h, t0:]
        dtr = dtp[b, h, t0:]
        ci0 = csr[i0]
        for j in range(jlo, i0):
            v[j] = _decay(ci0 - csr[j], floor, one) * dtr[j]
        for k in range(R):
            u[k] = _decay(csr[i0 + k] - ci0, floor, one) if j0[k] <= i0 else zero
        tile(R, Lc, i0, 0, jlo, i0, v, 0, xf, xo, HP, u, yf, yo, HP, s, P)
        # the diagonal triangle: one exp per entry
        for k in range(R):
            i = i0 + k
            ci = csr[i]
            for m in range(R):
                j = i0 + m
                if j0[k] <= j <= i:
                    Dm[k, m] = Lc[i, j] * _decay(ci - csr[j], floor, one) * dtr[j]
                else:
                    Dm[k, m] = zero
            u[k] = one
            s[k] = one
        tile(R, Dm, 0, -i0, i0, i0 + R, ones, -i0, xf, xo, HP, u, yf, yo, HP, s, P)
    else:
        # every coefficient selected and exponentiated (decays above 1 allowed)
        csr = cs[b, h, t0:]
        dtr = dtp[b, h, t0:]
        for k in range(R):
            i = i0 + k
            ci = csr[i]
            for j in range(jlo, i0 + R):
                if j0[k] <= j <= i:
                    Mt[k, j] = Lc[i, j] * _decay(ci - csr[j], floor, one) * dtr[j]
                else:
                    Mt[k, j] = zero
            u[k] = one
        tile(R, Mt, 0, 0, jlo, i0 + R, ones, 0, xf, xo, HP, u, yf, yo, HP, s, P)


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def finish(y, x, z, has_z, has_d, Dv, CB, cs, dtp, A, run0, e, mono, Q, one, floor, nonfinite):  # type: ignore[no-untyped-def]
    """``y = (e y + intra + D x) silu(z)`` in place; flags tokens with an inf or nan.

    On entry ``y[b, t, h]`` holds ``C_t H_{c-1}`` (the carried state's
    output); ``CB[b, g, c]`` (Q, Q) is ``C B^T`` of the chunk (its first
    ``Qc x Qc`` for a shorter last chunk).  Parallel over (b, c); each task
    goes by tiles of :data:`._tile.ROWS` rows, every head of a tile in
    turn, so that the rows of ``x``, ``y`` and ``z`` it reads are contiguous
    (per head, rows lie ``H P`` numbers apart, which the hardware prefetchers
    do not follow).  ``nonfinite[b, t, h]``: 1 where ``y[b, t, h]`` holds an
    inf or nan, else 0.
    """
    nb, L, H, P = y.shape
    G = CB.shape[1]
    hg = H // G
    nck = -(-L // Q)
    HP = H * P
    yf = y.reshape(-1)
    xf = x.reshape(-1)
    zf = z.reshape(-1)
    Df = Dv.reshape(-1)
    for task in prange(nb * nck):
        b = task // nck
        c = task - b * nck
        t0 = c * Q
        Qc = min(Q, L - t0)
        v = np.empty(Q, y.dtype)
        ones = np.empty(Q, y.dtype)
        for j in range(Q):
            ones[j] = one
        u = np.empty(ROWS, y.dtype)
        s = np.empty(ROWS, y.dtype)
        j0 = np.empty(ROWS, np.int64)
        Dm = np.zeros((ROWS, ROWS), y.dtype)
        Mt = np.empty((ROWS, Q), y.dtype)
        jc = np.full(H, -1, np.int64)  # each head's last cut at or before the row
        i0 = np.int64(0)  # not the literal 0: numba would compile _head_tile for it apart
        while i0 < Qc:
            R = min(ROWS, Qc - i0)
            for h in range(H):
                ah = np.float64(A[h])
                for k in range(R):
                    i = i0 + k
                    if is_cut(np.float64(dtp[b, h, t0 + i]) * ah):  # as prep finds it
                        jc[h] = i
                    j0[k] = max(run0[b, t0 + i] - t0, jc[h])  # row i's run starts there
                    s[k] = e[b, t0 + i, h]
                xo = (b * L + t0) * HP + h * P
                _head_tile(b, c, h, t0, i0, R, CB[b, h // hg, c], cs, dtp, j0, s, mono[b, c, h],
                           one, floor, v, u, Dm, Mt, ones, xf, yf, xo, HP, P)  # fmt: skip
            for k in range(R):
                t = t0 + i0 + k
                for h in range(H):
                    ro = (b * L + t) * HP + h * P
                    nan = epilogue(yf, ro, xf, ro, Df, h * P if has_d else 0, zf, P, has_d,
                                   has_z)  # fmt: skip
                    nonfinite[b, t, h] = nan != nan
            i0 += R
