"""Numba kernels of the fast multipole method: tree geometry, passes, traversal, evaluation.

Trees are the pre-order octrees of :mod:`._build` (node ``i``'s children are
``i + 1``, ``next[i + 1]``, ... up to ``next[i]``).  Every expansion operator
comes from :mod:`propopt.separability.expansions`; this module only walks
the trees, and :func:`propopt.threads.run_threads` runs its kernels on
threads (the cells of one depth, then target subtrees, each taken from a
shared counter).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from propopt.separability.expansions import l2l, l2p, m2l_many_scaled, m2m, p2m
from propopt.threads import take

from ._control import bound
from ._near import CLOSE, TINY, near_field, near_field32, near_field_spline

# numba keys the on-disk cache of this file's kernels on this file alone: after editing
# _near.py or _control.bound (compiled into solve), change this line so that they recompile.
DEPENDS_ON = (
    "_near.near_field, near_field32, near_field_spline, CLOSE, TINY; _control.bound (error "
    "bound of an M2L); propopt.threads.take"
)

# kernels called only from other kernels: no wrappers for calls from Python (each
# took ~0.05 s of the first call to compile)
_INTERNAL = dict(no_cpython_wrapper=True, no_cfunc_wrapper=True)


def geometry(x, y, z, w, e2, start, end, nxt, leaf):
    """Per node: expansion centre, radius, weight, weighted mean ``eps^2``, depth, parent.

    The centre is the weighted mean of the node's points (the centre of mass
    for sources: the dipole of the multipole vanishes), or its box centre
    when the weights are 0; the radius is the largest distance from the
    centre to a point (exact at leaves, at parents the smaller of the
    children's bound ``|c - c_child| + r_child`` and the farthest box corner).
    """
    k = start.shape[0]
    # allocated here, not in the kernel: numba's np.zeros, np.full, ... each
    # compile on the first call
    lo, hi = np.empty((k, 3)), np.empty((k, 3))
    ctr, rad, wsum, we2 = np.zeros((k, 3)), np.zeros(k), np.zeros(k), np.zeros(k)
    me2 = np.empty(k)
    parent, depth = np.full(k, -1, np.int64), np.zeros(k, np.int64)
    _geometry(x, y, z, w, e2, start, end, nxt, leaf, lo, hi, ctr, rad, wsum, we2, me2, parent,
              depth)  # fmt: skip
    return ctr, rad, wsum, me2, depth, parent


@njit(cache=True)
def _geometry(x, y, z, w, e2, start, end, nxt, leaf, lo, hi, ctr, rad, wsum, we2, me2, parent,
              depth):  # fmt: skip  # pragma: no cover - numba
    k = start.shape[0]
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
                ctr[i, 0] += w[j] * x[j]
                ctr[i, 1] += w[j] * y[j]
                ctr[i, 2] += w[j] * z[j]
        else:
            c = i + 1
            while c < nxt[i]:
                for a in range(3):
                    lo[i, a] = min(lo[i, a], lo[c, a])
                    hi[i, a] = max(hi[i, a], hi[c, a])
                    ctr[i, a] += wsum[c] * ctr[c, a]
                wsum[i] += wsum[c]
                we2[i] += we2[c]
                c = nxt[c]
        for a in range(3):
            if wsum[i] > 0:
                ctr[i, a] = min(max(ctr[i, a] / wsum[i], lo[i, a]), hi[i, a])
            else:
                ctr[i, a] = 0.5 * (lo[i, a] + hi[i, a])
        corner = 0.0
        for a in range(3):
            corner += max(hi[i, a] - ctr[i, a], ctr[i, a] - lo[i, a]) ** 2
        r = np.sqrt(corner)
        if leaf[i]:
            r2 = 0.0
            for j in range(start[i], end[i]):
                d2 = (x[j] - ctr[i, 0]) ** 2 + (y[j] - ctr[i, 1]) ** 2 + (z[j] - ctr[i, 2]) ** 2
                r2 = max(r2, d2)
            r = min(r, np.sqrt(r2))
        else:
            rb = 0.0
            c = i + 1
            while c < nxt[i]:
                d = np.sqrt(
                    (ctr[c, 0] - ctr[i, 0]) ** 2 + (ctr[c, 1] - ctr[i, 1]) ** 2
                    + (ctr[c, 2] - ctr[i, 2]) ** 2
                )  # fmt: skip
                rb = max(rb, d + rad[c])
                c = nxt[c]
            r = min(r, rb)
        rad[i] = r
    for i in range(k):
        me2[i] = we2[i] / wsum[i] if wsum[i] > 0 else 0.0


def records(ctr: np.ndarray, rad: np.ndarray, w: np.ndarray, leaf: np.ndarray,
            nxt: np.ndarray, count: np.ndarray) -> np.ndarray:  # fmt: skip
    """``(k, 8)`` node records: ``cx, cy, cz, radius, weight, leaf, next, count``."""
    rec = np.zeros((ctr.shape[0], 8))
    rec[:, :3] = ctr
    rec[:, 3] = rad
    rec[:, 4] = w
    rec[:, 5] = leaf
    rec[:, 6] = nxt
    rec[:, 7] = count
    return rec


def by_depth(depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes grouped by depth: ``nodes[ptr[d]:ptr[d + 1]]`` are those at depth ``d``."""
    order = np.argsort(depth, kind="stable").astype(np.int64)
    ptr = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2 if depth.size else 1))
    return order, ptr.astype(np.int64)


