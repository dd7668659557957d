"""Fused selective-scan kernels for CPU threads (numba).

Forward, per (batch, channel) and per token ``t``, in one pass::

    dt   = softplus(delta[t] + bias)          (or without softplus / bias)
    h[n] = fexp(dt * A[n]) * h[n] + dt * u[t] * B[t, n]
    y    = sum_n C[t, n] * h[n]
    out  = (y + D * u[t]) * silu(z[t])

The state ``h`` (d_state numbers) lives in L1; nothing of size
(batch, L, d_model, d_state) is ever formed.  B and C are stored token-major
``(batch, groups, L, d_state)`` so the loop over ``n`` is contiguous and LLVM
vectorizes it, exp included (:mod:`._exp`).  Threads split the (batch,
channel) pairs; when there are fewer pairs than ``SEQ_SPLIT_PAIRS`` the
sequence is also cut into segments: each segment is scanned from zero, the
segments' end states are chained by the linear-recurrence carry
``H_s = exp(A * sum(dt over segment s-1)) * H_{s-1} + h_end_{s-1}``, and each
segment is scanned again from its carry (twice the work, all threads busy).

Packed sequences (``starts``, uint8 (batch, L), or an empty array when
there are none): the state is set to zero before every token that starts a
sequence, so each sequence is computed exactly as alone; a segment of the
sequence split that holds a start passes no carry through it.

Backward is a reverse linear scan of the adjoint ``g_t = dL/dh_t``::

    g_t = a_{t+1} g_{t+1} + dy_t C_t        (g_{L-1} also gets dL/d last_state)

States are not stored: the forward keeps one state every ``CHUNK`` tokens
(``(batch, d_model, ceil(L/CHUNK), d_state)``), and the backward recomputes the
``CHUNK`` states of a chunk into a small per-thread buffer before walking it
in reverse.  Gradients that several channels share (A over batch; B and C over
a group's channels; D, delta_bias) are summed into one slab per thread and
reduced afterwards, so no two threads write the same memory.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import njit, prange

from .._compute import FASTMATH
from .._exp import fexp, fsoftplus
from .._lanes import (
    VL,
    finish_update,
    prefetch,
    prefetch_w,
    token_io_update,
    token_update,
    transpose_block,
)

#: numba keys its on-disk cache on this file only: change this line when
#: editing what the kernels compile in from ``_exp`` or ``_lanes``.
DEPENDS_ON = (
    "_lanes: token_lanes, token_io + loops, transpose16, finish_block, prefetch; "
    "_exp: fexp, fsoftplus"
)

#: Tokens per checkpoint of the forward state, kept for the backward.  The
#: backward's per-thread buffers are 2 * CHUNK * d_state numbers (8 KiB at
#: d_state 16, float32): L1-resident.  Checkpoints cost d_state / CHUNK of
#: the input size.
CHUNK = 64

#: Tokens per tile of :func:`forward_lanes` (a divisor of CHUNK and a
#: multiple of ``_lanes.VL``), in the chapter's (batch, L, dim) layout.  One
#: thread, L = d_model = 1024, 9 interleaved rounds: 32 tokens 1.19-1.20x
#: the exps alone, 64 tokens 1.22-1.29x.
TILE = 32

#: The same for mamba_ssm's (batch, dim, L) layout, where a tile reads each
#: of its 64 channels' rows as one run of ``4 * TILE`` bytes: 32 tokens
#: 1.36-1.44x the exps alone, 64 tokens 1.27-1.32x (measured as above).
TILE_CHANNEL_MAJOR = 64

#: Below this many (batch, channel) pairs the forward also splits the
#: sequence across threads (each pair is one dependency chain; 4 per thread
#: balance the load).
SEQ_SPLIT_PAIRS_PER_THREAD = 4

# FASTMATH (.._compute): no nnan/ninf, NaN and inf propagate; 'reassoc' lets LLVM
# vectorize the sum over d_state (rounding order changes, not the math).


@njit(fastmath=FASTMATH, cache=True)
def _dt(x, softplus):  # type: ignore[no-untyped-def]
    # mamba_ssm's threshold (softplus(x) = x above 20) is inside fsoftplus
    return fsoftplus(x) if softplus else x


@njit(fastmath=FASTMATH, cache=True, inline="always")
def groups(b, d, D, Bg, Cg):  # type: ignore[no-untyped-def]
    """Where channel ``d`` of row ``b`` reads B and C: (row of B, group of B, row of C,
    group of C); a row is 0 when one is shared by the batch."""
    bb = b if Bg.shape[0] > 1 else 0
    bc = b if Cg.shape[0] > 1 else 0
    return bb, d // (D // Bg.shape[1]), bc, d // (D // Cg.shape[1])


@njit(fastmath=FASTMATH, cache=True)  # once per call or channel: a plain call
def channel(i, D, Bg, Cg):  # type: ignore[no-untyped-def]
    """Step ``i`` of a loop over (batch, dim): its row ``b``, channel ``d`` and, as
    :func:`groups`, where it reads B and C."""
    b = i // D
    d = i - b * D
    bb, gb, bc, gc = groups(b, d, D, Bg, Cg)
    return b, d, bb, gb, bc, gc


@njit(fastmath=FASTMATH, cache=True, inline="always")
def token(b, d, t, delta, bias_d, softplus, u, dout, vb, vc):  # type: ignore[no-untyped-def]
    """What the reverse walk reads of token ``t`` of channel (b, d): ``x = delta + bias``,
    ``dt``, ``u``, ``dL/dout``, and the token's column of B and of C."""
    x = delta[b, d, t] + bias_d
    return x, _dt(x, softplus), u[b, d, t], dout[b, d, t], t if vb else 0, t if vc else 0


