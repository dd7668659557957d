"""Numba kernel of the grouped tree walk (CPU threads).

One walk per *group* of nearby targets (a leaf of the targets' own octree):
a node is accepted for the whole group when its centre of mass ``c`` is far
from the group's bounding box ``B``,

    dist(c, B) > b_max   and   dist(c, B) * theta > size,

(``size``: longest side of the node's tight box, ``b_max``: distance from
``c`` to the farthest corner of that box, so the expansion converges for
every target in ``B``); a leaf that is not accepted is summed directly.  The
accepted nodes and the near particles are copied into contiguous buffers and
then every target of the group runs down both buffers: two dense loops that
LLVM vectorizes, with the tree's pointer chasing paid once per group.

The near field is :mod:`._near`'s kernel.  In
float32 (``relative``) it counts each target's pairs closer than
:data:`._near.CLOSE` of the group's radius and sums a target that has one
again in float64 (:func:`._near.near_field32`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._near import CLOSE, TINY, near_field, near_field32, near_field_spline

# numba keys the on-disk cache of this file's kernels on this file alone: after editing
# _near.py (its kernels are compiled into the walk), change this line so that they recompile.
DEPENDS_ON = "_near.near_field, near_field32, near_field_spline, CLOSE, TINY"

FAR_CAP = 2048
NEAR_CAP = 4096
PAD = 16
"""Each row of a buffer is this many elements longer than its capacity.  Rows a multiple
of 4 KiB apart alias in the core's memory disambiguation (a load waits for an unrelated
store whose address matches in its low 12 bits): with the far buffer's 13 rows 8 KiB
apart, the walk at 10^6 bodies ran 15% slower on one thread."""


@njit(cache=True, fastmath=True, error_model="numpy", inline="always")
def _far(tx, ty, tz, te, fb, nf, quad, pot, c, out):  # pragma: no cover - numba
    """Monopole (+ quadrupole) of the gathered nodes ``fb[:, :nf]`` at one target.

    Rows of ``fb``: M, offset of the centre (3), ``1.5 S2`` (6), ``eps^2 / 2``,
    ``1.5 tr S2``, ``0.5 tr S2``; ``te`` is the target's ``eps^2 / 2``.  With
    ``u = s^-5``: ``phi = -M / s - u d.(1.5 S2).d + 0.5 tr S2 s^-3`` and
    ``a = (u (1.5 tr S2 - 5 d.(1.5 S2).d / s^2) - M s^-3) d + 2 u (1.5 S2) d``,
    the quadrupole of the softened kernel with its constants folded into the
    node's numbers (fewer multiplications in the loop).  Without ``pot``
    ``out[3]`` is left alone (and the potential's terms are not computed).
    """
    ax = c[0]
    ay = c[0]
    az = c[0]
    ph = c[0]
    one = c[2]
    five = c[4]
    for k in range(nf):
        dx = tx - fb[1, k]
        dy = ty - fb[2, k]
        dz = tz - fb[3, k]
        s2 = dx * dx + dy * dy + dz * dz + (te + fb[10, k])
        inv = one / np.sqrt(s2)
        inv2 = inv * inv
        g1 = inv * inv2
        M = fb[0, k]
        if quad:
            u = g1 * inv2
            sdx = fb[4, k] * dx + fb[5, k] * dy + fb[6, k] * dz
            sdy = fb[5, k] * dx + fb[7, k] * dy + fb[8, k] * dz
            sdz = fb[6, k] * dx + fb[8, k] * dy + fb[9, k] * dz
            dsd = dx * sdx + dy * sdy + dz * sdz
            if pot:
                ph -= M * inv + u * dsd - fb[12, k] * g1
            k1 = u * (fb[11, k] - five * dsd * inv2) - M * g1
            v = u + u
            ax += k1 * dx + v * sdx
            ay += k1 * dy + v * sdy
            az += k1 * dz + v * sdz
        else:
            mg = M * g1
            ax -= mg * dx
            ay -= mg * dy
            az -= mg * dz
            if pot:
                ph -= M * inv
    out[0] += ax
    out[1] += ay
    out[2] += az
    if pot:
        out[3] += ph


@njit(cache=True, fastmath=True, error_model="numpy", inline="always")
def _add_near(tx, ty, tz, te2, nb, nq, c, out):  # pragma: no cover - numba
    """:func:`._near.near_field`, added into ``out`` (``out[3]``: the potential, negative)."""
    psi, gx, gy, gz = near_field(tx, ty, tz, te2, nb, nq, c)
    out[0] += gx
    out[1] += gy
    out[2] += gz
    out[3] -= psi


@njit(cache=True, fastmath=True, error_model="numpy", inline="always")
def _add_near_acc(tx, ty, tz, te2, nb, nq, c, out):  # pragma: no cover - numba
    """:func:`_add_near` without the potential (LLVM drops its sum)."""
    _, gx, gy, gz = near_field(tx, ty, tz, te2, nb, nq, c)
    out[0] += gx
    out[1] += gy
    out[2] += gz


@njit(cache=True, fastmath=True, error_model="numpy", inline="always")
def _add_near32(t, tb, nb, nq, c, thr2, own, tg64, nb64, c64, out):  # pragma: no cover
    """:func:`._near.near_field32` for target ``t``, added into ``out``.

    ``own[t]``: the target's own body is among the gathered ``nb`` (it is
    the one close pair expected).  ``tg64``, ``nb64``: the target and the
    bodies in the tree's float64 coordinates.
    """
    psi, gx, gy, gz = near_field32(
        tb[0, t], tb[1, t], tb[2, t], tb[3, t], nb, nq, c, thr2, c[2] if own[t] else c[0],
        (tg64[0, t], tg64[1, t], tg64[2, t], tg64[3, t]), nb64, c64,
    )  # fmt: skip
    out[0] += gx
    out[1] += gy
    out[2] += gz
    out[3] -= psi


@njit(cache=True, fastmath=True, error_model="numpy")
def _add_near_spline(tx, ty, tz, th2, nb, nq, out):  # pragma: no cover - numba
    """:func:`near_field_spline`, added into ``out`` (``out[3]``: the potential, negative)."""
    psi, gx, gy, gz = near_field_spline(tx, ty, tz, th2, nb, nq)
    out[0] += gx
    out[1] += gy
    out[2] += gz
    out[3] -= psi


@njit(cache=True, fastmath=True, error_model="numpy")
def _flush(
    tb, ng, fb, nf, nb, nq, quad, pot, c, spline, acc, checked, thr2, own, tg64, nb64, c64
):  # fmt: skip  # pragma: no cover - numba
    """Far nodes ``fb[:, :nf]`` and near bodies ``nb[:, :nq]`` at the group's ``ng`` targets.

    With ``checked`` (float32 loops) the near field is :func:`_add_near32`
    (the float64 copies ``tg64``, ``nb64`` for targets with a too-close pair),
    and the spline's near field reads the float64 copies.
    """
    for t in range(ng):
        o = acc[t]
        x = tb[0, t]
        y = tb[1, t]
        z = tb[2, t]
        # a far node is beyond every pair's spline support: Newtonian (no softening)
        te = c[0] if spline else c[1] * tb[3, t]
        if nf and quad and pot:
            _far(x, y, z, te, fb, nf, True, True, c, o)
        elif nf and quad:
            _far(x, y, z, te, fb, nf, True, False, c, o)
        elif nf and pot:
            _far(x, y, z, te, fb, nf, False, True, c, o)
        elif nf:
            _far(x, y, z, te, fb, nf, False, False, c, o)
        if nq and spline and checked:
            _add_near_spline(tg64[0, t], tg64[1, t], tg64[2, t], tg64[3, t], nb64, nq, o)
        elif nq and spline:
            _add_near_spline(x, y, z, tb[3, t], nb, nq, o)
        elif nq and checked:
            _add_near32(t, tb, nb, nq, c, thr2, own, tg64, nb64, c64, o)
        elif nq and pot:
            _add_near(x, y, z, tb[3, t], nb, nq, c, o)
        elif nq:
            _add_near_acc(x, y, z, tb[3, t], nb, nq, c, o)


@njit(cache=True, parallel=True, error_model="numpy")
def walk(
    tgt, gstart, gend, gmax, src, nodes, test, nstart, nend, nxt, leaf, quad, pot, nblocks,
    c, relative, spline, selfpairs, out,
):  # fmt: skip
    """Field of the tree at the targets, one walk per group.  # pragma: no cover - numba

    ``tgt`` (4, t): x, y, z, eps^2 of the (sorted) targets; ``src`` (5, n):
    x, y, z, m, eps^2 of the sorted sources; ``nodes`` (k, 13): M, c (3),
    S2 (6: xx xy xz yy yz zz), mean eps^2, b_max^2, size^2 of each node;
    ``test`` (k, 4): what the traversal reads (a half cache line per node),
    the centre and ``max(b_max^2, size^2 / theta^2)`` (``inf`` at ``theta =
    0``, ``-1`` for a node without mass, which is skipped).  ``out`` (t, 4)
    receives ax, ay, az, phi (G = 1; phi only with ``pot``).  ``c`` = (0, 0.5, 1, 3, 5) in the
    precision of the inner loops (float32 or float64).  With
    ``relative`` the buffers hold coordinates relative to the group's centre
    (float32 keeps its precision for close pairs); without it (float64) they
    hold the tree's coordinates, so that a target's sum does not depend on
    which group it is in: at ``theta = 0`` every grouping of the targets
    (one call or chunks on a Dask cluster) gives the same bits.  With
    ``spline`` the eps^2 columns hold ``h^2`` of pytreegrav's cubic spline,
    ``nodes[:, 13]`` each node's largest ``h``, and a node is used whole only
    when every pair it holds is beyond its support (then Newtonian).
    With ``relative`` the near field is checked for pairs too close for
    float32 (:func:`._near.near_field32`; ``selfpairs``: the targets are the
    sources, in the same order, so each meets itself once).
    """
    ng = gstart.shape[0]
    nnode = nxt.shape[0]
    c64 = np.array([0.0, 0.5, 1.0, 3.0, 5.0])
    cap64 = NEAR_CAP if relative else 1
    for b in prange(nblocks):
        fb = np.empty((13, FAR_CAP + PAD), c.dtype)
        nb = np.empty((5, NEAR_CAP + PAD), c.dtype)
        tb = np.empty((4, gmax), c.dtype)
        acc = np.empty((gmax, 4))
        # float64 copies for the float32 loops' close pairs (see _add_near32)
        nb64 = np.empty((5, cap64 + PAD))
        tg64 = np.empty((4, gmax if relative else 1))
        own = np.zeros(gmax, np.bool_)
        th = np.empty(1, c.dtype)
        for g in range(b * ng // nblocks, (b + 1) * ng // nblocks):
            gs = gstart[g]
            ge = gend[g]
            acc[:] = 0.0
            lx = np.inf
            ly = np.inf
            lz = np.inf
            hx = -np.inf
            hy = -np.inf
            hz = -np.inf
            for t in range(gs, ge):
                lx = min(lx, tgt[0, t])
                ly = min(ly, tgt[1, t])
                lz = min(lz, tgt[2, t])
                hx = max(hx, tgt[0, t])
                hy = max(hy, tgt[1, t])
                hz = max(hz, tgt[2, t])
            gx = 0.5 * (lx + hx) if relative else 0.0
            gy = 0.5 * (ly + hy) if relative else 0.0
            gz = 0.5 * (lz + hz) if relative else 0.0
            # squared radius of the group's box: the float32 loops' closeness scale
            rg2 = 0.25 * ((hx - lx) ** 2 + (hy - ly) ** 2 + (hz - lz) ** 2)
            th[0] = max(CLOSE * CLOSE * rg2, TINY * TINY)
            thr2 = th[0]  # in c.dtype
            gh = 0.0  # the group's largest spline support
            for t in range(gs, ge):
                if spline:
                    gh = max(gh, np.sqrt(tgt[3, t]))
                tb[0, t - gs] = tgt[0, t] - gx
                tb[1, t - gs] = tgt[1, t] - gy
                tb[2, t - gs] = tgt[2, t] - gz
                tb[3, t - gs] = tgt[3, t]
                if relative:
                    for q in range(4):
                        tg64[q, t - gs] = tgt[q, t]
                    own[t - gs] = False
            nf = 0
            nq = 0
            i = 0
            while i < nnode:
                crit = test[i, 3]
                if crit < 0.0:  # no mass
                    i = nxt[i]
                    continue
                cx = test[i, 0]
                cy = test[i, 1]
                cz = test[i, 2]
                dx = max(lx - cx, 0.0, cx - hx)
                dy = max(ly - cy, 0.0, cy - hy)
                dz = max(lz - cz, 0.0, cz - hz)
                d2 = dx * dx + dy * dy + dz * dz
                far = d2 > crit
                if far and spline:  # no pair of group and node within h = max(h_i, h_j)
                    reach = np.sqrt(nodes[i, 11]) + max(gh, nodes[i, 13])
                    far = d2 > reach * reach
                if far:
                    if nf == FAR_CAP:
                        _flush(tb, ge - gs, fb, np.int64(nf), nb, np.int64(0), quad, pot, c,
                               spline, acc, relative, thr2, own, tg64, nb64, c64)  # fmt: skip
                        nf = 0
                    fb[0, nf] = nodes[i, 0]
                    fb[1, nf] = cx - gx
                    fb[2, nf] = cy - gy
                    fb[3, nf] = cz - gz
                    for q in range(4, 10):
                        fb[q, nf] = 1.5 * nodes[i, q]
                    fb[10, nf] = 0.0 if spline else 0.5 * nodes[i, 10]
                    tr = nodes[i, 4] + nodes[i, 7] + nodes[i, 9]
                    fb[11, nf] = 1.5 * tr
                    fb[12, nf] = 0.5 * tr
                    nf += 1
                    i = nxt[i]
                elif leaf[i]:
                    j = nstart[i]
                    while j < nend[i]:
                        if nq == NEAR_CAP:
                            _flush(tb, ge - gs, fb, np.int64(0), nb, np.int64(nq), quad, pot,
                                   c, spline, acc, relative, thr2, own, tg64, nb64,
                                   c64)  # fmt: skip
                            nq = 0
                            own[: ge - gs] = False
                        nb[0, nq] = src[0, j] - gx
                        nb[1, nq] = src[1, j] - gy
                        nb[2, nq] = src[2, j] - gz
                        nb[3, nq] = src[3, j]
                        nb[4, nq] = src[4, j]
                        if relative:
                            for q in range(5):
                                nb64[q, nq] = src[q, j]
                            if selfpairs and gs <= j < ge:
                                own[j - gs] = True
                        nq += 1
                        j += 1
                    i = nxt[i]
                else:
                    i += 1
            _flush(tb, ge - gs, fb, np.int64(nf), nb, np.int64(nq), quad, pot, c, spline, acc,
                   relative, thr2, own, tg64, nb64, c64)  # fmt: skip
            for t in range(gs, ge):
                for q in range(4):
                    out[t, q] = acc[t - gs, q]
