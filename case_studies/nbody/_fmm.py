"""Numba kernels of the fast multipole method: tree geometry, passes, traversal, evaluation.

Trees are the pre-order octrees of :mod:`._build` (node ``i``'s children are
``i + 1``, ``next[i + 1]``, ... up to ``next[i]``).  Every expansion operator
comes from :mod:`propopt.separability.expansions`; this module only walks
the trees and schedules them on threads (``prange`` over the cells of one
depth, over target cells, over target leaves).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from propopt.separability.expansions import l2l, l2p, m2l_many, m2m, p2m


@njit(cache=True)
def geometry(x, y, z, w, e2, start, end, nxt, leaf):  # pragma: no cover - numba
    """Per node: tight box centre and radius, weight, weighted mean ``eps^2``, depth, parent."""
    k = start.shape[0]
    lo = np.empty((k, 3))
    hi = np.empty((k, 3))
    wsum = np.zeros(k)
    we2 = np.zeros(k)
    parent = np.full(k, -1, np.int64)
    depth = np.zeros(k, np.int64)
    for i in range(k):
        if not leaf[i]:
            c = i + 1
            while c < nxt[i]:
                parent[c] = i
                depth[c] = depth[i] + 1
                c = nxt[c]
    for i in range(k - 1, -1, -1):
        for a in range(3):
            lo[i, a] = np.inf
            hi[i, a] = -np.inf
        if leaf[i]:
            for j in range(start[i], end[i]):
                lo[i, 0] = min(lo[i, 0], x[j])
                lo[i, 1] = min(lo[i, 1], y[j])
                lo[i, 2] = min(lo[i, 2], z[j])
                hi[i, 0] = max(hi[i, 0], x[j])
                hi[i, 1] = max(hi[i, 1], y[j])
                hi[i, 2] = max(hi[i, 2], z[j])
                wsum[i] += w[j]
                we2[i] += w[j] * e2[j]
        else:
            c = i + 1
            while c < nxt[i]:
                for a in range(3):
                    lo[i, a] = min(lo[i, a], lo[c, a])
                    hi[i, a] = max(hi[i, a], hi[c, a])
                wsum[i] += wsum[c]
                we2[i] += we2[c]
                c = nxt[c]
    ctr = 0.5 * (lo + hi)
    rad = np.empty(k)
    me2 = np.empty(k)
    for i in range(k):
        rad[i] = 0.5 * np.sqrt(
            (hi[i, 0] - lo[i, 0]) ** 2 + (hi[i, 1] - lo[i, 1]) ** 2 + (hi[i, 2] - lo[i, 2]) ** 2
        )
        me2[i] = we2[i] / wsum[i] if wsum[i] > 0 else 0.0
    return ctr, rad, wsum, me2, depth, parent


def by_depth(depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes grouped by depth: ``nodes[ptr[d]:ptr[d + 1]]`` are those at depth ``d``."""
    order = np.argsort(depth, kind="stable").astype(np.int64)
    ptr = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2 if depth.size else 1))
    return order, ptr.astype(np.int64)


@njit(cache=True, parallel=True)
def upward(pos, m, start, end, nxt, leaf, ctr, nodes, ptr, mono, trip, M):  # pragma: no cover
    """Multipoles of every node: P2M at the leaves, M2M into parents, deepest depth first."""
    for d in range(ptr.shape[0] - 2, -1, -1):
        for q in prange(ptr[d], ptr[d + 1]):
            i = nodes[q]
            if leaf[i]:
                p2m(pos, m, start[i], end[i], ctr[i, 0], ctr[i, 1], ctr[i, 2], mono, M[i])
            else:
                c = i + 1
                while c < nxt[i]:
                    m2m(M[c], ctr[i, 0] - ctr[c, 0], ctr[i, 1] - ctr[c, 1], ctr[i, 2] - ctr[c, 2],
                        mono, trip, M[i])  # fmt: skip
                    c = nxt[c]


@njit(cache=True)
def _grow(a, n):  # pragma: no cover - numba
    b = np.empty((2 * a.shape[0], a.shape[1]), a.dtype)
    b[:n] = a[:n]
    return b


@njit(cache=True)
def traverse(tctr, trad, tleaf, tnxt, sctr, srad, sleaf, snxt, sw, theta):  # pragma: no cover
    """Dual-tree traversal: the M2L pairs (well separated) and P2P pairs (two leaves).

    A pair of cells is well separated when ``r_a + r_b < theta |z_a - c_b|``;
    otherwise the larger cell (a leaf never) is split.  Source cells without
    mass are dropped.
    """
    far = np.empty((1024, 2), np.int64)
    near = np.empty((1024, 2), np.int64)
    st = np.empty((1024, 2), np.int64)
    nf = 0
    nn = 0
    sp = 0
    if tctr.shape[0] == 0 or sctr.shape[0] == 0:
        return far[:0], near[:0]
    st[0, 0] = 0
    st[0, 1] = 0
    sp = 1
    while sp > 0:
        sp -= 1
        a = st[sp, 0]
        b = st[sp, 1]
        if sw[b] == 0.0:
            continue
        dx = tctr[a, 0] - sctr[b, 0]
        dy = tctr[a, 1] - sctr[b, 1]
        dz = tctr[a, 2] - sctr[b, 2]
        r = trad[a] + srad[b]
        if r * r < theta * theta * (dx * dx + dy * dy + dz * dz):
            if nf == far.shape[0]:
                far = _grow(far, nf)
            far[nf, 0] = a
            far[nf, 1] = b
            nf += 1
        elif tleaf[a] and sleaf[b]:
            if nn == near.shape[0]:
                near = _grow(near, nn)
            near[nn, 0] = a
            near[nn, 1] = b
            nn += 1
        elif sleaf[b] or (not tleaf[a] and trad[a] >= srad[b]):
            c = a + 1
            while c < tnxt[a]:
                if sp == st.shape[0]:
                    st = _grow(st, sp)
                st[sp, 0] = c
                st[sp, 1] = b
                sp += 1
                c = tnxt[c]
        else:
            c = b + 1
            while c < snxt[b]:
                if sp == st.shape[0]:
                    st = _grow(st, sp)
                st[sp, 0] = a
                st[sp, 1] = c
                sp += 1
                c = snxt[c]
    return far[:nf], near[:nn]