@njit(fastmath=FASTMATH, cache=True)  # once per call or channel: a plain call
def sizes(u, A, Bg, Cg, starts, T):  # type: ignore[no-untyped-def]
    """The sizes a kernel of layout (batch, dim, L) walks: rows, channels, tokens, states,
    chunks of ``T`` tokens; whether B and C vary by token; whether sequences are packed."""
    nb, D, L = u.shape
    nck = (L + T - 1) // T
    return nb, D, L, A.shape[1], nck, Bg.shape[2] > 1, Cg.shape[2] > 1, starts.shape[0] > 0


@njit(fastmath=FASTMATH, cache=True, inline="always")
def readout(h, Cg, bc, gc, tc, zero):  # type: ignore[no-untyped-def]
    """``y = C_t . h``: the output before ``D`` and the gate, from the state ``h`` (N,)."""
    y = zero
    for n in range(h.shape[0]):
        y += h[n] * Cg[bc, gc, tc, n]
    return y


@njit(fastmath=FASTMATH, cache=True, inline="always")
def gate_grad(go, pre, zt, one):  # type: ignore[no-untyped-def]
    """``out = pre * silu(z)``: (dL/dz, dL/dpre) from ``go = dL/dout``."""
    sg = one / (one + fexp(-zt))
    return go * pre * sg * (one + zt * (one - sg)), go * zt * sg


@njit(fastmath=FASTMATH, cache=True, inline="always")
def through_softplus(ddt, x, softplus, one):  # type: ignore[no-untyped-def]
    """dL/dx from dL/d(dt) where ``dt = softplus(x)`` (or ``x``); the identity above 20."""
    if softplus and x <= 20.0:
        return ddt / (one + fexp(-x))
    return ddt


