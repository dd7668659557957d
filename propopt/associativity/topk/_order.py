"""The order of top-k, and the selections and sorts the kernels share (numba).

The order is total: ``(a, i)`` beats ``(b, j)`` when ``a`` is better than
``b`` in the requested direction, or the scores are equal and ``i < j``;
with ``nanbig`` a NaN ranks above every number.  ``_select`` (quickselect),
``_sort_order`` (merge sort) and ``_compact`` work by it; ``_row_seed``
gives a unit of a row a starting threshold from a sample of itself.

numba's on-disk cache keys a compiled kernel on the contents of its own
file only, and the kernels of ``_cpu.py`` compile these functions in:
after editing this module, change ``_cpu.DEPENDS_ON`` so that cached
kernels are compiled again.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import overload


@numba.njit(inline="always", cache=True)
def _better(a, ia, b, ib, desc, nanbig):  # type: ignore[no-untyped-def]
    """Does ``(a, ia)`` rank before ``(b, ib)``?  (Distinct numbers decide first.)"""
    if desc:
        if a > b:
            return True
        if a < b:
            return False
    else:
        if a < b:
            return True
        if a > b:
            return False
    # equal, or a NaN is involved (NaNs are only ever held with nanbig)
    an = a != a
    bn = b != b
    if an != bn:
        return an if desc else bn
    return ia < ib


@numba.njit(cache=True)
def _select(v, ids, pos, n, k, desc, nanbig):  # type: ignore[no-untyped-def]
    """Quickselect: permute ``v, ids, pos[:n]`` so that ``[:k]`` holds the best ``k``."""
    lo = 0
    hi = n - 1
    if k >= n:
        return
    rounds = 0
    while lo < hi:
        rounds += 1
        if rounds > 64:  # pathological pivots: finish by sorting the range
            order = _sort_order(v, ids, np.int64(lo), hi + 1, desc, nanbig)
            m = hi + 1 - lo
            tv = np.empty(m, v.dtype)
            ti = np.empty(m, np.int64)
            tp = np.empty(m, np.int64)
            for t in range(m):  # loops, not fancy indexing: it compiles much faster
                q = lo + order[t]
                tv[t] = v[q]
                ti[t] = ids[q]
                tp[t] = pos[q]
            for t in range(m):
                v[lo + t] = tv[t]
                ids[lo + t] = ti[t]
                pos[lo + t] = tp[t]
            return
        mid = lo + (hi - lo) // 2
        # median of three as pivot, moved to ``lo``
        a, b, c = lo, mid, hi
        if _better(v[b], ids[b], v[a], ids[a], desc, nanbig):
            a, b = b, a
        if _better(v[c], ids[c], v[b], ids[b], desc, nanbig):
            b, c = c, b
            if _better(v[b], ids[b], v[a], ids[a], desc, nanbig):
                a, b = b, a
        p = b
        v[lo], v[p] = v[p], v[lo]
        ids[lo], ids[p] = ids[p], ids[lo]
        pos[lo], pos[p] = pos[p], pos[lo]
        pv = v[lo]
        pi = ids[lo]
        i = lo + 1
        j = hi
        while True:
            while i <= j and _better(v[i], ids[i], pv, pi, desc, nanbig):
                i += 1
            while i <= j and _better(pv, pi, v[j], ids[j], desc, nanbig):
                j -= 1
            if i >= j:
                break
            v[i], v[j] = v[j], v[i]
            ids[i], ids[j] = ids[j], ids[i]
            pos[i], pos[j] = pos[j], pos[i]
            i += 1
            j -= 1
        # elements [lo+1, j] beat or tie the pivot; put the pivot at j
        v[lo], v[j] = v[j], v[lo]
        ids[lo], ids[j] = ids[j], ids[lo]
        pos[lo], pos[j] = pos[j], pos[lo]
        if j == k or j == k - 1:
            return
        if j > k:
            hi = j - 1
        else:
            lo = j + 1


@numba.njit(cache=True)
def _sort_order(v, ids, lo, hi, desc, nanbig):  # type: ignore[no-untyped-def]
    """Permutation (from ``lo``) sorting ``(v, ids)[lo:hi]`` best first.

    A bottom-up merge sort by the total order of :func:`_better` (stable, so
    equal pairs keep their order).  It replaced three stable ``np.argsort``
    calls (by id, score and NaN rank): numba compiles a merge sort for each
    dtype and array layout it meets, which took 6-8 s per top-k kernel; this
    one compiles in well under a second.  More than a few hundred winners are
    sorted by ``_radix.sort_winners`` (keys by bytes; this sort only for
    runs of equal scores).
    """
    n = hi - lo
    a = np.arange(n)
    b = np.empty(n, np.int64)
    width = 1
    while width < n:
        for s in range(0, n, 2 * width):
            m = min(s + width, n)
            e = min(s + 2 * width, n)
            i = s
            j = m
            t = s
            while i < m and j < e:
                pi = lo + a[i]
                pj = lo + a[j]
                if _better(v[pj], ids[pj], v[pi], ids[pi], desc, nanbig):
                    b[t] = a[j]
                    j += 1
                else:
                    b[t] = a[i]
                    i += 1
                t += 1
            while i < m:
                b[t] = a[i]
                i += 1
                t += 1
            while j < e:
                b[t] = a[j]
                j += 1
                t += 1
        a, b = b, a
        width *= 2
    return a


@numba.njit(cache=True)
def _compact(v, ids, pos, c, k, desc, nanbig):  # type: ignore[no-untyped-def]
    """Keep the best ``k`` of ``c`` candidates; return the k-th best as the threshold."""
    _select(v, ids, pos, c, k, desc, nanbig)
    t = 0
    for s in range(1, k):
        if _better(v[t], ids[t], v[s], ids[s], desc, nanbig):
            t = s
    return v[t], ids[t]


#: A unit (a row, or a thread's piece of one) of ``ROW_SEED_MIN`` to
#: ``ROW_SEED_MAX`` elements, and at least ``ROW_SEED_PER_K * k``, that starts
#: without a seed takes one from a strided sample of ``max(4k, sqrt(nk)/2)``
#: of its elements (``_row_seed``).  Unseeded, a short row admits most of its
#: elements while the threshold (the k-th of the first ``k``) is low, then
#: selects among them.  One thread, float32: 4000 rows of 1000, k = 10:
#: 46 -> 21 ms (ascending rows 155 -> 22); rows of 50000, k = 50: 8.5 -> 6.8 ms
#: (ascending 23 -> 10); rows shorter than ``16k`` gained nothing measurable.
ROW_SEED_MIN = 256
ROW_SEED_MAX = 1 << 17
ROW_SEED_PER_K = 16

#: A longer unit, of at least ``ROW_SEED_LONG_PER_K * k`` elements, samples
#: only ``8k`` (a sample of ``sqrt(nk)/2`` cost 10^6 random float32, k = 100,
#: 1.6 -> 2.4 ms in cache misses): on random input the threshold rises within
#: the first blocks anyway, but an ascending row no longer admits everything.
#: One thread, float32: ascending 2 * 10^6, k = 1000: 14.8 -> 2.9 ms; 10^6,
#: k = 100: 13.7 -> 2.5 ms; random rows unchanged (2.8 / 2.6 ms, 1.7 / 1.6);
#: integers 0..49 (ties at the k-th) 0.78 -> 0.95 and 0.42 -> 0.47 ms, since
#: every tie of the k-th value is admitted.
ROW_SEED_LONG_PER_K = 512


@numba.njit(inline="always", cache=True)
def row_seeds(n, k):  # type: ignore[no-untyped-def]
    """Does an unseeded unit of ``n`` elements take a seed from its sample?"""
    if n > ROW_SEED_MAX:
        return n >= ROW_SEED_LONG_PER_K * k
    return ROW_SEED_MIN <= n and n >= ROW_SEED_PER_K * k


def _step_worse(v, desc):  # type: ignore[no-untyped-def]
    """The next representable value worse than ``v`` (numba only; see the overload)."""
    raise NotImplementedError


@overload(_step_worse)
def _step_worse_impl(v, desc):  # type: ignore[no-untyped-def]
    cast = np.dtype(str(v)).type
    if isinstance(v, types.Float):
        up, down = cast(np.inf), cast(-np.inf)
        return lambda v, desc: np.nextafter(v, down) if desc else np.nextafter(v, up)
    if isinstance(v, types.Integer):
        return lambda v, desc: cast(v - 1) if desc else cast(v + 1)
    return None


@numba.njit(cache=True)
def _row_seed(x, s, e, k, desc, nanbig):  # type: ignore[no-untyped-def]
    """``(ok, w)``: a value just worse than the k-th best of a strided sample of ``x[s:e]``.

    The sample's best ``k`` are ``k`` elements of the range, so every one of
    the range's best ``k`` is at least as good as the sample's k-th, and
    beats ``(w, -1)``: a seed.  ``ok`` is False when the sample holds fewer
    than ``k`` admissible values, its k-th is NaN, or nothing is worse.
    """
    n = e - s
    m = 8 * k if n > ROW_SEED_MAX else min(n, max(4 * k, int(np.sqrt(n * k)) // 2))
    stride = n // m
    sv = np.empty(m, x.dtype)
    si = np.empty(m, np.int64)
    sp = np.empty(m, np.int64)
    c = np.int64(0)  # not the literal 0: numba would compile _compact for it apart
    for t in range(m):
        v = x[s + t * stride]
        if nanbig or v == v:
            sv[c] = v
            si[c] = t
            sp[c] = t
            c += 1
    if c < k:
        return False, x[s]
    thr, _ = _compact(sv, si, sp, c, k, desc, nanbig)
    w = _step_worse(thr, desc)
    ok = thr == thr and ((w < thr) if desc else (w > thr))
    return ok, w
