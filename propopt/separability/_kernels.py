"""Numba building blocks of Cartesian multipoles: moments, merge, evaluation.

All functions are ``@njit(cache=True)`` and callable from other numba code (an
octree's bottom-up pass and its tree walk).  A set of point masses is
described by one *moment row*, a float64 array of ``NMOM = 20`` numbers about
its centre of mass ``c`` (``y_j = x_j - c``):

====== ============================ =====================================
index  name                         value
====== ============================ =====================================
0      mass ``M``                   ``sum m_j``
1:4    centre of mass ``c``         ``sum m_j x_j / M`` (0 when ``M = 0``)
4:10   second moment ``S2``         ``sum m_j y_i y_k``: xx xy xz yy yz zz
10:20  third moment ``S3``          ``sum m_j y_i y_k y_l``: xxx xxy xxz
                                    xyy xyz xzz yyy yyz yzz zzz
====== ============================ =====================================

The dipole about the centre of mass is zero, so it is not stored.  The
traceless quadrupole is ``Q = 3 S2 - tr(S2) I``; the full ``S2`` is kept
because Plummer softening makes the kernel non-harmonic (its Hessian has a
trace ``-3 eps^2 / s^5``) and ``tr(S2) / M`` is the mean squared radius an
opening criterion wants.

Potential and field of a row at offset ``d = target - c`` (G = 1, Plummer
softening ``s^2 = |d|^2 + eps2``), Taylor expansion of ``1/s`` to order p::

    phi = -(M / s + S2:D2 / 2 - S3:D3 / 6)
    a   = -grad phi

with ``D2_ik = d_i d_k g2 - delta_ik g1``, ``D3`` likewise, ``g1 = s^-3``,
``g2 = 3 s^-5``, ``g3 = 15 s^-7``, ``g4 = 105 s^-9``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

NMOM = 20
"""Length of a moment row."""

# Index of the symmetric 3x3 and 3x3x3 components in a row.
_S2 = ((4, 5, 6), (5, 7, 8), (6, 8, 9))


@njit(cache=True, inline="always")
def _centre_of_mass(w, xyz, c0, start, stop, out):  # pragma: no cover - numba
    """Zero ``out[:NMOM]`` and write the total weight and centre of items ``start:stop``.

    Item ``j`` weighs ``w[j]`` and sits at ``xyz[j, c0:c0 + 3]``; ``out[0] = M``
    and ``out[1:4]`` the weighted mean, unless ``M = 0`` (then ``out`` stays
    the zero row).  Returns ``(M, cx, cy, cz)``.
    """
    for q in range(NMOM):
        out[q] = 0.0
    M = 0.0
    cx = 0.0
    cy = 0.0
    cz = 0.0
    for j in range(start, stop):
        wj = w[j]
        M += wj
        cx += wj * xyz[j, c0]
        cy += wj * xyz[j, c0 + 1]
        cz += wj * xyz[j, c0 + 2]
    if M == 0.0:
        return M, cx, cy, cz
    if M < 2.0**-900:
        # products of subnormal weights lose digits (5e-324 * 1.5 is 1e-323):
        # the mean again with the weights scaled by 2^1000, which is exact
        cx = 0.0
        cy = 0.0
        cz = 0.0
        s = 0.0
        for j in range(start, stop):
            wj = w[j] * 2.0**1000
            s += wj
            cx += wj * xyz[j, c0]
            cy += wj * xyz[j, c0 + 1]
            cz += wj * xyz[j, c0 + 2]
        cx /= s
        cy /= s
        cz /= s
    else:
        cx /= M
        cy /= M
        cz /= M
    out[0] = M
    out[1] = cx
    out[2] = cy
    out[3] = cz
    return M, cx, cy, cz


@njit(cache=True)
def moments_of_points(pos, mass, start, stop, out):  # pragma: no cover - numba
    """Moment row of ``pos[start:stop]`` (``(n, 3)`` float64) with masses ``mass``.

    Writes ``out[:NMOM]``.  Two passes (centre, then central moments) so that
    the moments do not lose digits to a far-away origin.  An empty range or a
    zero total mass gives the zero row.
    """
    M, cx, cy, cz = _centre_of_mass(mass, pos, 0, start, stop, out)
    if M == 0.0:
        return
    for j in range(start, stop):
        w = mass[j]
        x = pos[j, 0] - cx
        y = pos[j, 1] - cy
        z = pos[j, 2] - cz
        _add_outer(out, w, x, y, z)


@njit(cache=True, inline="always")
def _add_outer(out, w, x, y, z):  # pragma: no cover - numba
    """Add ``w y (x) y`` and ``w y (x) y (x) y`` for ``y = (x, y, z)`` to a row."""
    wx = w * x
    wy = w * y
    wz = w * z
    out[4] += wx * x
    out[5] += wx * y
    out[6] += wx * z
    out[7] += wy * y
    out[8] += wy * z
    out[9] += wz * z
    out[10] += wx * x * x
    out[11] += wx * x * y
    out[12] += wx * x * z
    out[13] += wx * y * y
    out[14] += wx * y * z
    out[15] += wx * z * z
    out[16] += wy * y * y
    out[17] += wy * y * z
    out[18] += wy * z * z
    out[19] += wz * z * z


@njit(cache=True)
def shift_add(src, cx, cy, cz, out):  # pragma: no cover - numba
    """Add the central moments of row ``src``, re-expressed about ``(cx, cy, cz)``, to ``out[4:]``.

    Parallel-axis theorem with ``d = c_src - c``::

        S2 += S2_src + M d d
        S3 += S3_src + (d_i S2_kl + d_k S2_il + d_l S2_ik) + M d d d

    (the terms with the source's dipole vanish about its centre of mass).
    ``out[:4]`` is left alone: the caller sets mass and centre.
    """
    M = src[0]
    if M == 0.0:
        return
    d0 = src[1] - cx
    d1 = src[2] - cy
    d2 = src[3] - cz
    for q in range(4, NMOM):
        out[q] += src[q]
    _add_outer(out, M, d0, d1, d2)
    # cross terms d_i S2_kl + d_k S2_il + d_l S2_ik, per stored component (i <= k <= l)
    a00 = src[4]
    a01 = src[5]
    a02 = src[6]
    a11 = src[7]
    a12 = src[8]
    a22 = src[9]
    out[10] += 3.0 * d0 * a00
    out[11] += d1 * a00 + 2.0 * d0 * a01
    out[12] += d2 * a00 + 2.0 * d0 * a02
    out[13] += d0 * a11 + 2.0 * d1 * a01
    out[14] += d0 * a12 + d1 * a02 + d2 * a01
    out[15] += d0 * a22 + 2.0 * d2 * a02
    out[16] += 3.0 * d1 * a11
    out[17] += d2 * a11 + 2.0 * d1 * a12
    out[18] += d1 * a22 + 2.0 * d2 * a12
    out[19] += 3.0 * d2 * a22


@njit(cache=True)
def merge_rows(rows, start, stop, out):  # pragma: no cover - numba
    """Moment row of the union of ``rows[start:stop]`` (``(k, NMOM)``), into ``out``.

    ``out`` must not be one of the merged rows.  Zero rows (empty sets) are
    the identity: ``merge(a, 0) = a``.  The law ``moments(A u B) =
    merge(moments(A), moments(B))`` holds up to rounding, and merging is
    associative and commutative.
    """
    M, cx, cy, cz = _centre_of_mass(rows[:, 0], rows, 1, start, stop, out)
    if M == 0.0:
        return
    for r in range(start, stop):
        shift_add(rows[r], cx, cy, cz, out)


@njit(cache=True, parallel=True)
def moments_segments(pos, mass, offsets, out):  # pragma: no cover - numba
    """Leaf moments: ``out[i] = moments_of_points(pos, mass, offsets[i], offsets[i + 1])``.

    ``offsets`` (int64, length ``k + 1``, non-decreasing) cuts Morton-sorted
    particles into contiguous leaves; threads share the leaves.
    """
    for i in prange(offsets.shape[0] - 1):
        moments_of_points(pos, mass, offsets[i], offsets[i + 1], out[i])


@njit(cache=True, parallel=True)
def merge_segments(rows, offsets, out):  # pragma: no cover - numba
    """Parent moments: ``out[i] = merge_rows(rows, offsets[i], offsets[i + 1])``.

    One level of a bottom-up pass: when the children of each parent are
    contiguous in ``rows`` (a level of a Morton-ordered octree), the parents'
    rows are one call.  ``out`` must not overlap ``rows``.
    """
    for i in prange(offsets.shape[0] - 1):
        merge_rows(rows, offsets[i], offsets[i + 1], out[i])


@njit(cache=True, inline="always")
def multipole_accel(row, dx, dy, dz, order, eps2):  # pragma: no cover - numba
    """Field of one moment row at offset ``d = target - centre``: ``(ax, ay, az, phi)``.

    ``order`` is the highest Taylor order kept: 0 or 1 (monopole; the dipole is
    zero about the centre of mass), 2 (quadrupole) or 3 (octupole).  G = 1;
    ``eps2`` is the squared Plummer softening length (0 for none).  The
    truncation error relative to the monopole term is ``O((R/|d|)^(p+1))`` for
    a set of radius ``R``.  A target at the centre of an unsoftened row gives
    inf/NaN, as the direct sum would.
    """
    M = row[0]
    r2 = dx * dx + dy * dy + dz * dz + eps2
    inv = 1.0 / np.sqrt(r2)
    inv2 = inv * inv
    g1 = inv * inv2
    ax = -M * g1 * dx
    ay = -M * g1 * dy
    az = -M * g1 * dz
    phi = -M * inv
    if order >= 2:
        g2 = 3.0 * g1 * inv2
        g3 = 5.0 * g2 * inv2
        s00 = row[4]
        s01 = row[5]
        s02 = row[6]
        s11 = row[7]
        s12 = row[8]
        s22 = row[9]
        sdx = s00 * dx + s01 * dy + s02 * dz
        sdy = s01 * dx + s11 * dy + s12 * dz
        sdz = s02 * dx + s12 * dy + s22 * dz
        dsd = dx * sdx + dy * sdy + dz * sdz
        tr = s00 + s11 + s22
        # phi -= S2:D2 / 2 ; a += grad(S2:D2) / 2
        phi -= 0.5 * (dsd * g2 - tr * g1)
        c1 = 0.5 * (tr * g2 - dsd * g3)
        ax += c1 * dx + g2 * sdx
        ay += c1 * dy + g2 * sdy
        az += c1 * dz + g2 * sdz
        if order >= 3:
            g4 = 7.0 * g3 * inv2
            t000 = row[10]
            t001 = row[11]
            t002 = row[12]
            t011 = row[13]
            t012 = row[14]
            t022 = row[15]
            t111 = row[16]
            t112 = row[17]
            t122 = row[18]
            t222 = row[19]
            # T(d, d)_l = S3_lkm d_k d_m
            tx = (
                t000 * dx * dx
                + t011 * dy * dy
                + t022 * dz * dz
                + 2.0 * (t001 * dx * dy + t002 * dx * dz + t012 * dy * dz)
            )
            ty = (
                t001 * dx * dx
                + t111 * dy * dy
                + t122 * dz * dz
                + 2.0 * (t011 * dx * dy + t012 * dx * dz + t112 * dy * dz)
            )
            tz = (
                t002 * dx * dx
                + t112 * dy * dy
                + t222 * dz * dz
                + 2.0 * (t012 * dx * dy + t022 * dx * dz + t122 * dy * dz)
            )
            tddd = tx * dx + ty * dy + tz * dz
            # trace vector v_l = S3_iil
            vx = t000 + t011 + t022
            vy = t001 + t111 + t122
            vz = t002 + t112 + t222
            vd = vx * dx + vy * dy + vz * dz
            # S3:D3 = -T(d,d,d) g3 + 3 (v.d) g2 ; phi += S3:D3 / 6
            phi += (-tddd * g3 + 3.0 * vd * g2) / 6.0
            # a_l -= S3:D4_l / 6, S3:D4_l = T(ddd) d_l g4 - 3 ((v.d) d_l + T(d,d)_l) g3 + 3 v_l g2
            c3 = (tddd * g4 - 3.0 * vd * g3) / 6.0
            ax -= c3 * dx - 0.5 * g3 * tx + 0.5 * g2 * vx
            ay -= c3 * dy - 0.5 * g3 * ty + 0.5 * g2 * vy
            az -= c3 * dz - 0.5 * g3 * tz + 0.5 * g2 * vz
    return ax, ay, az, phi


@njit(cache=True, parallel=True)
def evaluate_rows(rows, targets, order, eps2, acc, pot):  # pragma: no cover - numba
    """Field of every row at every target: ``acc[t] = sum_r a_r(targets[t])``, ``pot`` likewise.

    ``rows`` ``(k, NMOM)``, ``targets`` ``(t, 3)``, ``acc`` ``(t, 3)`` and
    ``pot`` ``(t,)`` are overwritten.  Threads share the targets.
    """
    for t in prange(targets.shape[0]):
        ax = 0.0
        ay = 0.0
        az = 0.0
        ph = 0.0
        for r in range(rows.shape[0]):
            if rows[r, 0] == 0.0:
                continue
            fx, fy, fz, fp = multipole_accel(
                rows[r],
                targets[t, 0] - rows[r, 1],
                targets[t, 1] - rows[r, 2],
                targets[t, 2] - rows[r, 3],
                order,
                eps2,
            )
            ax += fx
            ay += fy
            az += fz
            ph += fp
        acc[t, 0] = ax
        acc[t, 1] = ay
        acc[t, 2] = az
        pot[t] = ph
