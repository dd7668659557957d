"""Numba kernels of the octree: topology from sorted Morton keys, then node moments.

The tree is stored in depth-first pre-order, so a subtree is the contiguous
run ``i .. next[i] - 1`` of nodes (and of particles): a walk needs no stack
(go to ``i + 1`` to open a node, to ``next[i]`` to skip it).  Levels at which
all of a node's particles fall into one child are skipped, so every internal
node has 2..8 children and there are fewer than ``2 n`` nodes; a run of equal
keys (particles closer than ``box / 2^21``, or coincident) becomes one leaf
whatever its size, so coincident particles cannot recurse forever.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from propopt.locality import MORTON_BITS
from propopt.separability import NMOM, merge_rows, moments_segments

BITS = MORTON_BITS[3]  # 21 levels below the root box
_STACK = 8 * (BITS + 2)


@njit(cache=True, inline="always")
def _lower_bound(keys, lo, hi, value, shift):  # pragma: no cover - numba
    """First index in ``[lo, hi)`` with ``keys[i] >> shift >= value``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if (keys[mid] >> shift) < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


def build_topology(keys: np.ndarray, leaf_size: int) -> tuple[np.ndarray, ...]:
    """Pre-order octree over sorted ``keys``: ``(start, end, next, leaf, level)``, trimmed.

    A node with more than ``leaf_size`` particles is split at the first level
    where its keys differ; a node whose keys are all equal is a leaf.
    """
    n = keys.shape[0]
    cap = max(2 * n, 1)
    # allocated here, not in the kernel: numba's np.empty, np.zeros, ... each
    # compile on the first call
    start, end, nxt = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)
    parent, level = np.empty(cap, np.int64), np.empty(cap, np.int64)
    leaf = np.zeros(cap, np.bool_)
    st = np.empty((_STACK, 4), np.int64)
    bounds = np.empty(9, np.int64)
    nn = _topology(keys, leaf_size, start, end, parent, level, leaf, nxt, st, bounds) if n else 0
    return start[:nn].copy(), end[:nn].copy(), nxt[:nn].copy(), leaf[:nn].copy(), level[:nn].copy()


@njit(cache=True)
def _topology(keys, leaf_size, start, end, parent, level, leaf, nxt, st,
              bounds):  # fmt: skip  # pragma: no cover - numba
    """:func:`build_topology` into the given arrays (``n >= 1``); returns the node count."""
    n = keys.shape[0]
    nn = 0
    sp = 1
    st[0, 0] = 0
    st[0, 1] = n
    st[0, 2] = 0
    st[0, 3] = -1
    while sp > 0:
        sp -= 1
        s = st[sp, 0]
        e = st[sp, 1]
        L = st[sp, 2]
        i = nn
        nn += 1
        start[i] = s
        end[i] = e
        parent[i] = st[sp, 3]
        level[i] = L
        if e - s <= leaf_size:
            leaf[i] = True
            continue
        # descend while every key of the node falls into one child
        while L < BITS:
            sh = np.uint64(3 * (BITS - L - 1))
            if (keys[s] >> sh) != (keys[e - 1] >> sh):
                break
            L += 1
        if L >= BITS:
            leaf[i] = True
            level[i] = L
            continue
        level[i] = L
        sh = np.uint64(3 * (BITS - L - 1))
        prefix = (keys[s] >> sh) & ~np.uint64(7)
        bounds[0] = s
        bounds[8] = e
        for d in range(1, 8):
            bounds[d] = _lower_bound(keys, bounds[d - 1], e, prefix | np.uint64(d), sh)
        for d in range(7, -1, -1):
            if bounds[d + 1] > bounds[d]:
                st[sp, 0] = bounds[d]
                st[sp, 1] = bounds[d + 1]
                st[sp, 2] = L + 1
                st[sp, 3] = i
                sp += 1
    for i in range(nn):  # subtree sizes, then next = i + size
        nxt[i] = 1
    for i in range(nn - 1, 0, -1):
        nxt[parent[i]] += nxt[i]
    for i in range(nn):
        nxt[i] += i
    return nn


@njit(cache=True, parallel=True)
def _leaf_extents(pos, mass, e2, start, end, leaves, lo, hi, me2):  # pragma: no cover - numba
    for q in prange(leaves.shape[0]):
        i = leaves[q]
        for a in range(3):
            lo[i, a] = np.inf
            hi[i, a] = -np.inf
        sm = 0.0
        se = 0.0
        for j in range(start[i], end[i]):
            for a in range(3):
                lo[i, a] = min(lo[i, a], pos[j, a])
                hi[i, a] = max(hi[i, a], pos[j, a])
            sm += mass[j]
            se += mass[j] * e2[j]
        me2[i] = se / sm if sm > 0 else 0.0


