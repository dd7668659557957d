"""The near field of every N-body method: one direct-sum kernel and its checked variant.

The tree walk (:mod:`._walk`), the one-way FMM (:mod:`._fmm`) and the mutual
FMM (:mod:`._mutual`) gather the bodies near a target into one buffer and
run down it with :func:`near_field`: a dense loop that LLVM vectorizes, in
float32 or float64.  The kernels here are compiled with ``fastmath`` as
functions of their own (not inlined into their callers' code), so they keep
it whatever flags the caller was compiled with.

Close pairs in float32.  The float32 loops hold coordinates relative to the
centre of the target's group or leaf, rounded to ~6e-8 of its radius ``R``:
a pair closer than ``1e-7 R`` would round to one point (and be dropped as
coincident), one at ``r`` carries a relative error ``~2.4e-7 R / r``.  The
near loop therefore counts the pairs closer than :data:`CLOSE` ``R``
(:func:`near_field_checked`); a target with any pair but itself that
close (rare: measured 3e-4 to 7e-4 of the targets of Plummer spheres of
10^4 to 10^6 bodies in the walk, 4e-5 to 9e-4 in the FMM's leaves) has its
near field summed again in float64 (:func:`near_field32`), so float32
errs by at most ~2.4e-7 / CLOSE on any pair and only bodies at identical
positions with ``eps = 0`` are skipped.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from propopt.symmetry import spline_kernel

CLOSE = 1e-2
"""Pairs closer than this fraction of the group's (or FMM leaf's) radius are summed in
float64 when the loops run in float32: rounding then errs by at most ~2.4e-5 relative
on any pair summed in float32."""
TINY = 1e-15
"""Pairs closer than this (tree units, the root box ~1) are always re-summed in float64:
their ``r^2`` would be subnormal in float32."""

# called only from other kernels: no wrappers for calls from Python (each took ~0.05 s
# of the first call to compile)
_INTERNAL = dict(no_cpython_wrapper=True, no_cfunc_wrapper=True)


@njit(cache=True, fastmath=True, error_model="numpy", inline="always")
def _pairs(tx, ty, tz, te2, nb, nq, c, thr2):  # pragma: no cover - numba
    """The one loop: ``(psi, gx, gy, gz, close)`` of :func:`near_field_checked`.

    Inlined into the two kernels below, whose flags (``fastmath``) it then
    takes; in :func:`near_field` the count is never read and LLVM drops it.
    """
    psi = c[0]
    gx = c[0]
    gy = c[0]
    gz = c[0]
    close = c[0]
    zero = c[0]
    half = c[1]
    one = c[2]
    for k in range(nq):
        dx = nb[0, k] - tx
        dy = nb[1, k] - ty
        dz = nb[2, k] - tz
        r2 = dx * dx + dy * dy + dz * dz
        s2 = r2 + half * (te2 + nb[4, k])
        inv = one / np.sqrt(s2) if s2 > zero else zero
        close += one if r2 < thr2 else zero
        w = nb[3, k] * inv
        g = w * inv * inv
        psi += w
        gx += g * dx
        gy += g * dy
        gz += g * dz
    return psi, gx, gy, gz, close


@njit(cache=True, fastmath=True, error_model="numpy", **_INTERNAL)
def near_field(tx, ty, tz, te2, nb, nq, c):  # pragma: no cover - numba
    """Direct sum over the gathered near bodies ``nb[:, :nq]`` (x, y, z, m, eps^2 rows).

    ``(sum m / s, sum m d / s^3)`` with ``d`` the offset to each body and
    ``s^2 = |d|^2 + (te2 + eps^2) / 2``; a pair at ``s = 0`` adds nothing.
    Arithmetic in ``c.dtype`` (``c = (0, 0.5, 1, ...)``): float32 runs twice
    the SIMD lanes.
    """
    psi, gx, gy, gz, _ = _pairs(tx, ty, tz, te2, nb, nq, c, c[0])
    return psi, gx, gy, gz


@njit(cache=True, fastmath=True, error_model="numpy", **_INTERNAL)
def near_field_checked(tx, ty, tz, te2, nb, nq, c, thr2):  # pragma: no cover - numba
    """:func:`near_field` and the number of bodies with ``|d|^2 < thr2`` (in ``c.dtype``).

    The float32 loops' test for pairs too close for float32 (see the module
    docstring): the caller sums the target's near field again in float64 when
    it finds more than the target itself (:func:`near_field32`).
    """
    return _pairs(tx, ty, tz, te2, nb, nq, c, thr2)


@njit(cache=True, fastmath=True, error_model="numpy", **_INTERNAL)
def near_field32(tx, ty, tz, te2, nb, nq, c, thr2, allowed, t64, nb64, c64):  # pragma: no cover
    """:func:`near_field_checked` in float32, and in float64 where a pair is too close.

    ``(tx, ty, tz, te2)`` and ``nb`` in float32, ``t64`` (x, y, z, eps^2)
    and ``nb64`` the same target and bodies in float64 (``c64 = (0, 0.5, 1,
    ...)``).  When more than ``allowed`` bodies lie within ``sqrt(thr2)`` of
    the target (1 when its own body is among them) the float64 sum is
    returned.  Returns ``(psi, gx, gy, gz)``.
    """
    psi, gx, gy, gz, close = near_field_checked(tx, ty, tz, te2, nb, nq, c, thr2)
    if close > allowed:
        psi, gx, gy, gz = near_field(t64[0], t64[1], t64[2], t64[3], nb64, nq, c64)
    return psi, gx, gy, gz


@njit(cache=True, fastmath=True, error_model="numpy", **_INTERNAL)
def near_field_spline(tx, ty, tz, th2, nb, nq):  # pragma: no cover - numba
    """The near field with pytreegrav's cubic-spline softening, ``h = max(h_t, h_j)`` (float64).

    ``th2`` and ``nb[4]`` hold ``h^2``; beyond ``h`` a pair is Newtonian
    (:func:`propopt.symmetry.spline_kernel`); a pair at one point with
    ``h = 0`` adds nothing.  Returns ``(psi, gx, gy, gz)`` as
    :func:`near_field` does: ``psi = -sum m p`` (positive), ``grad = sum m g d``.
    """
    psi = 0.0
    gx = 0.0
    gy = 0.0
    gz = 0.0
    for k in range(nq):
        dx = nb[0, k] - tx
        dy = nb[1, k] - ty
        dz = nb[2, k] - tz
        r2 = dx * dx + dy * dy + dz * dz
        h2 = max(th2, nb[4, k])
        if r2 == 0.0 and h2 == 0.0:
            continue
        g, p = spline_kernel(r2, np.sqrt(h2))
        w = nb[3, k]
        psi -= w * p
        gx += w * g * dx
        gy += w * g * dy
        gz += w * g * dz
    return psi, gx, gy, gz