@njit(cache=True)
def csr(pairs, k):  # pragma: no cover - numba
    """Group ``pairs[:, 1]`` by ``pairs[:, 0]`` (counting sort): ``(ptr (k+1,), cols)``."""
    ptr = np.zeros(k + 1, np.int64)
    for q in range(pairs.shape[0]):
        ptr[pairs[q, 0] + 1] += 1
    for i in range(k):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    cols = np.empty(pairs.shape[0], np.int64)
    for q in range(pairs.shape[0]):
        a = pairs[q, 0]
        cols[fill[a]] = pairs[q, 1]
        fill[a] += 1
    return ptr, cols


CHUNK = 64  # sources per batched M2L: two (nterms, 64) scratch blocks stay in L2


@njit(cache=True, parallel=True)
def m2l_pass(
    tctr, tme2, sctr, sme2, ptr, cols, M, rec1, rec2, trip, trip_ptr, L, nblocks
):  # pragma: no cover
    """``L[a] += M2L(M[b])`` for every listed pair, threads over target cells."""
    k = ptr.shape[0] - 1
    nt = M.shape[1]
    for blk in prange(nblocks):
        D = np.empty((nt + 1, CHUNK))
        Mt = np.empty((nt, CHUNK))
        rx = np.empty(CHUNK)
        ry = np.empty(CHUNK)
        rz = np.empty(CHUNK)
        e2 = np.empty(CHUNK)
        for a in range(blk * k // nblocks, (blk + 1) * k // nblocks):
            for q0 in range(ptr[a], ptr[a + 1], CHUNK):
                q1 = min(q0 + CHUNK, ptr[a + 1])
                for q in range(q0, q1):
                    b = cols[q]
                    rx[q - q0] = tctr[a, 0] - sctr[b, 0]
                    ry[q - q0] = tctr[a, 1] - sctr[b, 1]
                    rz[q - q0] = tctr[a, 2] - sctr[b, 2]
                    e2[q - q0] = 0.5 * (tme2[a] + sme2[b])
                m2l_many(M, cols[q0:q1], rx, ry, rz, e2, rec1, rec2, trip, trip_ptr, D, Mt, L[a])


@njit(cache=True, parallel=True)
def downward(ctr, nodes, ptr, parent, mono, trip, L):  # pragma: no cover - numba
    """``L[child] += L2L(L[parent])``, shallowest depth first."""
    for d in range(1, ptr.shape[0] - 1):
        for q in prange(ptr[d], ptr[d + 1]):
            i = nodes[q]
            u = parent[i]
            l2l(L[u], ctr[i, 0] - ctr[u, 0], ctr[i, 1] - ctr[u, 1], ctr[i, 2] - ctr[u, 2],
                mono, trip, L[i])  # fmt: skip


@njit(cache=True, fastmath=True, error_model="numpy", parallel=True)
def evaluate(tx, ty, tz, te2, tstart, tend, tctr, leaves, sx, sy, sz, sm, se2, sstart, send,
             ptr, cols, L, mono, grad, nblocks, out):  # fmt: skip  # pragma: no cover - numba
    """Per target: L2P of its leaf's local expansion plus P2P over the listed source leaves.

    ``out[t] = (dpsi/dx, dpsi/dy, dpsi/dz, psi)`` with ``psi = sum_j m_j / s_tj``.
    """
    nl = leaves.shape[0]
    nt = L.shape[1]
    for blk in prange(nblocks):
        w = np.empty(nt)
        for q in range(blk * nl // nblocks, (blk + 1) * nl // nblocks):
            a = leaves[q]
            for t in range(tstart[a], tend[a]):
                px = tx[t]
                py = ty[t]
                pz = tz[t]
                e = te2[t]
                psi, gx, gy, gz = l2p(L[a], px - tctr[a, 0], py - tctr[a, 1], pz - tctr[a, 2],
                                      mono, grad, w)  # fmt: skip
                for r in range(ptr[a], ptr[a + 1]):
                    b = cols[r]
                    for j in range(sstart[b], send[b]):
                        dx = sx[j] - px
                        dy = sy[j] - py
                        dz = sz[j] - pz
                        s2 = dx * dx + dy * dy + dz * dz + 0.5 * (e + se2[j])
                        inv = 1.0 / np.sqrt(s2) if s2 > 0.0 else 0.0
                        f = sm[j] * inv
                        g = f * inv * inv
                        psi += f
                        gx += g * dx
                        gy += g * dy
                        gz += g * dz
                out[t, 0] = gx
                out[t, 1] = gy
                out[t, 2] = gz
                out[t, 3] = psi