@njit(cache=True)
def _internal(rows, nxt, leaf, lo, hi, me2):  # pragma: no cover - numba
    """Bottom-up over internal nodes: merge the children's moments, boxes and softening.

    Rows are copied element by element: a slice assignment compiles numba's
    shape-mismatch message (string formatting), 2-3 s of the first call.
    """
    tmp = np.empty((8, NMOM))
    for i in range(rows.shape[0] - 1, -1, -1):
        if leaf[i]:
            continue
        k = 0
        c = i + 1
        se = 0.0
        for a in range(3):
            lo[i, a] = np.inf
            hi[i, a] = -np.inf
        while c < nxt[i]:
            for j in range(NMOM):  # not tmp[k, :] = rows[c, :]: see the docstring
                tmp[k, j] = rows[c, j]
            se += rows[c, 0] * me2[c]
            for a in range(3):
                lo[i, a] = min(lo[i, a], lo[c, a])
                hi[i, a] = max(hi[i, a], hi[c, a])
            k += 1
            c = nxt[c]
        merge_rows(tmp, 0, k, rows[i])
        me2[i] = se / rows[i, 0] if rows[i, 0] > 0 else 0.0


def node_moments(pos, mass, e2, start, end, nxt, leaf):
    """Moment rows (``propopt.separability`` layout), boxes and mean softening of every node.

    Leaves: ``moments_segments`` over their particle ranges (threads); parents:
    ``merge_rows`` of their children (the merge law of the separability module).
    """
    nn = start.shape[0]
    rows = np.zeros((nn, NMOM))
    lo = np.empty((nn, 3))
    hi = np.empty((nn, 3))
    me2 = np.zeros(nn)
    if nn == 0:
        return rows, lo, hi, me2
    leaves = np.flatnonzero(leaf)
    offsets = np.append(start[leaves], end[leaves[-1]]).astype(np.int64)
    leaf_rows = np.empty((leaves.shape[0], NMOM))
    moments_segments(pos, mass, offsets, leaf_rows)
    rows[leaves] = leaf_rows
    _leaf_extents(pos, mass, e2, start, end, leaves, lo, hi, me2)
    _internal(rows, nxt, leaf, lo, hi, me2)
    return rows, lo, hi, me2


@njit(cache=True)
def extent(P):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Per-axis minimum and maximum of the rows of ``P`` (at least one, finite), as float64:
    one pass over the rows (NumPy's ``P.min(axis=0)`` on an ``(n, 3)`` array took 12x as
    long)."""
    d = P.shape[1]
    lo = np.empty(d)
    hi = np.empty(d)
    for k in range(d):
        lo[k] = P[0, k]
        hi[k] = P[0, k]
    for i in range(1, P.shape[0]):
        for k in range(d):
            v = np.float64(P[i, k])
            lo[k] = min(lo[k], v)
            hi[k] = max(hi[k], v)
    return lo, hi


@njit(cache=True, parallel=True)
def gather_sources(P, m, e, order, origin, lscale, mscale, src, pos):  # pragma: no cover - numba
    """The sorted bodies in tree units: ``src`` (5, n) rows x, y, z, m, eps^2; ``pos`` (n, 3).

    ``(P[order] - origin) * lscale``, ``m[order] * mscale`` and
    ``(e[order] * lscale)^2`` with ``lscale``, ``mscale`` powers of two:
    the same bits as ``np.ldexp`` of the NumPy expressions, on threads.
    """
    for k in prange(order.shape[0]):
        j = order[k]
        for a in range(3):
            v = (np.float64(P[j, a]) - origin[a]) * lscale
            src[a, k] = v
            pos[k, a] = v
        src[3, k] = m[j] * mscale
        s = e[j] * lscale
        src[4, k] = s * s


@njit(cache=True, parallel=True)
def scatter_field(
    res, torder, G, ascale, pscale, sm, se2, coef, acc, pot
):  # pragma: no cover - numba
    """Back from tree units and into the targets' input order; False if anything overflows.

    ``acc[torder[t]] = res[t, :3] * G * ascale``, ``pot[torder[t]] = (res[t, 3]
    + self term) * G * pscale``; the self term (``sm`` non-empty: targets are
    the bodies, masses ``sm``, ``eps^2`` ``se2``) is ``coef m / sqrt(eps^2)``
    where ``eps^2 > 0``.  ``ascale``, ``pscale`` are powers of two: the bits of ``np.ldexp``.
    """
    n = torder.shape[0]
    bad = np.zeros(n, np.bool_)
    selfterm = sm.shape[0] > 0
    for t in prange(n):
        p = res[t, 3]
        if selfterm and se2[t] > 0:
            p += coef * sm[t] / np.sqrt(se2[t])
        ax = (res[t, 0] * G) * ascale
        ay = (res[t, 1] * G) * ascale
        az = (res[t, 2] * G) * ascale
        p = (p * G) * pscale
        if not (np.isfinite(ax) and np.isfinite(ay) and np.isfinite(az) and np.isfinite(p)):
            bad[t] = True
        o = torder[t]
        acc[o, 0] = ax
        acc[o, 1] = ay
        acc[o, 2] = az
        pot[o] = p
    return not bad.any()
