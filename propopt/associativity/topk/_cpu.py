"""Multi-threaded top-k kernels (numba): a threshold filter with a candidate buffer.

The order is total: ``(a, i)`` beats ``(b, j)`` when ``a`` is better than
``b`` in the requested direction, or the scores are equal and ``i < j``.
With ``nanbig`` a NaN ranks above every number (torch's convention), NaNs
among themselves by id; otherwise NaNs are never admitted.

One work unit (a contiguous piece of a row) keeps a buffer of at most ``cap``
candidates and a threshold ``(thr, thr_id)``: the k-th best candidate.  Once
the buffer holds ``k`` candidates, an element can only matter if it beats the
threshold, so the data are read in blocks of ``BLOCK`` elements and a block
is first tested as a whole by a branch-free count of ``x > thr`` (a compare
and an add per element, vectorized by LLVM); only a block holding a winner is
scanned element by element.  When the buffer is full it is *compacted* by a
pass that keeps only the candidates at least as good as a sampled pivot
ranked a little below the k-th (``_shrink``; an exact quickselect if the
sample was unlucky), and the pivot becomes the threshold.  Each compaction
costs ``O(cap)`` and frees at least ``SAMPLE`` (typically ``cap - 1.5k``)
slots, so even when every element is admitted (ascending input) the work is
``O(n)`` amortized.  A heap would instead pay
``O(log k)`` per admitted element.

Tried and rejected: mapping scores to order-preserving integer keys first
(one more pass over memory; the block test in the native dtype is already
exact for floats because NaN compares false), and a per-element branch on
the threshold (scalar, ~3x slower than the block count on random data).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ...arrays import frozen
from ._order import _better, _compact, _row_seed, _select, _sort_order, row_seeds
from ._radix import sort_winners

#: numba keys the on-disk cache of the kernels below on this file's contents
#: alone, and they compile in functions of ``_order`` and
#: ``_radix``: whenever those change, change this too (any new text), or
#: cached kernels keep running the old code.
DEPENDS_ON = "_order: long units seeded from 8k samples; _radix: sort_winners"

#: Elements tested together against the threshold.  1024 float32 (4 KiB):
#: long enough for the vectorized count to run at memory speed, short enough
#: that a block with a winner costs little to rescan.
BLOCK = 1024

#: A block that holds a winner is searched by sub-blocks of ``SUB`` elements,
#: each tested the same way.  On random data about ``k ln(n/k)`` elements are
#: admitted (the threshold keeps rising), i.e. ~11k blocks of 10^5 for
#: n = 10^8, k = 1000: scanning whole blocks element by element cost as much
#: as the filter itself (19 ms against 11 ms on one thread).
SUB = 64

#: Extra buffer slots beyond ``2k``: compactions of a buffer of ``2k + SLACK``
#: free at least ``k + SLACK`` slots, so tiny ``k`` do not compact every few
#: elements on adversarial (ascending) input, and the selection's cost per
#: admitted element, ``cap / (cap - k)`` passes, stays near one (4096 for
#: k = 1000: a 120 KiB buffer, in L2).
SLACK = 4096

#: ... but the buffer is compacted as soon as it holds ``2k + SOFT_SLACK``
#: candidates while winners are rare.  The threshold only rises at a
#: compaction, so a roomy buffer admits more: on random data the number
#: admitted is about ``k ln(n/k) * m / ln(1 + m/k)`` for ``m`` free slots
#: (2.8x the minimum at ``m = 5k``, 1.6x at ``m = 2k``).  Once more than half
#: of the elements scanned since the last compaction were winners (ascending
#: input, past the first ``16k``), the whole buffer is used.  n = 5 * 10^7,
#: k = 1000, one thread: random 8.4 -> 7.4 ms.
SOFT_SLACK = 1024

#: Candidates sampled to choose the pivot of a compaction (see ``_shrink``).
SAMPLE = 128

_stats = np.zeros(1, np.int64)  # compactions of the last call (tests, benchmarks)


# The block tests index with unsigned integers: numba then drops its
# negative-index wraparound check, which otherwise keeps LLVM from
# vectorizing the loop (measured at n = 10^8 float32 on one thread: 11 ms
# unsigned, 180 ms signed, 19 ms on array slices, whose reference counting
# costs ~150 ns per block).  Counts are int32 so that 8 lanes fit a vector.
@numba.njit(inline="always", cache=True)
def _count_beating(x, s, e, thr, desc):  # type: ignore[no-untyped-def]
    """How many of ``x[s:e]`` beat ``thr`` (branch-free, vectorized; NaN never does)."""
    hit = np.int32(0)
    if desc:
        for t in range(s, e):
            hit = np.int32(hit + np.int32(x[np.uintp(t)] > thr))
    else:
        for t in range(s, e):
            hit = np.int32(hit + np.int32(x[np.uintp(t)] < thr))
    return hit


@numba.njit(inline="always", cache=True)
def _count_nan(x, s, e):  # type: ignore[no-untyped-def]
    hit = np.int32(0)
    for t in range(s, e):
        v = x[np.uintp(t)]
        hit = np.int32(hit + np.int32(v != v))
    return hit


@numba.njit(inline="always", cache=True)
def _count_equal(x, s, e, thr):  # type: ignore[no-untyped-def]
    hit = np.int32(0)
    for t in range(s, e):
        hit = np.int32(hit + np.int32(x[np.uintp(t)] == thr))
    return hit


@numba.njit(cache=True)
def _shrink(v, ids, pos, c, k, desc, nanbig):  # type: ignore[no-untyped-def]
    """Drop candidates that cannot be among the best ``k``: ``(count, thr, thr_id)``.

    The pivot is a pair ranked a little below ``k / c`` in an evenly spaced
    sample of ``SAMPLE`` candidates; one pass keeps the pairs at least as
    good as it (usually ``~1.3 k``).  When at least ``k`` are kept, nothing
    worse than the pivot can be in the top ``k``, so the pivot becomes the
    threshold; otherwise (an unlucky sample) an exact quickselect runs.
    One pass per compaction instead of a quickselect's ~3.4 with unpredictable
    branches: ascending input (every element a winner) went from ~86 to
    ~5 ns per element at n = 10^7, k = 1000 (random input: ~0.6).
    """
    ns = min(SAMPLE, c)
    sv = np.empty(ns, v.dtype)
    si = np.empty(ns, np.int64)
    for t in range(ns):
        q = (t * c) // ns
        sv[t] = v[q]
        si[t] = ids[q]
    order = _sort_order(sv, si, np.int64(0), ns, desc, nanbig)
    r = min(ns - 1, (ns * k) // c + 2 * int(np.sqrt(ns * k / c)) + 2)
    pv = sv[order[r]]
    pi = si[order[r]]
    w = np.int64(0)
    for t in range(c):
        if not _better(pv, pi, v[t], ids[t], desc, nanbig):  # swaps keep a permutation
            v[w], v[t] = v[t], v[w]
            ids[w], ids[t] = ids[t], ids[w]
            pos[w], pos[t] = pos[t], pos[w]
            w += 1
    if w >= k and w <= c - SAMPLE:
        return w, pv, pi
    thr, tid = _compact(v, ids, pos, w if w >= k else c, k, desc, nanbig)
    return k, thr, tid


@numba.njit(inline="always", cache=True)
def _grow(c, c0, j, j0, s, k, soft, cap):  # type: ignore[no-untyped-def]
    """At a compaction: the whole buffer once winners are most elements (see SOFT_SLACK)."""
    if soft < cap and j - s > 16 * k and 2 * (c - c0) > j - j0:
        return cap
    return soft


@numba.njit(cache=True)
def _unit(x, xids, has_ids, s, e, k, desc, nanbig, seeded, sv, sid, ov, oi, op):  # type: ignore[no-untyped-def]
    """Top-``k`` of ``x[s:e]`` into ``ov, oi, op`` (unsorted); returns (count, compactions).

    ``seeded``: only pairs beating ``(sv, sid)`` (the k-th best of a summary
    being updated) are candidates, so the filter starts at its final speed.
    """
    if not seeded and not has_ids and row_seeds(e - s, k):
        seeded, sv = _row_seed(x, s, e, k, desc, nanbig)
        sid = -1
    cap = min(2 * k + SLACK, max(k, e - s))  # never more candidates than elements
    bv = np.empty(cap, x.dtype)
    bi = np.empty(cap, np.int64)
    bp = np.empty(cap, np.int64)
    soft = min(cap, 2 * k + SOFT_SLACK)
    c = np.int64(0)  # not the literal 0: numba would compile _compact for it apart
    j = s
    # fill: the first k admissible elements are taken unconditionally
    while j < e and c < k and not seeded:
        xv = x[j]
        if nanbig or xv == xv:
            bv[c] = xv
            bi[c] = xids[j] if has_ids else j
            bp[c] = j
            c += 1
        j += 1
    compactions = 0
    if (c == k or seeded) and j < e:
        if seeded:
            thr, tid = sv, sid
        else:
            thr, tid = _compact(bv, bi, bp, c, k, desc, nanbig)
        thr_nan = thr != thr
        c0, j0 = c, j  # buffer size and position after the last compaction
        while j < e:
            be = min(j + BLOCK, e)
            if thr_nan and not desc:
                hit = np.int32(1)  # every number beats a NaN threshold
            else:
                hit = _count_beating(x, j, be, thr, desc)
            if hit == 0 and nanbig:
                hit = _count_nan(x, j, be)
            if hit == 0 and has_ids:
                hit = _count_equal(x, j, be, thr)
            if hit != 0:
                # locate the winners by sub-blocks of SUB, scanning only those that
                # hit; with an exact count (strict comparison, no NaN or id rules)
                # stop once all ``hit`` winners were seen: a raised threshold only
                # makes later ones fewer
                counted = not (thr_nan and not desc) and not nanbig and not has_ids
                left = hit
                dense = counted and hit * SUB >= be - j
                if dense and c + (be - j) > soft:
                    soft = _grow(c, c0, j, j0, s, k, soft, cap)
                    c, thr, tid = _shrink(bv, bi, bp, c, k, desc, nanbig)
                    c0, j0 = c, j
                    compactions += 1
                if dense and c + (be - j) <= soft:
                    # dense (early on, while the threshold is still low): write
                    # every element, keep the winners; branch-free
                    for t in range(j, be):
                        xv = x[t]
                        bv[c] = xv
                        bi[c] = t
                        bp[c] = t
                        c += (xv > thr) if desc else (xv < thr)
                    left = 0
                for sb in range(j, be, SUB):
                    if counted and left <= 0:
                        break
                    se = min(sb + SUB, be)
                    if counted:
                        h = _count_beating(x, sb, se, thr, desc)
                        if h == 0:
                            continue
                        left -= h
                    for t in range(sb, se):
                        xv = x[t]
                        if not nanbig and xv != xv:
                            continue
                        it = xids[t] if has_ids else t
                        if _better(xv, it, thr, tid, desc, nanbig):
                            bv[c] = xv
                            bi[c] = it
                            bp[c] = t
                            c += 1
                            if c >= soft:
                                soft = _grow(c, c0, t, j0, s, k, soft, cap)
                                c, thr, tid = _shrink(bv, bi, bp, c, k, desc, nanbig)
                                c0, j0 = c, t
                                thr_nan = thr != thr
                                compactions += 1
            j = be
    if c > k:
        _compact(bv, bi, bp, c, k, desc, nanbig)
        compactions += 1
        c = k
    for t in range(c):
        ov[t] = bv[t]
        oi[t] = bi[t]
        op[t] = bp[t]
    return c, compactions


@numba.njit(parallel=True, nogil=True, cache=True)
def topk_rows(x, xids, has_ids, k, pieces, desc, nanbig, seeded, sv, sid, ordered):  # type: ignore[no-untyped-def]
    """Top-``k`` positions of each row of ``x`` (rows, n), best first.

    Each row is cut into ``pieces`` units, all ``rows * pieces`` units run in
    parallel, then each row's candidates are merged by a selection and
    sorted (unless ``ordered`` is False: then in no particular order).  With
    ``seeded``, only pairs beating ``(sv, sid)`` are returned.
    Returns ``(positions (rows, k), counts (rows,), compactions)``;
    row ``r`` holds ``counts[r] <= k`` valid positions.
    """
    rows, n = x.shape
    units = rows * pieces
    cv = np.empty((units, k), x.dtype)
    ci = np.empty((units, k), np.int64)
    cp = np.empty((units, k), np.int64)
    cc = np.empty(units, np.int64)  # empty, not zeros: every entry is written below, and in
    comp = np.empty(units, np.int64)  # a parallel kernel np.zeros is a parallel loop to compile
    step = (n + pieces - 1) // pieces
    for u in prange(units):
        r = u // pieces
        q = u - r * pieces
        s = min(q * step, n)
        e = min(s + step, n)
        cc[u], comp[u] = _unit(
            x[r], xids, has_ids, s, e, k, desc, nanbig, seeded, sv, sid, cv[u], ci[u], cp[u]
        )
    out = np.empty((rows, k), np.int64)
    counts = np.empty(rows, np.int64)
    for r in prange(rows):
        m = 0
        for q in range(pieces):
            m += cc[r * pieces + q]
        v = np.empty(m, x.dtype)
        ii = np.empty(m, np.int64)
        pp = np.empty(m, np.int64)
        m = 0
        for q in range(pieces):
            u = r * pieces + q
            for t in range(cc[u]):
                v[m] = cv[u, t]
                ii[m] = ci[u, t]
                pp[m] = cp[u, t]
                m += 1
        kk = min(k, m)
        _select(v, ii, pp, np.int64(m), kk, desc, nanbig)
        if ordered:
            order = sort_winners(v, ii, np.int64(0), kk, desc, nanbig)
            for t in range(kk):
                out[r, t] = pp[order[t]]
        else:
            for t in range(kk):
                out[r, t] = pp[t]
        for t in range(kk, k):
            out[r, t] = 0
        counts[r] = kk
    compactions = 0
    for u in range(units):
        compactions += comp[u]
    return out, counts, compactions


@numba.njit(nogil=True, cache=True)
def topk_one(x, xids, has_ids, k, desc, nanbig, seeded, sv, sid, ordered):  # type: ignore[no-untyped-def]
    """:func:`topk_rows` for one row on the calling thread (no parallel region).

    Used for small inputs and when the caller runs its own threads: a
    parallel region costs a barrier, and on a busy 2-core machine a barrier
    waits for a descheduled thread (milliseconds per region, measured when
    streaming 100 chunks of 10^6).
    """
    ov = np.empty(k, x.dtype)
    oi = np.empty(k, np.int64)
    op = np.empty(k, np.int64)
    c, comp = _unit(
        x, xids, has_ids, np.int64(0), x.shape[0], k, desc, nanbig, seeded, sv, sid, ov, oi, op
    )
    best = np.empty(c, np.int64)
    if ordered:
        order = sort_winners(ov, oi, np.int64(0), c, desc, nanbig)
        for t in range(c):
            best[t] = op[order[t]]
    else:
        for t in range(c):
            best[t] = op[t]
    return best, comp


# The kernels take ``x`` and ``xids`` read-only, whatever the caller holds
# (propopt.arrays.frozen): a writeable and a read-only input would otherwise
# compile twice.
_topk_rows_kernel = topk_rows
_topk_one_kernel = topk_one


def topk_rows(x, xids, *rest):  # type: ignore[no-untyped-def,no-redef]
    return _topk_rows_kernel(frozen(x), frozen(xids), *rest)


def topk_one(x, xids, *rest):  # type: ignore[no-untyped-def,no-redef]
    return _topk_one_kernel(frozen(x), frozen(xids), *rest)


@numba.njit(nogil=True, cache=True)
def merge_two(v1, i1, v2, i2, k, desc, nanbig):  # type: ignore[no-untyped-def]
    """Merge two lists sorted best first into the best ``k``: which side and where, O(k)."""
    n1 = v1.shape[0]
    n2 = v2.shape[0]
    m = min(k, n1 + n2)
    side = np.empty(m, np.int8)
    at = np.empty(m, np.int64)
    a = 0
    b = 0
    for t in range(m):
        if b >= n2 or (a < n1 and not _better(v2[b], i2[b], v1[a], i1[a], desc, nanbig)):
            side[t] = 0
            at[t] = a
            a += 1
        else:
            side[t] = 1
            at[t] = b
            b += 1
    return side, at
