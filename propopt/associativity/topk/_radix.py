"""Sorting the k winners of top-k best first: a radix sort of order-preserving keys.

Each score becomes an unsigned key that orders like the score in the
requested direction (float bits with the sign trick, ``-0.0`` as ``+0.0``,
NaN as the best or worst key by the NaN rule; integers with the sign bit
flipped), so a stable LSD radix sort by bytes orders the scores; a byte that
every key shares is skipped, which is most of the high bytes of k winners.
Equal keys are then put in id order by the merge sort of ``_order``,
so the result is the total order of :func:`_order._better` exactly.

Measured on 10^4 random float32 winners: 0.98 ms for the merge sort by
``_better`` alone (its comparisons are branches that mispredict), ~0.1 ms
here.  A copy-based merge sort with insertion-sorted runs reached 0.83 ms,
and one with a branch-free comparison 1.15 ms.

numba's on-disk cache keys a compiled kernel on the contents of its own
file only, and the kernels of ``_cpu.py`` compile this one in: after
editing this module, change ``_cpu.DEPENDS_ON`` so that cached kernels
are compiled again.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import overload

from ._order import _sort_order

#: Below this many pairs the merge sort runs alone (a radix pass costs two
#: passes over the data plus a 256-bucket histogram).
RADIX_ABOVE = 256


def _keys(v, desc, nanbig):  # type: ignore[no-untyped-def]
    """uint64 keys of ``v`` that sort best first (numba only; see the overload)."""
    raise NotImplementedError


@overload(_keys)
def _keys_impl(v, desc, nanbig):  # type: ignore[no-untyped-def]
    dt = v.dtype
    if isinstance(dt, types.Float):
        ftype = np.dtype(str(dt)).type
        utype = np.uint32 if dt.bitwidth == 32 else np.uint64
        sign = np.uint64(1) << np.uint64(dt.bitwidth - 1)
        top = np.uint64((1 << dt.bitwidth) - 1)
        zero = ftype(0.0)

        def impl(v, desc, nanbig):  # type: ignore[no-untyped-def]
            n = v.shape[0]
            w = np.empty(n, v.dtype)
            for t in range(n):
                w[t] = v[t] + zero  # -0.0 -> +0.0: equal scores, equal keys
            u = w.view(utype)
            out = np.empty(n, np.uint64)
            for t in range(n):
                x = np.uint64(u[t])
                if w[t] != w[t]:
                    key = top  # NaN above every number
                elif x & sign:
                    key = ~x & top
                else:
                    key = x | sign
                out[t] = (~key & top) if desc else key
            return out

        return impl
    if isinstance(dt, types.Integer):
        bits = dt.bitwidth
        sign = np.uint64(1) << np.uint64(bits - 1)
        top = np.uint64((1 << bits) - 1)
        itype = np.dtype(str(dt)).type

        def impl(v, desc, nanbig):  # type: ignore[no-untyped-def]
            n = v.shape[0]
            out = np.empty(n, np.uint64)
            for t in range(n):
                key = (np.uint64(itype(v[t])) & top) ^ sign
                out[t] = (~key & top) if desc else key
            return out

        return impl
    return None


@numba.njit(cache=True)
def sort_winners(v, ids, lo, hi, desc, nanbig):  # type: ignore[no-untyped-def]
    """Permutation (from ``lo``) sorting ``(v, ids)[lo:hi]`` best first (= ``_sort_order``)."""
    n = hi - lo
    if n <= RADIX_ABOVE:
        return _sort_order(v, ids, lo, hi, desc, nanbig)
    keys = _keys(v[lo:hi], desc, nanbig)
    perm = np.arange(n)
    tk = np.empty(n, np.uint64)
    tp = np.empty(n, np.int64)
    count = np.empty(257, np.int64)
    for b in range(v.itemsize):
        shift = np.uint64(8 * b)
        count[:] = 0
        for t in range(n):
            count[np.int64((keys[t] >> shift) & np.uint64(255)) + 1] += 1
        if count.max() == n:
            continue  # every key shares this byte
        for d in range(256):
            count[d + 1] += count[d]
        for t in range(n):
            d = np.int64((keys[t] >> shift) & np.uint64(255))
            q = count[d]
            tk[q] = keys[t]
            tp[q] = perm[t]
            count[d] = q + 1
        keys, tk = tk, keys
        perm, tp = tp, perm
    # equal keys (equal scores): smaller id first
    s = 0
    while s < n:
        e = s + 1
        while e < n and keys[e] == keys[s]:
            e += 1
        if e - s > 1:
            rv = np.empty(e - s, v.dtype)
            ri = np.empty(e - s, np.int64)
            rp = np.empty(e - s, np.int64)
            for t in range(s, e):
                rv[t - s] = v[lo + perm[t]]
                ri[t - s] = ids[lo + perm[t]]
                rp[t - s] = perm[t]
            order = _sort_order(rv, ri, np.int64(0), e - s, desc, nanbig)
            for t in range(e - s):
                perm[s + t] = rp[order[t]]
        s = e
    return perm