@njit(fastmath=FASTMATH, cache=True)
def _segment(u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z, scale_b,
             b, d, t0, t1, h, out, write, ckpt, T, one, starts):  # type: ignore[no-untyped-def]  # fmt: skip
    """Scan tokens [t0, t1) of channel (b, d) from state ``h`` (updated in place).

    Writes ``out`` when ``write`` and a checkpoint at every multiple of ``T``
    when ``ckpt`` has room; returns the sum of ``dt`` (in float64) since the
    last sequence start, and whether a sequence started in [t0, t1).
    """
    N = A.shape[1]
    D = u.shape[1]
    bb, gb, bc, gc = groups(b, d, D, Bg, Cg)
    vb = Bg.shape[2] > 1
    vc = Cg.shape[2] > 1
    save = ckpt.shape[2] > 0
    bias_d = bias[d]
    dsk = Dv[d]
    dtsum = 0.0
    cut = False
    packed = starts.shape[0] > 0
    zero = one - one
    for t in range(t0, t1):
        if save and t % T == 0:
            for n in range(N):
                ckpt[b, d, t // T, n] = h[n]
        if packed and starts[b, t]:
            for n in range(N):
                h[n] = zero
            dtsum = 0.0
            cut = True
        dt = _dt(delta[b, d, t] + bias_d, softplus)
        dtsum += dt
        ut = u[b, d, t]
        du = dt * ut if scale_b else ut
        tb = t if vb else 0
        tc = t if vc else 0
        y = zero
        for n in range(N):
            hn = fexp(dt * A[d, n]) * h[n] + du * Bg[bb, gb, tb, n]
            h[n] = hn
            y += hn * Cg[bc, gc, tc, n]
        if write:
            o = y + dsk * ut
            if has_z:
                zt = z[b, d, t]
                o = o * (zt / (one + fexp(-zt)))
            out[b, d, t] = o
    return dtsum, cut


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def forward(u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z, scale_b, h0, out, last,
            ckpt, T, seg, one, starts):  # type: ignore[no-untyped-def]  # fmt: skip
    """Fused forward; ``seg`` tokens per sequence segment (a multiple of ``T``).

    One code path for any number of segments ``S`` (with one, passes 1 and
    the chain do nothing): each ``prange`` loop is a kernel of its own that
    numba compiles and links ``_segment`` into, so a separate one-segment
    loop, and ``np.zeros`` (a parallel loop too), cost about 1.5 s each of a
    first call's compile (12.7 -> 9.1 s in float64).  Pass 1 writes the
    first ``S - 1`` entries of ``ends``, ``sums`` and ``cuts``, the chain
    reads only those, hence ``np.empty``.
    """
    nb, D, L = u.shape
    N = A.shape[1]
    S = max(1, (L + seg - 1) // seg)
    P = nb * D
    ends = np.empty((nb, D, S, N), dtype=h0.dtype)
    sums = np.empty((nb, D, S))
    cuts = np.empty((nb, D, S), dtype=np.bool_)
    nock = np.empty((nb, D, 0, N), dtype=ckpt.dtype)  # pass 1 saves no checkpoints
    for i in prange(P * (S - 1)):  # pass 1: end state of each segment from 0
        p = i // (S - 1)
        s = i - p * (S - 1)
        b = p // D
        d = p - b * D
        h = np.zeros(N, dtype=h0.dtype)
        sums[b, d, s], cuts[b, d, s] = _segment(u, delta, A, Bg, Cg, Dv, z, bias, softplus,
                                                has_z, scale_b, b, d, s * seg, (s + 1) * seg,
                                                h, out, False, nock, T, one, starts)  # fmt: skip
        ends[b, d, s] = h
    for p in prange(P):  # chain the carries: ends[s] becomes the state entering s
        b = p // D
        d = p - b * D
        H = h0[b, d].copy()
        for s in range(S - 1):
            nxt = np.empty(N, dtype=h0.dtype)
            for n in range(N):
                if cuts[b, d, s]:  # a sequence starts inside: nothing before it passes
                    nxt[n] = ends[b, d, s, n]
                else:
                    nxt[n] = math.exp(A[d, n] * sums[b, d, s]) * H[n] + ends[b, d, s, n]
            ends[b, d, s] = H
            H = nxt
        ends[b, d, S - 1] = H
    for i in prange(P * S):  # pass 2: every segment from its carry
        p = i // S
        s = i - p * S
        b = p // D
        d = p - b * D
        h = ends[b, d, s].copy()
        _segment(u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z, scale_b,
                 b, d, s * seg, min(L, (s + 1) * seg), h, out, True, ckpt, T, one,
                 starts)  # fmt: skip
        if s == S - 1:
            last[b, d] = h


#: Channels per lane block of :func:`forward_lanes`, the first that divides
#: the group sizes of B and C.  A runtime value on purpose: a constant trip
#: count is fully unrolled by LLVM and then not vectorized (3x slower).
#: One thread, L 2048, 1024 channels: 64 lanes 19.2-20.1 ms, 32 lanes
#: 20.8-23.1 ms, 16 lanes 22.1-23.6 ms, the per-channel kernel 23.6-24.3 ms.
LANES = (64, 32, 16)


@functools.cache
def lane_kernel(token_major: bool, softplus: bool, fused: bool):  # type: ignore[no-untyped-def]
    """The lane kernel for one layout, softplus setting and token path (see :func:`forward_lanes`).

    The three are constants of each kernel (closure cells, which numba's
    cache keys on), so numba drops the branches that a call cannot take
    before it types them, and a first call compiles one path instead of
    all: 7.7-8.7 s instead of 13.3 s (docs/mamba.md).  ``fused`` (float32
    only) sends tokens through ``_lanes.token_io``, which adds the bias,
    scales by dt and, in the token-major layout without the softplus, reads
    and writes the rows in place.

    Each kernel gets a name of its own, hence a cache index file of its own:
    numba picks a new entry's file number from the index it read, so two
    processes (test workers, the capstone's) that compile two kernels of
    one index at once could each write the other's entry, and these kernels
    share their signature.
    """

    def lanes(u, delta, A, Bg, Cg, Dv, z, bias, has_z, scale_b, h0, out, last, ckpt, T, W, one,
              tile, runs, starts):  # type: ignore[no-untyped-def]  # fmt: skip
        """Fused forward with ``W`` channels in SIMD lanes (B and C per token, shared by them).

        The per-channel kernel vectorizes over d_state and pays a horizontal sum
        for every (token, channel); here the lanes are channels, so ``y`` needs no
        horizontal sum and ``B_t[n]``, ``C_t[n]`` are broadcasts.  Tiles of ``T``
        tokens of ``W`` channels are transposed into small buffers first; each
        token's update is :func:`._lanes.token_update` (explicit vector code in
        float32).
        Requires ``W`` to divide the B and C group sizes (see :data:`LANES`).

        Each task owns ``D / W / runs`` adjacent blocks of one sequence and
        walks the token tiles in its outer loop, all its blocks for each tile,
        with their states side by side (at most ``_host.RUN_STATE_BYTES``, in L2).  A tile's
        rows are then read and written as long contiguous runs, one page at a
        time: with a block per task walking all tokens, every row of the
        chapter's (batch, L, dim) layout was a new 4 KiB page (8 KiB apart at
        d_model 2048), and the page walks cost more than the scan itself.
        """
        nb, D, L = h0.shape[0], h0.shape[1], (u.shape[1] if token_major else u.shape[2])
        N = A.shape[1]
        nblk = D // W
        save = ckpt.shape[2] > 0
        packed = starts.shape[0] > 0
        zero = one - one
        for task in prange(nb * runs):
            b = task // runs
            r = task - b * runs
            q0 = r * nblk // runs
            nq = (r + 1) * nblk // runs - q0
            bb = b if Bg.shape[0] > 1 else 0
            bc = b if Cg.shape[0] > 1 else 0
            H = np.empty((nq, N, W), dtype=u.dtype)
            ATs = np.empty((nq, N, W), dtype=u.dtype)
            for q in range(nq):
                d0 = (q0 + q) * W
                for n in range(N):
                    for j in range(W):
                        ATs[q, n, j] = A[d0 + j, n]
                        H[q, n, j] = h0[b, d0 + j, n]
            dtb = np.empty((tile, W), dtype=u.dtype)
            dub = np.empty((tile, W), dtype=u.dtype)
            yb = np.empty((tile, W), dtype=u.dtype)
            ybt = np.empty((W, tile), dtype=u.dtype)
            line = max(1, 64 // u.itemsize)  # elements per cache line
            # Fused (float32) tokens go through _lanes.token_io: in the
            # token-major layout in place; with the softplus, the mamba_ssm
            # layout's tiles take it first (in a loop of its own, which
            # vectorizes), and the chapter's layout is not fused: it copies its
            # rows to the tile buffers.
            nobias = np.zeros(D if softplus else 0, dtype=u.dtype)
            db = delta[b]
            ub = u[b]
            ob = out[b]
            zb = z[b if has_z else 0]
            for t0 in range(0, L, tile):
                for q in range(nq):
                    d0 = (q0 + q) * W
                    gb = d0 // (D // Bg.shape[1])
                    gc = d0 // (D // Cg.shape[1])
                    h = H[q]
                    AT = ATs[q]
                    m = min(L, t0 + tile) - t0
                    if save and t0 % T == 0:
                        for j in range(W):
                            for n in range(N):
                                ckpt[b, d0 + j, t0 // T, n] = h[n, j]
                    # Ask for the next block's rows (or the next tile's first block's)
                    # now: they are 32-64 rows a page apart, which the hardware
                    # prefetchers do not follow (one thread, L = d_model = 1024,
                    # mamba_ssm layout, element-by-element tile copies: 4.6 -> 3.6
                    # ms).  The in-place vector path runs 4-7% faster without.
                    pq, pt = (q + 1, t0) if q + 1 < nq else (0, t0 + tile)
                    if pt < L and not fused:
                        pd0 = (q0 + pq) * W
                        pm = min(tile, L - pt)
                        if token_major:
                            for k in range(pm):
                                for c in range(0, W, line):
                                    prefetch(delta[b], pt + k, pd0 + c)
                                    prefetch(u[b], pt + k, pd0 + c)
                                    prefetch_w(out[b], pt + k, pd0 + c)
                                    if has_z:
                                        prefetch(z[b], pt + k, pd0 + c)
                        else:
                            for j in range(W):
                                for c in range(0, pm, line):
                                    prefetch(delta[b], pd0 + j, pt + c)
                                    prefetch(u[b], pd0 + j, pt + c)
                                    prefetch_w(out[b], pd0 + j, pt + c)
                                    if has_z:
                                        prefetch(z[b], pd0 + j, pt + c)
                    if fused and token_major:
                        for k in range(m):
                            if packed and starts[b, t0 + k]:  # a sequence starts: from zero
                                h[:] = zero
                            token_io_update(h, AT, db, ub, ob, zb, t0 + k, d0, bias, Dv, d0,
                                            Bg[bb, gb, t0 + k], Cg[bc, gc, t0 + k], scale_b,
                                            True, has_z)  # fmt: skip
                        continue
                    full = m == tile and tile % VL == 0
                    # Rows as 1-D views: the inner loops then index from 0 with no
                    # wraparound test and vectorize (2-3x less time than 3-D indexing).
                    bw = bias[d0 : d0 + W]
                    if fused and full:  # (batch, dim, L): 16 x 16 transposes, bias added later
                        for j in range(0, W, VL):
                            for k in range(0, m, VL):
                                transpose_block(db, d0 + j, t0 + k, dtb, k, j)
                                transpose_block(ub, d0 + j, t0 + k, dub, k, j)
                        bias_in = bias
                        if softplus:  # all the tile's first, so that the exps pipeline
                            for k in range(m):
                                dk = dtb[k]
                                for j in range(W):
                                    dk[j] = fsoftplus(dk[j] + bw[j])
                            bias_in = nobias
                        # the next block's rows, one per token: spread over the
                        # tile, the prefetches overlap the updates (one thread,
                        # L = d_model = 1024: 3.25 -> 2.99 ms; all at once, or in
                        # the chapter's layout, they gained nothing)
                        pq, pt = (q + 1, t0) if q + 1 < nq else (0, t0 + tile)
                        pd0 = (q0 + pq) * W
                        for k in range(m):
                            if pt < L and k < W:
                                for c in range(0, min(tile, L - pt), line):
                                    prefetch(db, pd0 + k, pt + c)
                                    prefetch(ub, pd0 + k, pt + c)
                                    prefetch_w(ob, pd0 + k, pt + c)
                            if packed and starts[b, t0 + k]:
                                h[:] = zero
                            # y overwrites u in place: the token's vector code reads
                            # both of a vector's rows before it writes (one tile
                            # buffer less in L1)
                            token_io_update(h, AT, dtb, dub, dub, dub, k, 0, bias_in, Dv, d0,
                                            Bg[bb, gb, t0 + k], Cg[bc, gc, t0 + k], scale_b,
                                            False, False)  # fmt: skip
                    elif token_major:  # (batch, L, dim): channels are contiguous
                        for k in range(m):
                            drow = delta[b, t0 + k, d0 : d0 + W]
                            urow = u[b, t0 + k, d0 : d0 + W]
                            dk = dtb[k]
                            uk = dub[k]
                            for j in range(W):
                                dk[j] = drow[j] + bw[j]
                                uk[j] = urow[j]
                    elif full:  # (batch, dim, L): 16 x 16 transposes
                        for j in range(0, W, VL):
                            for k in range(0, m, VL):
                                transpose_block(db, d0 + j, t0 + k, dtb, k, j)
                                transpose_block(ub, d0 + j, t0 + k, dub, k, j)
                        for k in range(m):
                            dk = dtb[k]
                            for j in range(W):
                                dk[j] += bw[j]
                    else:
                        for j in range(W):
                            drow = delta[b, d0 + j, t0 : t0 + m]
                            urow = u[b, d0 + j, t0 : t0 + m]
                            bj = bw[j]
                            for k in range(m):
                                dtb[k, j] = drow[k] + bj
                                dub[k, j] = urow[k]
                    if not (fused and full):
                        # Separate loops, so that the softplus (a libm call in
                        # float64) does not keep the plain case from vectorizing.
                        if softplus:
                            for k in range(m):
                                dk = dtb[k]
                                for j in range(W):
                                    dk[j] = fsoftplus(dk[j])
                        if scale_b:
                            for k in range(m):
                                for j in range(W):
                                    dub[k, j] *= dtb[k, j]
                        for k in range(m):
                            if packed and starts[b, t0 + k]:  # a sequence starts: from zero
                                for n in range(N):
                                    hz = h[n]
                                    for j in range(W):
                                        hz[j] = zero
                            token_update(h, AT, dtb[k], dub[k], yb[k], Bg[bb, gb, t0 + k],
                                         Cg[bc, gc, t0 + k])  # fmt: skip
                    Dw = Dv[d0 : d0 + W]
                    if token_major:
                        for k in range(m):
                            urow = u[b, t0 + k, d0 : d0 + W]
                            orow = out[b, t0 + k, d0 : d0 + W]
                            yk = yb[k]
                            if has_z:
                                zrow = z[b, t0 + k, d0 : d0 + W]
                                for j in range(W):
                                    zt = zrow[j]
                                    orow[j] = (yk[j] + Dw[j] * urow[j]) * (zt / (one + fexp(-zt)))
                            else:
                                for j in range(W):
                                    orow[j] = yk[j] + Dw[j] * urow[j]
                    elif fused and full:
                        for j in range(0, W, VL):  # each row's 4 * tile bytes in a run
                            for k in range(0, m, VL):
                                finish_update(dub, k, j, ub, zb, ob, d0, t0, Dv, has_z)
                    else:
                        if full:
                            for k in range(0, m, VL):
                                for j in range(0, W, VL):
                                    transpose_block(yb, k, j, ybt, j, k)
                        else:
                            for j in range(W):
                                for k in range(m):
                                    ybt[j, k] = yb[k, j]
                        for j in range(W):
                            urow = u[b, d0 + j, t0 : t0 + m]
                            orow = out[b, d0 + j, t0 : t0 + m]
                            yj = ybt[j]
                            dsk = Dw[j]
                            if has_z:
                                zrow = z[b, d0 + j, t0 : t0 + m]
                                for k in range(m):
                                    zt = zrow[k]
                                    orow[k] = (yj[k] + dsk * urow[k]) * (zt / (one + fexp(-zt)))
                            else:
                                for k in range(m):
                                    orow[k] = yj[k] + dsk * urow[k]
            for q in range(nq):
                d0 = (q0 + q) * W
                for n in range(N):
                    for j in range(W):
                        last[b, d0 + j, n] = H[q, n, j]

    layout = "token_major" if token_major else "channel_major"
    lanes.__qualname__ = f"lanes_{layout}{'_softplus' * softplus}{'_fused' * fused}"
    return njit(parallel=True, fastmath=FASTMATH, cache=True)(lanes)


def forward_lanes(u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z, scale_b, h0, out, last,
                  ckpt, T, W, one, token_major, tile, runs, starts):  # type: ignore[no-untyped-def]  # fmt: skip
    """Fused forward, W channels in SIMD lanes: :func:`lane_kernel`'s kernel for this call."""
    fused = u.dtype.itemsize == 4 and not (softplus and token_major)
    lane_kernel(bool(token_major), bool(softplus), fused)(
        u, delta, A, Bg, Cg, Dv, z, bias, has_z, scale_b, h0, out, last, ckpt, T, W, one, tile,
        runs, starts)  # fmt: skip


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def backward(u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z, scale_b, ckpt, T,
             dout, dlast, du, ddelta, dz, dA_p, dB_p, dC_p, dD_p, dbias_p,
             dh0, one, starts):  # type: ignore[no-untyped-def]  # fmt: skip
    """Reverse scan of the adjoint, recomputing states chunk by chunk.

    ``dA_p`` (threads, D, N), ``dB_p``/``dC_p`` (threads, *Bg.shape),
    ``dD_p``/``dbias_p`` (threads, D) are per-thread slabs, zeroed by the caller.
    """
    nb, D, L, N, nck, vb, vc, packed = sizes(u, A, Bg, Cg, starts, T)
    for i in prange(nb * D):
        tid = numba.get_thread_id()
        b, d, bb, gb, bc, gc = channel(i, D, Bg, Cg)
        hs = np.empty((T + 1, N), dtype=u.dtype)  # row 0: the state entering the chunk
        aa = np.empty((T, N), dtype=u.dtype)
        dA_c = np.zeros(N, dtype=u.dtype)
        dA_tot = np.zeros(N)
        g = dlast[b, d].copy()
        bias_d = bias[d]
        dsk = Dv[d]
        dD_acc = 0.0
        dbias_acc = 0.0
        zero = one - one
        for c in range(nck - 1, -1, -1):
            t0 = c * T
            t1 = min(L, t0 + T)
            for n in range(N):
                hs[0, n] = ckpt[b, d, c, n]
            for t in range(t0, t1):  # recompute the chunk's states
                k = t - t0
                dt = _dt(delta[b, d, t] + bias_d, softplus)
                ut = u[b, d, t]
                dub = dt * ut if scale_b else ut
                tb = t if vb else 0
                rs = packed and starts[b, t]  # then the state entering t is zero
                for n in range(N):
                    a = fexp(dt * A[d, n])
                    aa[k, n] = a
                    hs[k + 1, n] = a * (zero if rs else hs[k, n]) + dub * Bg[bb, gb, tb, n]
            for n in range(N):
                dA_c[n] = 0
            for t in range(t1 - 1, t0 - 1, -1):  # walk it in reverse
                k = t - t0
                x, dt, ut, go, tb, tc = token(b, d, t, delta, bias_d, softplus, u, dout, vb, vc)
                if has_z:
                    y = readout(hs[k + 1], Cg, bc, gc, tc, zero)
                    dz[b, d, t], dy = gate_grad(go, y + dsk * ut, z[b, d, t], one)
                else:
                    dy = go
                dD_acc += dy * ut
                sA = zero
                sB = zero
                dub = dt * ut if scale_b else ut
                rs = packed and starts[b, t]
                for n in range(N):
                    gn = g[n] + dy * Cg[bc, gc, tc, n]
                    dC_p[tid, bc, gc, tc, n] += dy * hs[k + 1, n]
                    dB_p[tid, bb, gb, tb, n] += gn * dub
                    sB += gn * Bg[bb, gb, tb, n]
                    da = gn * (zero if rs else hs[k, n]) * aa[k, n]  # dL/d(dt * A[n])
                    sA += da * A[d, n]
                    dA_c[n] += da * dt
                    g[n] = gn * aa[k, n]
                if rs:  # nothing flows back past a start
                    for n in range(N):
                        g[n] = zero
                if scale_b:
                    ddt = sA + sB * ut
                    du[b, d, t] = dy * dsk + sB * dt
                else:
                    ddt = sA
                    du[b, d, t] = dy * dsk + sB
                ddt = through_softplus(ddt, x, softplus, one)
                ddelta[b, d, t] = ddt
                dbias_acc += ddt
            for n in range(N):
                dA_tot[n] += dA_c[n]
        for n in range(N):
            dA_p[tid, d, n] += dA_tot[n]
            dh0[b, d, n] = g[n]
        dD_p[tid, d] += dD_acc
        dbias_p[tid, d] += dbias_acc
