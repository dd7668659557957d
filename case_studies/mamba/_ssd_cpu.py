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
recurrence has ``exp(-inf) = 0``), and a (chunk, head) holding a cut takes
the explicit mask, which selects zero across it.

**Separability of the mask.**  Inside a run the decay is a product,
``exp(cs_i - cs_j) = u_i v_j`` with ``u_i = exp(cs_i - r)`` and
``v_j = exp(r - cs_j)`` for any centre ``r``: the semiseparable mask has
rank one.  So the chunk's output for all heads at once is one GEMM,

    y_c = u o ( [ (C_c B_c^T) o mask | C_c o carry ] @ [ v dt o X_c ; e^r H_{c-1} ] )

with a head-independent left operand (``mask``: same run, ``j <= i``;
``carry``: tokens before the chunk's first sequence start) and the per-head
scalings moved into the right operand and the output.  ``u`` and ``v`` stay
inside float range when the chunk's range of ``cs`` is at most
:data:`SEPARABLE_RANGE`; a (chunk, head) beyond it is *unsafe* and computed
from the explicit mask ``exp(cs_i - cs_j)`` instead (:func:`pair_operands`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from ._exp import fexp

# No nnan/ninf: NaN and inf must propagate.
FASTMATH = {"contract", "reassoc", "nsz", "arcp"}

#: Largest range ``max(cs) - min(cs)`` over a chunk for which a head is
#: computed through the rank-one factors ``u_i v_j``.  They then lie in
#: ``[exp(-R/2), exp(R/2)]``: float32 keeps ``exp(40) = 2.4e17`` of headroom
#: below its overflow (3.4e38) for the GEMM's sums; float64 ``exp(300)``.
#: The factors are evaluated in float64 and rounded once (0.5 ulp each).
SEPARABLE_RANGE = {np.dtype(np.float32): 80.0, np.dtype(np.float64): 600.0}

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


@njit(parallel=True, cache=True)
def prep(dt, A, bias, softplus, lo, hi, starts, run0, first, Q, limit,
         dtp, cs, u, vdt, a, s1, er, safe, bad):  # type: ignore[no-untyped-def]  # fmt: skip
    """Processed ``dt``, chunk-local ``cs`` and, per chunk, the factors of its mask.

    ``dt`` (b, l, h); ``starts`` (b, l) uint8, 1 where a sequence starts;
    ``run0[b, t]`` the first token of ``t``'s run; ``first[b, c]`` the offset of
    the chunk's first sequence start (``Q`` if none).  Writes ``dtp``, ``cs``
    (b, h, l) (``cs`` in float64, restarting at every chunk and sequence
    start, and at every cut of the head); ``u``, ``vdt`` (b, l, h); and per
    (b, c, h) the chunk's decay ``a`` (0 if a sequence starts or the head is
    cut in it), ``s1``, ``er``, ``safe`` and ``bad``.

    A processed ``dt`` that is not finite, or a decay ``dt A`` that is nan or
    ``+inf``, is taken as 0 here (so that it reaches no other token) and
    flagged in ``bad``: the caller recomputes its sequence
    (:mod:`._ssd_nonfinite`).

    Safe heads (no cut, range of ``cs`` over the chunk <= ``limit``), centre
    ``r = (min + max) / 2``: ``u_t = exp(cs_t - r)``, ``vdt_t = exp(r - cs_t) dt_t``,
    ``s1 = exp(cs_end - r)`` (scales the chunk's state), ``er = exp(r)`` (scales
    the carried state).  Unsafe heads: ``u = 1``, ``vdt_t = exp(cs_end - cs_t) dt_t``
    on the chunk's last run of the head (0 before it), ``s1 = er = 1``.  The
    factors are evaluated in float64 and rounded once.
    """
    nb, L, H = dt.shape
    nck = a.shape[1]
    for k in prange(nb * H):
        b = k // H
        h = k - b * H
        ah = np.float64(A[h])
        for c in range(nck):
            t0 = c * Q
            t1 = min(t0 + Q, L)
            acc = 0.0
            lo_cs = np.inf
            hi_cs = -np.inf
            cut = -1  # the head's last cut in the chunk
            flagged = False
            for t in range(t0, t1):
                if starts[b, t]:
                    acc = 0.0
                v = dt[b, t, h] + bias[h]
                if softplus:
                    v = _softplus(v)
                # min/max written out so that NaN stays NaN
                v = lo if v < lo else v
                v = hi if v > hi else v
                la = np.float64(v) * ah
                if not (math.isfinite(v) and la < np.inf):  # nan or inf dt, nan or +inf dt A
                    flagged = True
                    v = as_dtype_of(0.0, v)
                    la = 0.0
                dtp[b, h, t] = v
                if is_cut(la):
                    acc = 0.0
                    cut = t
                else:
                    acc += la
                cs[b, h, t] = acc
                lo_cs = min(lo_cs, acc)
                hi_cs = max(hi_cs, acc)
            bad[b, c, h] = flagged
            end = cs[b, h, t1 - 1]
            a[b, c, h] = math.exp(end) if first[b, c] >= t1 - t0 and cut < 0 else 0.0
            ok = cut < 0 and hi_cs - lo_cs <= limit
            safe[b, c, h] = ok
            if ok:
                r = 0.5 * (lo_cs + hi_cs)
                for t in range(t0, t1):
                    u[b, t, h] = math.exp(cs[b, h, t] - r)
                    vdt[b, t, h] = math.exp(r - cs[b, h, t]) * dtp[b, h, t]
                s1[b, c, h] = math.exp(end - r)
                er[b, c, h] = math.exp(r)
            else:
                jl = max(run0[b, t1 - 1], cut)  # the head's last run
                for t in range(t0, t1):
                    u[b, t, h] = 1.0
                    w = math.exp(end - cs[b, h, t]) * dtp[b, h, t] if t >= jl else 0.0
                    vdt[b, t, h] = w
                s1[b, c, h] = 1.0
                er[b, c, h] = 1.0


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def left_operand(CB, C, run0, first, c0, Q, Lm, Bm, B):  # type: ignore[no-untyped-def]
    """``Lm[b, g, ci] = [CB o mask | C o carry]`` and ``Bm[b, g, ci] = (B o lastrun)^T``.

    Chunks ``c0 .. c0 + nc`` of length ``Qc``; ``CB[b, g, ci]`` = ``C B^T``.
    """
    nb, G, nc, Qc, W = Lm.shape
    N = W - Qc
    L = run0.shape[1]
    for task in prange(nb * G * nc):
        b = task // (G * nc)
        r = task - b * (G * nc)
        g = r // nc
        ci = r - g * nc
        c = c0 + ci
        t0 = c * Q
        fc = first[b, c]
        for i in range(Qc):
            row = Lm[b, g, ci, i]
            j0 = run0[b, t0 + i] - t0
            for j in range(Qc):
                row[j] = CB[b, g, ci, i, j] if j0 <= j <= i else 0.0
            cr = C[b, t0 + i, g]
            for n in range(N):
                row[Qc + n] = cr[n] if i < fc else 0.0
        jl = run0[b, min(t0 + Qc, L) - 1] - t0
        for n in range(N):
            col = Bm[b, g, ci, n]
            for i in range(Qc):
                col[i] = B[b, t0 + i, g, n] if i >= jl else 0.0


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def fill_x(x, vdt, c0, nc, Qc, Q, R):  # type: ignore[no-untyped-def]
    """``R[b, c, Q - Qc + i, h p .. (h + 1) p] = x[b, t, h] vdt[b, t, h]`` (chunks ``c0 ..``)."""
    nb, _, H, P = x.shape
    row0 = Q - Qc
    n = nc * Qc
    for task in prange(nb * n):
        b = task // n
        r = task - b * n
        ci = r // Qc
        i = r - ci * Qc
        t = (c0 + ci) * Q + i
        dst = R[b, c0 + ci, row0 + i]
        for h in range(H):
            w = vdt[b, t, h]
            src = x[b, t, h]
            for p in range(P):
                dst[h * P + p] = src[p] * w


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def pass_states(S, a, s1, er, h0, R, final):  # type: ignore[no-untyped-def]
    """Carry scan over chunks, ``H_c = a_c H_{c-1} + s1_c S_c``.

    Writes ``er_c H_{c-1}`` into the state rows of chunk ``c``'s right operand,
    ``R[b, c, Q + n]`` (columns ``h p .. (h + 1) p``).  ``S``: (b, g, c, n, hg p)
    chunk states from zero (before ``s1``); ``a``, ``s1``, ``er``: (b, c, h);
    ``h0`` and ``final``: (b, h, p, n), the states before and after the sequence.
    """
    nb, G, nck, N, W = S.shape
    H = a.shape[2]
    hg = H // G
    P = W // hg
    Q = R.shape[2] - N
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
            dst = R[b, c, Q + n]
            cur = S[b, g, c, n]
            for hh in range(hg):
                h = g * hg + hh
                ac = a[b, c, h]
                sc = s1[b, c, h]
                ec = er[b, c, h]
                for p in range(P):
                    k = hh * P + p
                    dst[h * P + p] = ec * st[k]
                    st[k] = ac * st[k] + sc * cur[k]
        for hh in range(hg):
            for p in range(P):
                final[b, g * hg + hh, p, n] = st[hh * P + p]


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def pair_operands(pairs, Lm, c0, Q, cs, dtp, A, run0, x, R, one, Lp, Rp):  # type: ignore[no-untyped-def]
    """Operands of the unsafe (batch, chunk, head) pairs, with the explicit mask.

    ``Lp[k] = [ (CB o mask)_ij exp(cs_i - cs_j) dt_j | exp(cs_i) (C o carry)_i ]`` and
    ``Rp[k] = [X_h ; H_{c-1, h}]``; then zeroes the pair's columns of ``R`` so
    that the all-heads GEMM adds nothing to them.  Pairs (distinct) are in
    chunks ``c0 ..`` of length ``Qc = Lp.shape[1]``.  The mask is selected,
    not multiplied: only ``j`` in ``i``'s run of the head (after its sequence
    start and its last cut) gets an ``exp``, whose argument is then <= 0 for
    ``A <= 0`` (across a start ``cs_i - cs_j`` may be large and its ``exp``
    inf, and ``0 * inf`` is nan); the carry reaches the tokens before the
    head's first cut.
    """
    K, Qc, W = Lp.shape
    N = W - Qc
    H, P = x.shape[2], x.shape[3]
    G = Lm.shape[1]
    hg = H // G
    row0 = Q - Qc
    for k in prange(K):
        b, c, h = pairs[k, 0], pairs[k, 1], pairs[k, 2]
        g = h // hg
        ci = c - c0
        t0 = c * Q
        ah = np.float64(A[h])
        jc = -1  # the head's last cut at or before token i (as prep finds it)
        for i in range(Qc):
            if is_cut(np.float64(dtp[b, h, t0 + i]) * ah):
                jc = i
            j0 = max(run0[b, t0 + i] - t0, jc)
            csi = cs[b, h, t0 + i]
            src = Lm[b, g, ci, i]
            dst = Lp[k, i]
            for j in range(Qc):
                if j0 <= j <= i:
                    e = fexp(as_dtype_of(csi - cs[b, h, t0 + j], one))
                    dst[j] = src[j] * e * dtp[b, h, t0 + j]
                else:
                    dst[j] = 0.0
            if jc < 0:
                ei = fexp(as_dtype_of(csi, one))
                for n in range(N):
                    dst[Qc + n] = src[Qc + n] * ei
            else:
                for n in range(N):
                    dst[Qc + n] = 0.0
            xr = x[b, t0 + i, h]
            for p in range(P):
                Rp[k, i, p] = xr[p]
        for n in range(N):
            for p in range(P):
                Rp[k, Qc + n, p] = R[b, c, Q + n, h * P + p]
        # Each pair reads, then clears, only its own head's columns.  Explicit
        # loops: a slice assignment outside a prange is a parallel region of its own.
        for i in range(row0, Q + N):
            for p in range(P):
                R[b, c, i, h * P + p] = 0.0


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def put_pairs(pairs, Yp, Q, y):  # type: ignore[no-untyped-def]
    """``y[b, c Q + i, h] = Yp[k, i]`` for the unsafe pairs."""
    K, Qc, _ = Yp.shape
    for k in prange(K):
        b, c, h = pairs[k, 0], pairs[k, 1], pairs[k, 2]
        for i in range(Qc):
            for p in range(Yp.shape[2]):
                y[b, c * Q + i, h, p] = Yp[k, i, p]


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def finish(y, u, x, z, has_z, has_d, Dv, one, nonfinite):  # type: ignore[no-untyped-def]
    """``y = u y + D x``, times ``silu(z)``, in place; flags tokens with an inf or nan.

    ``nonfinite[b, t, h]``: 1 where ``y[b, t, h]`` holds an inf or nan, else 0.
    """
    nb, L, H, P = y.shape
    zero = one - one
    for task in prange(nb * L):
        b = task // L
        t = task - b * L
        for h in range(H):
            out = y[b, t, h]
            s = u[b, t, h]
            if has_d:
                xr = x[b, t, h]
                dr = Dv[h]
                for p in range(P):
                    out[p] = s * out[p] + dr[p] * xr[p]
            else:
                for p in range(P):
                    out[p] = s * out[p]
            if has_z:
                zr = z[b, t, h]
                for p in range(P):
                    zp = zr[p]
                    out[p] = out[p] * (zp / (one + fexp(-zp)))
            # 0 * v is nan exactly for an inf or nan v (no nnan/ninf: not folded away)
            acc = zero
            for p in range(P):
                acc += out[p] * zero
            nonfinite[b, t, h] = acc != acc