@njit(cache=True, nogil=True)
def upward(counter, q0, q1, pos, m, start, end, nxt, leaf, ctr, nodes, mono, trip,
           M):  # fmt: skip  # pragma: no cover - numba
    """Multipoles of the nodes ``nodes[q0:q1]`` (one depth): P2M at leaves, M2M of children.

    Serial and GIL-free, the next node taken from the shared ``counter``:
    :func:`propopt.threads.run_threads` runs it per depth, deepest first (a parent after its
    children).  Not a ``prange``: the parallel region took about 0.5 s more to
    compile on the first call.
    """
    while True:
        q = q0 + take(counter)
        if q >= q1:
            break
        i = nodes[q]
        if leaf[i]:
            p2m(pos, m, start[i], end[i], ctr[i, 0], ctr[i, 1], ctr[i, 2], mono, M[i])
        else:
            c = i + 1
            while c < nxt[i]:
                m2m(M[c], ctr[i, 0] - ctr[c, 0], ctr[i, 1] - ctr[c, 1], ctr[i, 2] - ctr[c, 2],
                    mono, trip, M[i])  # fmt: skip
                c = nxt[c]


@njit(cache=True, **_INTERNAL)
def _grow(a, n):  # pragma: no cover - numba
    # element loops, not ``b[:n] = a[:n]``: a slice assignment compiles
    # numba's shape-mismatch message (string formatting), 2-3 s of the
    # first call
    b = np.empty((2 * a.shape[0], a.shape[1]), a.dtype)
    for i in range(n):
        for j in range(a.shape[1]):
            b[i, j] = a[i, j]
    return b


