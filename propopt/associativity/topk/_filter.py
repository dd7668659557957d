"""One long row at the speed of a read pass: a sampled threshold, then a block filter (numba).

``_cpu._unit`` starts from a safe seed: the k-th best of a strided sample,
a real lower bound for the row's k-th but a loose one (for 10^7 elements
and a sample of 2^16 it admits 1.5% of the row), so the first ~10% of the
row admits candidates in most blocks until compactions raise the
threshold.  Here the sample picks a *speculative* threshold instead, one
that about ``SPEC * k`` elements of the row are expected to beat, and the
row is filtered against it in one pass:

* the sample is ``RUNS`` evenly spaced runs of ``RUN_BYTES`` contiguous
  bytes each (512 runs of 128 float32: as many elements as a strided sample
  of 2^16 single elements, on 1/19 of the pages at 10^7 elements);
* the threshold is the worse of the sample's ``r``-th best (``r`` scaled so
  that ``SPEC * k`` of the row beat it on exchangeable data) and the best
  element of the ``rl``-th best run (the same on sorted data, where a run
  is one sample point);
* each block of ``BLOCK`` elements is tested as a whole by a branch-free,
  vectorized count of the elements that pass (``x > thr``; with NaN ranked
  largest ``not (x <= thr)``, which also passes NaN); a block that holds
  one is searched by sub-blocks of ``SUB``, and a sub-block that holds one
  is appended to the candidates without a branch per element (each element
  written, the count advanced by the test);
* when the buffer is full it is compacted as in ``_cpu`` and its k-th best
  becomes the running threshold.

The threshold is only a guess: when fewer than ``k`` elements pass it, the
caller gets nothing back and runs the exact safe path.  When at least
``k`` pass, every element that did not is worse than ``k`` of them, so the
best ``k`` of the candidates are the row's best ``k``, exactly, in the
total order of ``_order._better`` (ties by the smaller index).

numba keys the on-disk cache of these kernels on this file alone and they
compile in functions of ``_order``, ``_radix`` and ``_cpu``: when those
change, change :data:`DEPENDS_ON`.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ...arrays import frozen
from ._cpu import SLACK, _shrink
from ._order import _compact, _select, _step_worse
from ._radix import sort_winners

DEPENDS_ON = "_order: _select, _compact, _step_worse; _radix: sort_winners; _cpu: _shrink"

#: Elements tested together: 256 float32 (1 KiB).  On 10^7 N(0, 1) float32
#: with ~3000 candidates, one thread: 1024 with sub-blocks of 64 cost 1.16x a
#: read pass, 256 with sub-blocks of 32 1.10x (fewer elements rescanned per hit).
BLOCK = 256
#: A block that holds a candidate is searched by sub-blocks of this many.
SUB = 32
#: Runs sampled along the row, evenly spaced, each of ``RUN_BYTES`` contiguous
#: bytes (128 float32).  4096 runs of one cache line each (one 4 KiB page
#: apiece) took 0.35 ms of 10^7 float32 on one thread, 0.14x a read pass;
#: 512 runs of 128 elements take 0.11-0.18 ms.
RUNS = 512
RUN_BYTES = 512
#: The threshold is set so that about ``SPEC * k`` elements pass on
#: exchangeable data: fewer than ``k`` then pass with probability about
#: 1e-5 at 10^7 elements and k = 1000 (a Poisson(6.6) reaching 20).
SPEC = 3


@numba.njit(inline="always", cache=True)
def _count(x, s, e, thr, mode):  # type: ignore[no-untyped-def]
    """How many of ``x[s:e]`` pass ``thr`` (branch-free, vectorized; see :func:`_piece`)."""
    hit = np.int32(0)
    if mode == 2:
        for t in range(s, e):
            hit = np.int32(hit + np.int32(not (x[np.uintp(t)] <= thr)))
    elif mode == 1:
        for t in range(s, e):
            hit = np.int32(hit + np.int32(x[np.uintp(t)] > thr))
    else:
        for t in range(s, e):
            hit = np.int32(hit + np.int32(x[np.uintp(t)] < thr))
    return hit


@numba.njit(inline="always", cache=True)
def _kth(a, r, desc):  # type: ignore[no-untyped-def]
    """The ``r``-th best of ``a`` (no NaN), by value."""
    m = a.shape[0]
    at = m - r if desc else r - 1
    return np.partition(a, at)[at]


@numba.njit(cache=True)
def threshold(x, k, desc, nanbig):  # type: ignore[no-untyped-def]
    """``(ok, thr)``: a value that about ``SPEC * k`` elements of ``x`` pass (see the module).

    ``ok`` is False when the sample cannot give one: too few numbers in it,
    NaN at the rank sought with NaN largest, or nothing worse than the value.
    """
    n = x.shape[0]
    w = max(1, RUN_BYTES // x.itemsize)
    stride = n // RUNS
    if stride < w:
        return False, x[0]
    m_all = RUNS * w
    r = (SPEC * k * m_all + n - 1) // n
    rl = (SPEC * k * RUNS + n - 1) // n + 1
    lb = np.empty(RUNS, x.dtype)
    sv = np.empty(m_all, x.dtype)
    at = np.empty(RUNS, np.int64)  # where each run's numbers start in sv
    m = 0
    nl = 0
    nans = 0
    nan_runs = 0
    for i in range(RUNS):
        a = i * stride
        m0 = m
        best = x[a]
        # branches, not selects, for the best: a select chains every element
        # to the last (0.15 ms of 10^7 float32 here, 0.05 with branches)
        if desc:
            for t in range(a, a + w):
                v = x[t]
                sv[m] = v
                m += v == v
                if v > best or best != best:
                    best = v
        else:
            for t in range(a, a + w):
                v = x[t]
                sv[m] = v
                m += v == v
                if v < best or best != best:
                    best = v
        nans += w - (m - m0)
        if nanbig and desc and m - m0 < w:
            nan_runs += 1  # a NaN is the run's best
            m = m0  # and its numbers are not needed
        elif m > m0:
            lb[nl] = best
            at[nl] = m0
            nl += 1
    if nanbig and desc:
        r -= nans
        rl = max(1, rl - nan_runs)  # NaN runs rank first
        if r <= 0:  # the r-th best of the sample is a NaN
            return False, x[0]
    if r > m or rl > nl or r > m // 2:
        return False, x[0]
    u_run = _kth(lb[:nl], rl, desc)
    if r > nl:
        u = _kth(sv[:m], r, desc)
    else:
        # the r best run bests are r sample values, so the r-th best value u
        # is at least as good as the r-th best run best u0; when fewer than r
        # values beat u0 strictly, u is u0, else it is among those few
        u0 = _kth(lb[:nl], r, desc)
        g = np.empty(w * r, x.dtype)  # fewer than r runs have a best beating u0
        ng = 0
        for q in range(nl):
            if (lb[q] > u0) if desc else (lb[q] < u0):
                end = at[q + 1] if q + 1 < nl else m
                for t in range(at[q], end):
                    v = sv[t]
                    g[ng] = v
                    ng += (v > u0) if desc else (v < u0)
        u = _kth(g[:ng], r, desc) if ng >= r else u0
    t = min(u, u_run) if desc else max(u, u_run)
    step = _step_worse(t, desc)
    return ((step < t) if desc else (step > t)), step


@numba.njit(inline="always", cache=True)
def _fill(x, bv, bi, bp, s, e):  # type: ignore[no-untyped-def]
    """The values and ids of the candidates ``s:e``, whose positions are in ``bp``."""
    for t in range(s, e):
        q = bp[t]
        bv[t] = x[q]
        bi[t] = q


@numba.njit(inline="always", cache=True)
def _scan(x, s, e, k, desc, nanbig, thr, bv, bi, bp, mode):  # type: ignore[no-untyped-def]
    lim = bv.shape[0] - SUB
    c = np.int64(0)
    comp = 0
    for j in range(s, e, BLOCK):
        be = min(j + BLOCK, e)
        if _count(x, j, be, thr, mode) == 0:
            continue
        for sb in range(j, be, SUB):
            se = min(sb + SUB, be)
            if _count(x, sb, se, thr, mode) == 0:
                continue
            if c > lim:
                _fill(x, bv, bi, bp, np.int64(0), c)
                c, thr, _ = _shrink(bv, bi, bp, c, k, desc, nanbig)
                comp += 1
                if thr != thr:  # a NaN k-th best (NaN largest): no later element beats it
                    return c, comp
            # append the positions that pass, without a branch each (written
            # here: through an inlined function the filter ran 1.08x slower)
            if mode == 2:
                for t in range(sb, se):
                    bp[c] = t
                    c += not (x[t] <= thr)
            elif mode == 1:
                for t in range(sb, se):
                    bp[c] = t
                    c += x[t] > thr
            else:
                for t in range(sb, se):
                    bp[c] = t
                    c += x[t] < thr
    _fill(x, bv, bi, bp, np.int64(0), c)
    return c, comp


@numba.njit(cache=True)
def _piece(x, s, e, k, desc, nanbig, thr, bv, bi, bp):  # type: ignore[no-untyped-def]
    """Candidates of ``x[s:e]`` passing ``thr`` into ``bv, bi, bp``: ``(count, compactions)``.

    The count is at most ``k``: past ``k``, only the best ``k`` are kept.
    While filtering only positions are appended (values and ids are read
    for a compaction).  Each test is compiled apart (``mode`` a constant in
    each inlined copy of ``_scan``): tested through runtime flags inside the
    loop, the filter ran 1.12x slower (10^7 float32, ~3000 candidates).
    """
    if desc and nanbig:
        c, comp = _scan(x, s, e, k, desc, nanbig, thr, bv, bi, bp, 2)
    elif desc:
        c, comp = _scan(x, s, e, k, desc, nanbig, thr, bv, bi, bp, 1)
    else:
        c, comp = _scan(x, s, e, k, desc, nanbig, thr, bv, bi, bp, 0)
    return min(c, k), comp + _finish(bv, bi, bp, c, k, desc, nanbig)


@numba.njit(inline="always", cache=True)
def _finish(bv, bi, bp, c, k, desc, nanbig):  # type: ignore[no-untyped-def]
    if c > k:
        _compact(bv, bi, bp, c, k, desc, nanbig)
        return 1
    return 0


@numba.njit(inline="always", cache=True)
def _best(v, ii, pp, m, k, desc, nanbig, ordered):  # type: ignore[no-untyped-def]
    """Positions of the best ``k`` of ``m >= k`` candidates (best first if ``ordered``)."""
    _select(v, ii, pp, np.int64(m), k, desc, nanbig)
    out = np.empty(k, np.int64)
    if ordered:
        order = sort_winners(v, ii, np.int64(0), k, desc, nanbig)
        for t in range(k):
            out[t] = pp[order[t]]
    else:
        for t in range(k):
            out[t] = pp[t]
    return out


@numba.njit(nogil=True, cache=True)
def top_row_one(x, k, desc, nanbig, ordered):  # type: ignore[no-untyped-def]
    """Best ``k`` positions of the row ``x`` on the calling thread; empty when the guess fails."""
    ok, thr = threshold(x, k, desc, nanbig)
    if not ok:
        return np.empty(0, np.int64), 0
    cap = 2 * k + SLACK + SUB
    bv = np.empty(cap, x.dtype)
    bi = np.empty(cap, np.int64)
    bp = np.empty(cap, np.int64)
    c, comp = _piece(x, np.int64(0), x.shape[0], k, desc, nanbig, thr, bv, bi, bp)
    if c < k:
        return np.empty(0, np.int64), comp
    return _best(bv, bi, bp, c, k, desc, nanbig, ordered), comp


@numba.njit(parallel=True, nogil=True, cache=True)
def top_row_par(x, k, pieces, desc, nanbig, ordered):  # type: ignore[no-untyped-def]
    """:func:`top_row_one` with the row cut into ``pieces``, in one parallel region."""
    ok, thr = threshold(x, k, desc, nanbig)
    if not ok:
        return np.empty(0, np.int64), 0
    n = x.shape[0]
    cap = 2 * k + SLACK + SUB
    bv = np.empty((pieces, cap), x.dtype)
    bi = np.empty((pieces, cap), np.int64)
    bp = np.empty((pieces, cap), np.int64)
    cc = np.empty(pieces, np.int64)
    comps = np.empty(pieces, np.int64)
    step = (n + pieces - 1) // pieces
    for q in prange(pieces):
        s = min(q * step, n)
        cc[q], comps[q] = _piece(x, s, min(s + step, n), k, desc, nanbig, thr, bv[q], bi[q], bp[q])
    m = 0
    comp = 0
    for q in range(pieces):
        m += cc[q]
        comp += comps[q]
    if m < k:
        return np.empty(0, np.int64), comp
    v = np.empty(m, x.dtype)
    ii = np.empty(m, np.int64)
    pp = np.empty(m, np.int64)
    m = 0
    for q in range(pieces):
        for t in range(cc[q]):
            v[m] = bv[q, t]
            ii[m] = bi[q, t]
            pp[m] = bp[q, t]
            m += 1
    return _best(v, ii, pp, m, k, desc, nanbig, ordered), comp


def top_row(x: np.ndarray, k: int, largest: bool, nanbig: bool, ordered: bool, pieces: int):  # type: ignore[no-untyped-def]
    """Best ``k`` positions of the 1-D ``x`` (kernel dtype), or None when the guess failed."""
    xf = frozen(x)
    if pieces > 1:
        pos, _ = top_row_par(xf, k, pieces, largest, nanbig, ordered)
    else:
        pos, _ = top_row_one(xf, k, largest, nanbig, ordered)
    return pos if pos.shape[0] == k else None
