"""Cartesian Taylor expansions of ``1/r`` to any order: the operators of a fast multipole method.

Separability at a distance: for sources near a centre ``c`` and targets
near a centre ``z``, the softened kernel ``K(r) = (|r|^2 + eps^2)^(-1/2)``
splits into a few numbers per cell.  With multi-indices ``n = (nx, ny, nz)``
of degree ``|n| <= p``, the scaled monomials ``w_n(v) = v^n / n!`` and the
derivatives ``D_n(R) = d^n K / dR^n``:

* **P2M** (multipole of bodies about ``c``):   ``M_n = sum_j m_j w_n(c - x_j)``
* **M2M** (child centre ``c'`` to parent ``c``): ``M_n = sum_{k <= n} M'_k w_{n-k}(c - c')``
* **M2L** (multipole at ``c`` to local at ``z``, ``R = z - c``):
  ``L_k = sum_{|n + k| <= p} M_n D_{n+k}(R)``
* **L2L** (local at ``z`` to ``z' = z + d``): ``L'_j = sum_{k >= j} L_k w_{k-j}(d)``
* **L2P** (local to a target ``x = z + t``): ``psi(x) = sum_k L_k w_k(t)``,
  ``d psi / d x_a = sum_k L_{k+e_a} w_k(t)``

so that ``psi(x) = sum_j m_j K(x - x_j)`` (the potential is ``-G psi``, the
acceleration ``G grad psi``).  The three translations use one table of
index triples ``(s, u, v)`` with ``s = u + v`` (:func:`expansion_tables`):
M2M is ``out[s] += in[u] w[v]``, L2L ``out[u] += in[s] w[v]`` and M2L
``out[u] += M[v] D[s]``.  The derivatives come from the recurrence (the
Leibniz rule applied to ``(|R|^2 + eps^2) dK/dR_i = -R_i K``)::

    |n| s^2 D_n = -(2|n| - 1) sum_i n_i R_i D_{n-e_i} - (|n| - 1) sum_i n_i (n_i - 1) D_{n-2e_i}

with ``s^2 = |R|^2 + eps^2``: exact for the softened kernel too (a uniform
``eps`` is a constant of the differentiation), so a far field expanded this
way carries the same Plummer softening as the near field.

Truncation at degree ``p`` (``|n + k| <= p`` in M2L) leaves a relative
error ``O((r_a + r_b) / |R|)^(p+1)`` for cells of radii ``r_a``, ``r_b``.
Multi-indices are numbered by degree, then lexicographically (``(0,0,0)``,
``(1,0,0)``, ``(0,1,0)``, ``(0,0,1)``, ``(2,0,0)``, ...): ``num_terms(p) =
(p+1)(p+2)(p+3)/6`` coefficients per expansion, and a degree-``q`` prefix of
an expansion is the expansion of degree ``q``.

All kernels are ``@njit(cache=True)`` numba functions, callable from other
numba code (the tree code of ``propopt_case_studies.nbody.fmm``); pass float64
arrays and the tables of :func:`expansion_tables`.  Reference: Warren and
Salmon (1995), "A portable parallel particle program"; Dehnen (2002), "A
hierarchical O(N) force calculation algorithm" (Cartesian FMM).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = [
    "ExpansionTables",
    "derivatives",
    "expansion_tables",
    "l2l",
    "l2p",
    "m2l",
    "m2l_many",
    "m2l_many_scaled",
    "m2m",
    "monomials",
    "multi_indices",
    "num_terms",
    "p2m",
]

MAX_ORDER = 20
"""Highest supported order (``num_terms(20) = 1771`` coefficients)."""


def num_terms(p: int) -> int:
    """Coefficients of an expansion of degree ``p``: ``(p+1)(p+2)(p+3)/6``."""
    return (p + 1) * (p + 2) * (p + 3) // 6


def multi_indices(p: int) -> np.ndarray:
    """``(num_terms(p), 3)`` int64 multi-indices, by degree then lexicographically (x first)."""
    out = []
    for m in range(p + 1):
        for nx in range(m, -1, -1):
            for ny in range(m - nx, -1, -1):
                out.append((nx, ny, m - nx - ny))
    return np.array(out, dtype=np.int64).reshape(-1, 3)


class ExpansionTables(NamedTuple):
    """Index tables of one order ``p`` (NumPy arrays, passed to the numba kernels).

    Attributes
    ----------
    p : int
    nterms : int
    idx : (nterms, 3) int64
        The multi-indices.
    mono : (nterms, 3) float64
        ``(parent term, axis, 1 / n_axis)``: ``w_n = w_parent * v_axis / n_axis``.
    rec1, rec2 : (nterms, 3, 2) float64
        Recurrence of the derivatives: ``(term of n - e_i, coefficient)`` and
        ``(term of n - 2 e_i, coefficient)`` per axis ``i``, coefficients divided by ``|n|``.
    trip : (ntrip, 3) int64
        Triples ``(s, u, v)`` with ``idx[s] = idx[u] + idx[v]``, ``|s| <= p``, sorted by ``u``.
    trip_ptr : (nterms + 1,) int64
        Triples with ``u = k`` are ``trip[trip_ptr[k]:trip_ptr[k + 1]]``.
    grad : (nterms, 3) int64
        Term of ``n + e_a`` for each axis ``a`` (``-1`` when ``|n| = p``).
    """

    p: int
    nterms: int
    idx: np.ndarray
    mono: np.ndarray
    rec1: np.ndarray
    rec2: np.ndarray
    trip: np.ndarray
    trip_ptr: np.ndarray
    grad: np.ndarray


@functools.cache
def expansion_tables(p: int) -> ExpansionTables:
    """The index tables of order ``p`` (``0 <= p <= 20``), computed once per order.

    Examples
    --------
    >>> from propopt.separability.expansions import expansion_tables
    >>> t = expansion_tables(2)
    >>> t.nterms, t.trip.shape[0]
    (10, 28)
    """
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= p <= MAX_ORDER:
        raise ValueError(f"p={p!r}: the expansion order must be an int in [0, {MAX_ORDER}]")
    p = int(p)
    idx = multi_indices(p)
    nt = idx.shape[0]
    where = {tuple(int(v) for v in n): i for i, n in enumerate(idx)}
    mono = np.zeros((nt, 3))
    rec1 = np.zeros((nt, 3, 2))
    rec2 = np.zeros((nt, 3, 2))
    grad = np.full((nt, 3), -1, np.int64)
    for t, n in enumerate(idx):
        m = int(n.sum())
        for a in range(3):
            up = n.copy()
            up[a] += 1
            grad[t, a] = where.get(tuple(int(v) for v in up), -1)
        if m == 0:
            continue
        a = int(np.argmax(n > 0))
        lower = n.copy()
        lower[a] -= 1
        mono[t] = (where[tuple(int(v) for v in lower)], a, 1.0 / n[a])
        for i in range(3):
            if n[i] >= 1:
                d1 = n.copy()
                d1[i] -= 1
                rec1[t, i] = (where[tuple(int(v) for v in d1)], -(2 * m - 1) * n[i] / m)
            if n[i] >= 2:
                d2 = n.copy()
                d2[i] -= 2
                rec2[t, i] = (where[tuple(int(v) for v in d2)], -(m - 1) * n[i] * (n[i] - 1) / m)
    trip = []
    for u in range(nt):
        for v in range(nt):
            s = where.get(tuple(int(q) for q in idx[u] + idx[v]))
            if s is not None:
                trip.append((s, u, v))
    tr = np.array(trip, dtype=np.int64).reshape(-1, 3)
    ptr = np.searchsorted(tr[:, 1], np.arange(nt + 1)).astype(np.int64)
    return ExpansionTables(p, nt, idx, mono, rec1, rec2, tr, ptr, grad)


# ---------------------------------------------------------------- numba kernels
@njit(cache=True, inline="always")
def monomials(vx, vy, vz, mono, out):  # pragma: no cover - numba
    """``out[n] = v^n / n!`` for every term of ``mono`` (an :class:`ExpansionTables` field)."""
    out[0] = 1.0
    for t in range(1, mono.shape[0]):
        a = int(mono[t, 1])
        v = vx if a == 0 else (vy if a == 1 else vz)
        out[t] = out[int(mono[t, 0])] * v * mono[t, 2]


@njit(cache=True)
def p2m(pos, mass, start, stop, cx, cy, cz, mono, out):  # pragma: no cover - numba
    """Add the multipole of ``pos[start:stop]`` (masses ``mass``) about ``c`` to ``out``.

    ``out[n] += sum_j m_j (c - x_j)^n / n!``.
    """
    nt = mono.shape[0]
    w = np.empty(nt)
    for j in range(start, stop):
        monomials(cx - pos[j, 0], cy - pos[j, 1], cz - pos[j, 2], mono, w)
        m = mass[j]
        for t in range(nt):
            out[t] += m * w[t]


@njit(cache=True)
def m2m(child, dx, dy, dz, mono, trip, out):  # pragma: no cover - numba
    """Add the multipole ``child`` moved by ``d = c_parent - c_child`` to ``out`` (the parent's)."""
    w = np.empty(mono.shape[0])
    monomials(dx, dy, dz, mono, w)
    for q in range(trip.shape[0]):
        out[trip[q, 0]] += child[trip[q, 1]] * w[trip[q, 2]]


@njit(cache=True)
def derivatives(rx, ry, rz, eps2, rec1, rec2, out):  # pragma: no cover - numba
    """``out[n] = d^n K / dR^n`` at ``R``, ``K = (|R|^2 + eps2)^(-1/2)`` (``|R|^2 + eps2 > 0``)."""
    s2 = rx * rx + ry * ry + rz * rz + eps2
    inv2 = 1.0 / s2
    out[0] = np.sqrt(inv2)
    for t in range(1, rec1.shape[0]):
        acc = 0.0
        acc += rec1[t, 0, 1] * rx * out[int(rec1[t, 0, 0])]
        acc += rec1[t, 1, 1] * ry * out[int(rec1[t, 1, 0])]
        acc += rec1[t, 2, 1] * rz * out[int(rec1[t, 2, 0])]
        acc += rec2[t, 0, 1] * out[int(rec2[t, 0, 0])]
        acc += rec2[t, 1, 1] * out[int(rec2[t, 1, 0])]
        acc += rec2[t, 2, 1] * out[int(rec2[t, 2, 0])]
        out[t] = acc * inv2


@njit(cache=True)
def m2l(mult, deriv, trip, out):  # pragma: no cover - numba
    """Add the local expansion of ``mult`` to ``out``; ``deriv``: :func:`derivatives` at ``z - c``.

    ``out[k] += sum_n mult[n] deriv[n + k]``.
    """
    for q in range(trip.shape[0]):
        out[trip[q, 1]] += mult[trip[q, 2]] * deriv[trip[q, 0]]


@njit(cache=True)
def l2l(parent, dx, dy, dz, mono, trip, out):  # pragma: no cover - numba
    """Add the local expansion ``parent`` moved by ``d = z_child - z_parent`` to ``out``."""
    w = np.empty(mono.shape[0])
    monomials(dx, dy, dz, mono, w)
    for q in range(trip.shape[0]):
        out[trip[q, 1]] += parent[trip[q, 0]] * w[trip[q, 2]]


@njit(cache=True)
def l2p(local, tx, ty, tz, mono, grad, w):  # pragma: no cover - numba
    """``(psi, dpsi/dx, dpsi/dy, dpsi/dz)`` of a local expansion at offset ``t`` from its centre.

    ``w`` is scratch of length ``nterms``.
    """
    monomials(tx, ty, tz, mono, w)
    psi = 0.0
    gx = 0.0
    gy = 0.0
    gz = 0.0
    for t in range(w.shape[0]):
        psi += local[t] * w[t]
        a = grad[t, 0]
        if a >= 0:
            gx += local[a] * w[t]
            gy += local[grad[t, 1]] * w[t]
            gz += local[grad[t, 2]] * w[t]
    return psi, gx, gy, gz


@njit(cache=True, fastmath=True, error_model="numpy")
def m2l_many(
    mults, srcs, rx, ry, rz, eps2, rec1, rec2, trip, trip_ptr, D, Mt, out
):  # pragma: no cover
    """Add the local expansions of many multipoles at one centre to ``out``.

    ``out[k] += sum_i sum_n mults[srcs[i], n] D_{n+k}(r_i)`` for ``i < len(srcs)``,
    with ``r_i = (rx[i], ry[i], rz[i])`` the offset of the local centre from
    source ``i``'s centre and ``eps2[i]`` its softening.  ``D`` and ``Mt`` are
    scratch of shapes ``(nterms + 1, >= len(srcs))`` and
    ``(nterms, >= len(srcs))``.  The same sums as
    :func:`derivatives` then :func:`m2l` per source, laid out so that every
    inner loop runs over the sources (SIMD lanes).
    """
    S = srcs.shape[0]
    nt = out.shape[0]
    for i in range(S):
        inv2 = 1.0 / (rx[i] * rx[i] + ry[i] * ry[i] + rz[i] * rz[i] + eps2[i])
        D[nt, i] = inv2
        D[0, i] = np.sqrt(inv2)
    for n in range(nt):
        for i in range(S):
            Mt[n, i] = mults[srcs[i], n]
    for t in range(1, nt):
        a0 = int(rec1[t, 0, 0])
        a1 = int(rec1[t, 1, 0])
        a2 = int(rec1[t, 2, 0])
        b0 = int(rec2[t, 0, 0])
        b1 = int(rec2[t, 1, 0])
        b2 = int(rec2[t, 2, 0])
        c0 = rec1[t, 0, 1]
        c1 = rec1[t, 1, 1]
        c2 = rec1[t, 2, 1]
        d0 = rec2[t, 0, 1]
        d1 = rec2[t, 1, 1]
        d2 = rec2[t, 2, 1]
        for i in range(S):
            D[t, i] = (
                c0 * rx[i] * D[a0, i]
                + c1 * ry[i] * D[a1, i]
                + c2 * rz[i] * D[a2, i]
                + d0 * D[b0, i]
                + d1 * D[b1, i]
                + d2 * D[b2, i]
            ) * D[nt, i]
    for k in range(nt):
        acc = 0.0
        for q in range(trip_ptr[k], trip_ptr[k + 1]):
            s = trip[q, 0]
            v = trip[q, 2]
            for i in range(S):
                acc += Mt[v, i] * D[s, i]
        out[k] += acc


@njit(cache=True, fastmath=True, error_model="numpy")
def m2l_many_scaled(
    mults, srcs, rx, ry, rz, eps2, deg, i1, c1, i2, c2, trip, trip_ptr, D, Mt, out
):  # pragma: no cover
    """:func:`m2l_many` in the precision of the scratch ``D``, ``Mt`` (float32: twice the lanes).

    The sums run in units of ``r = min_i |r_i|``: by homogeneity of the
    kernel ``D_n(R) = r^-(|n|+1) D_n'(R / r)`` (softening ``eps / r``), so
    every scaled derivative and multipole is of order one and float32 neither
    overflows nor underflows at any cell size.  ``deg[n] = |n|``; ``i1``,
    ``i2`` (nterms, 3) int64 and ``c1``, ``c2`` (nterms, 3) in the scratch
    dtype are the recurrence of :func:`derivatives` (``rec1``, ``rec2`` split
    into indices and coefficients); ``D`` has ``nterms + 4`` rows.
    Rounding: ~1e-6 relative in float32.
    """
    S = srcs.shape[0]
    nt = out.shape[0]
    r2 = np.inf
    for i in range(S):
        r2 = min(r2, rx[i] * rx[i] + ry[i] * ry[i] + rz[i] * rz[i])
    inv_r = 1.0 / np.sqrt(r2)
    pw = np.empty(deg[nt - 1] + 2)
    pw[0] = 1.0
    for d in range(1, pw.shape[0]):
        pw[d] = pw[d - 1] * inv_r
    for i in range(S):
        x = rx[i] * inv_r
        y = ry[i] * inv_r
        z = rz[i] * inv_r
        inv2 = 1.0 / (x * x + y * y + z * z + eps2[i] * inv_r * inv_r)
        D[nt + 1, i] = x
        D[nt + 2, i] = y
        D[nt + 3, i] = z
        D[nt, i] = inv2
        D[0, i] = np.sqrt(inv2)
    for n in range(nt):
        f = pw[deg[n]]
        for i in range(S):
            Mt[n, i] = mults[srcs[i], n] * f
    for t in range(1, nt):
        a0 = i1[t, 0]
        a1 = i1[t, 1]
        a2 = i1[t, 2]
        b0 = i2[t, 0]
        b1 = i2[t, 1]
        b2 = i2[t, 2]
        k0 = c1[t, 0]
        k1 = c1[t, 1]
        k2 = c1[t, 2]
        h0 = c2[t, 0]
        h1 = c2[t, 1]
        h2 = c2[t, 2]
        for i in range(S):
            D[t, i] = (
                k0 * D[nt + 1, i] * D[a0, i]
                + k1 * D[nt + 2, i] * D[a1, i]
                + k2 * D[nt + 3, i] * D[a2, i]
                + h0 * D[b0, i]
                + h1 * D[b1, i]
                + h2 * D[b2, i]
            ) * D[nt, i]
    zero = c1[0, 0]  # 0 in the scratch dtype: term 0 has no recurrence
    for k in range(nt):
        acc = zero
        for q in range(trip_ptr[k], trip_ptr[k + 1]):
            s = trip[q, 0]
            v = trip[q, 2]
            for i in range(S):
                acc += Mt[v, i] * D[s, i]
        out[k] += acc * pw[deg[k] + 1]