@njit(cache=True, **_INTERNAL)
def _traverse(a0, trec, srec, theta, cheap, far, near, st, th, sh, spline, allow, spow,
              binom):  # fmt: skip  # pragma: no cover - numba
    """Dual-tree traversal of target subtree ``a0`` against the source tree.

    ``trec``, ``srec`` (k, 8): per node ``cx, cy, cz, radius, weight, leaf,
    next, count`` (one cache line a visit).  A pair of cells is well
    separated (one M2L, into ``far``) when ``r_a + r_b < theta |z_a - c_b|``
    and, with ``spline``, ``r_a + r_b + max(h_a, h_b) < |z_a - c_b|`` (``th``,
    ``sh``: each node's largest spline support, so that every pair of the two
    cells is Newtonian), and its error bound (:func:`._control.bound`, source
    multipole powers ``spow``, ``binom[k] = C(p, k)``) is at most ``allow[a]``;
    a pair of leaves that is not goes to ``near`` (P2P); otherwise the larger
    cell (a leaf never) is split.  A target leaf takes any source cell
    directly (``near``: its bodies are contiguous) when ``n_a n_b <= cheap``,
    separated or not: then the pairs cost less than an M2L and the descent.
    Source cells without mass are dropped.  Returns the buffers (grown as
    needed) and the pair counts.
    """
    nf = np.int64(0)  # not a literal 0: _grow would also compile for Literal[int](0)
    nn = np.int64(0)
    st[0, 0] = a0
    st[0, 1] = 0
    sp = 1
    th2 = theta * theta
    while sp > 0:
        sp -= 1
        a = st[sp, 0]
        b = st[sp, 1]
        if srec[b, 4] == 0.0:
            continue
        dx = trec[a, 0] - srec[b, 0]
        dy = trec[a, 1] - srec[b, 1]
        dz = trec[a, 2] - srec[b, 2]
        ra = trec[a, 3]
        rb = srec[b, 3]
        r = ra + rb
        aleaf = trec[a, 5] != 0.0
        bleaf = srec[b, 5] != 0.0
        if aleaf and trec[a, 7] * srec[b, 7] <= cheap:
            if nn == near.shape[0]:
                near = _grow(near, nn)
            near[nn, 0] = a
            near[nn, 1] = b
            nn += 1
        elif (
            r * r < th2 * (dx * dx + dy * dy + dz * dz)
            and (not spline or (r + max(th[a], sh[b])) ** 2 < dx * dx + dy * dy + dz * dz)
            and bound(ra, rb, dx * dx + dy * dy + dz * dz, spow[b], binom) <= allow[a]
        ):
            if nf == far.shape[0]:
                far = _grow(far, nf)
            far[nf, 0] = a
            far[nf, 1] = b
            nf += 1
        elif aleaf and bleaf:
            if nn == near.shape[0]:
                near = _grow(near, nn)
            near[nn, 0] = a
            near[nn, 1] = b
            nn += 1
        elif bleaf or (not aleaf and ra >= rb):
            end = int(trec[a, 6])
            c = a + 1
            while c < end:
                if sp == st.shape[0]:
                    st = _grow(st, sp)
                st[sp, 0] = c
                st[sp, 1] = b
                sp += 1
                c = int(trec[c, 6])
        else:
            end = int(srec[b, 6])
            c = b + 1
            while c < end:
                if sp == st.shape[0]:
                    st = _grow(st, sp)
                st[sp, 0] = a
                st[sp, 1] = c
                sp += 1
                c = int(srec[c, 6])
    return far, nf, near, nn, st


@njit(cache=True, **_INTERNAL)
def _group(pairs, npairs, a0, k, ptr, cols):  # pragma: no cover - numba
    """Counting sort of ``pairs[:npairs, 1]`` by ``pairs[:, 0] - a0`` into ``ptr``, ``cols``."""
    for i in range(k + 1):
        ptr[i] = 0
    for q in range(npairs):
        ptr[pairs[q, 0] - a0 + 1] += 1
    for i in range(k):
        ptr[i + 1] += ptr[i]
    for q in range(npairs):
        a = pairs[q, 0] - a0
        cols[ptr[a]] = pairs[q, 1]
        ptr[a] += 1
    for i in range(k, 0, -1):
        ptr[i] = ptr[i - 1]
    ptr[0] = 0


CHUNK = 64  # sources per batched M2L: two (nterms, 64) scratch blocks stay in L2


@njit(cache=True, nogil=True, error_model="numpy")
def solve(counter, items, trec, srec, T, S, M, theta, cheap, rec, mono, trip, mtrip, mptr, grad,
          c, checked, selfpairs, th, sh, spline, L, out, allow, spow,
          binom):  # fmt: skip  # pragma: no cover
    """Everything after the upward pass, one target subtree per item, until no item is left.

    Serial and GIL-free: every thread that runs it takes the next item from the
    shared ``counter`` (one int64, atomic), so threads calling it together split
    the items dynamically (:func:`propopt.threads.run_threads`).  Not a ``prange``: the parallel
    region's code (the body again, inside its scheduler) took about 2.5 s more to
    compile on the first call.

    ``T`` = (ctr, rad, leaf, nxt, start, end, parent, me2, x, y, z, e2) of the
    target tree, ``S`` = (ctr, rad, leaf, nxt, start, end, wsum, me2, x, y,
    z, m, e2) of the source tree, ``trec``, ``srec`` their packed node records
    (:func:`records`); ``trip`` the translation triples of L2L, ``mtrip``, ``mptr``
    those of M2L (grouped by local term).  Per item (a target subtree ``a0``): the
    dual traversal against the whole source tree; the M2L pairs grouped by
    target cell, batched (:func:`m2l_many_scaled`); L2L down the subtree (nothing
    lies above a subtree: the traversal starts at it); at each leaf, L2P and
    P2P over its near leaves' bodies gathered into one buffer, with
    coordinates relative to the leaf's centre in float32 (the tree's own in
    float64, so that ``x_j - x_t`` rounds once).  M2L and P2P run in ``c.dtype``
    (float32 or float64, ``c = (0, 0.5, 1)``); ``rec = (deg, i1, c1, i2, c2)``
    is the derivative recurrence of :func:`m2l_many_scaled` in that dtype.  No two items
    write the same cell or target.  ``out[t] = (dpsi/dx, dpsi/dy, dpsi/dz, psi)``.

    With ``spline`` (float64 only, ``checked`` off) the near field is
    :func:`._near.near_field_spline`, the tree's ``e2`` hold ``h^2`` and the far field
    is Newtonian (the traversal keeps pairs of cells within their largest
    ``h`` of each other for the near field; ``th``, ``sh``).

    ``allow``, ``spow``, ``binom``: the error control of :mod:`._control` (a pair is
    translated only if its bound is at most ``allow`` of its target cell; ``inf``
    there leaves the opening angle alone to decide).

    In float32 the near field counts each target's pairs closer than
    ``CLOSE`` times its leaf's radius; a target with any but itself
    (``selfpairs``: the targets are the sources, in the same order) has its
    near field summed again in float64, from a float64 copy of the buffer
    (:func:`._near.near_field32`).
    """
    tctr, trad, tleaf, tnxt, tstart, tend, tparent, tme2, tx, ty, tz, te2 = T
    sctr, _, _, _, sstart, send, _, sme2, sx, sy, sz, sm, se2 = S
    nt = M.shape[1]
    while True:
        it = take(counter)
        if it >= items.shape[0]:
            break
        a0 = items[it]
        k = tnxt[a0] - a0
        far = np.empty((256, 2), np.int64)
        near = np.empty((256, 2), np.int64)
        st = np.empty((256, 2), np.int64)
        far, nf, near, nn, st = _traverse(a0, trec, srec, theta, cheap, far, near, st, th, sh,
                                          spline, allow, spow, binom)  # fmt: skip
        fptr = np.empty(k + 1, np.int64)
        fcols = np.empty(nf, np.int64)
        _group(far, nf, a0, k, fptr, fcols)
        nptr = np.empty(k + 1, np.int64)
        ncols = np.empty(nn, np.int64)
        _group(near, nn, a0, k, nptr, ncols)
        deg, i1, c1, i2, c2 = rec
        D = np.empty((nt + 4, CHUNK), c.dtype)
        Mt = np.empty((nt, CHUNK), c.dtype)
        rx = np.empty(CHUNK)
        ry = np.empty(CHUNK)
        rz = np.empty(CHUNK)
        e2 = np.empty(CHUNK)
        for a in range(a0, a0 + k):
            for q0 in range(fptr[a - a0], fptr[a - a0 + 1], CHUNK):
                q1 = min(q0 + CHUNK, fptr[a - a0 + 1])
                for q in range(q0, q1):
                    b = fcols[q]
                    rx[q - q0] = tctr[a, 0] - sctr[b, 0]
                    ry[q - q0] = tctr[a, 1] - sctr[b, 1]
                    rz[q - q0] = tctr[a, 2] - sctr[b, 2]
                    e2[q - q0] = 0.5 * (tme2[a] + sme2[b])
                m2l_many_scaled(M, fcols[q0:q1], rx, ry, rz, e2, deg, i1, c1, i2, c2, mtrip, mptr,
                                D, Mt, L[a])  # fmt: skip
            if a > a0:  # pre-order: the parent is done
                u = tparent[a]
                l2l(L[u], tctr[a, 0] - tctr[u, 0], tctr[a, 1] - tctr[u, 1],
                    tctr[a, 2] - tctr[u, 2], mono, trip, L[a])  # fmt: skip
        w = np.empty(nt)
        nb = np.empty((5, 1024), c.dtype)
        nb64 = np.empty((5, 1024 if checked else 1))  # float64 copy for close pairs
        c64 = np.array([0.0, 0.5, 1.0])
        tb = np.empty(5, c.dtype)
        for a in range(a0, a0 + k):
            if not tleaf[a]:
                continue
            nq = np.int64(0)  # not a literal 0: near_field would also compile for Literal[int](0)
            own = False  # the leaf's own bodies are among its near bodies
            for r in range(nptr[a - a0], nptr[a - a0 + 1]):
                b = ncols[r]
                nq += send[b] - sstart[b]
                own = own or (selfpairs and sstart[b] <= tstart[a] < send[b])
            if nq > nb.shape[1]:
                nb = np.empty((5, 2 * nq), c.dtype)
                if checked:
                    nb64 = np.empty((5, 2 * nq))
            ox = tctr[a, 0]
            oy = tctr[a, 1]
            oz = tctr[a, 2]
            # near bodies relative to the leaf's centre in float32 (its precision for
            # close pairs), as they are in float64: d = x_j - x_t rounds once
            bx = ox if checked else 0.0
            by = oy if checked else 0.0
            bz = oz if checked else 0.0
            nq = np.int64(0)
            for r in range(nptr[a - a0], nptr[a - a0 + 1]):
                b = ncols[r]
                for j in range(sstart[b], send[b]):
                    nb[0, nq] = sx[j] - bx
                    nb[1, nq] = sy[j] - by
                    nb[2, nq] = sz[j] - bz
                    nb[3, nq] = sm[j]
                    nb[4, nq] = se2[j]
                    if checked:
                        nb64[0, nq] = sx[j]
                        nb64[1, nq] = sy[j]
                        nb64[2, nq] = sz[j]
                        nb64[3, nq] = sm[j]
                        nb64[4, nq] = se2[j]
                    nq += 1
            # float32: the closeness scale of the leaf's targets, and the count allowed
            tb[4] = max(CLOSE * CLOSE * trad[a] * trad[a], TINY * TINY)
            allowed = 1.0 if own else 0.0
            for t in range(tstart[a], tend[a]):
                px = tx[t]
                py = ty[t]
                pz = tz[t]
                psi, gx, gy, gz = l2p(L[a], px - ox, py - oy, pz - oz, mono, grad, w)
                tb[0] = px - bx
                tb[1] = py - by
                tb[2] = pz - bz
                tb[3] = te2[t]
                if spline:
                    p2, g2x, g2y, g2z = near_field_spline(px, py, pz, te2[t], nb, nq)
                elif checked:
                    p2, g2x, g2y, g2z = near_field32(tb[0], tb[1], tb[2], tb[3], nb, nq, c, tb[4],
                                                     allowed, (px, py, pz, te2[t]), nb64,
                                                     c64)  # fmt: skip
                else:
                    p2, g2x, g2y, g2z = near_field(tb[0], tb[1], tb[2], tb[3], nb, nq, c)
                out[t, 0] = gx + g2x
                out[t, 1] = gy + g2y
                out[t, 2] = gz + g2z
                out[t, 3] = psi + p2
