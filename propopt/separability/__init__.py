"""Separability: low-rank factors and multipole expansions of far fields.

A kernel that is separable at a distance, ``K(x, y) ~= sum_r u_r(x) v_r(y)``
for ``x`` and ``y`` in well-separated sets, is a low-rank matrix there.

Low rank
    :func:`low_rank` (randomized SVD, fixed rank or tolerance, arrays, torch
    tensors or matvec operators) returning a :class:`LowRank`;
    :class:`MatvecOperator` wraps a pair of product functions.

Multipoles (object API)
    :func:`moments` -> :class:`Moments` (mass, centre of mass, quadrupole,
    octupole), ``a + b`` / :func:`merge_moments`, :meth:`Moments.about` (``.shift``),
    :meth:`Moments.field`, ``.potential``, ``.acceleration``.

Multipoles (numba building blocks, callable from other ``@njit`` code)
    A moment row is a float64 array of :data:`NMOM` = 20 numbers (see
    :mod:`propopt.separability._kernels` for the layout).  Pass float64
    arrays (``pos`` ``(n, 3)``, ``mass`` ``(n,)``, rows ``(k, NMOM)``) and int64
    ``offsets``: other dtypes compile another specialization.

    ``moments_of_points(pos, mass, start, stop, out)``
        row of ``pos[start:stop]`` into ``out``.
    ``merge_rows(rows, start, stop, out)``
        row of the union of ``rows[start:stop]`` into ``out``.
    ``shift_add(src, cx, cy, cz, out)``
        add ``src``'s central moments about ``(cx, cy, cz)`` to ``out[4:]``.
    ``moments_segments(pos, mass, offsets, out)``, ``merge_segments(rows, offsets, out)``
        threaded, one row per segment ``offsets[i]:offsets[i + 1]``: leaves
        from Morton-sorted particles, then parents level by level.
    ``multipole_accel(row, dx, dy, dz, order, eps2) -> (ax, ay, az, phi)``
        field of one row at offset ``d = target - centre``.
    ``evaluate_rows(rows, targets, order, eps2, acc, pot)``
        field of all rows at all targets (threaded over targets).

Expansions of any order (:mod:`propopt.separability.expansions`)
    Cartesian Taylor expansions of the softened ``1/r``, the operators of a
    fast multipole method: ``expansion_tables(p)``, ``p2m``, ``m2m``,
    ``derivatives``, ``m2l``, ``l2l``, ``l2p`` (numba, callable from ``@njit`` code).

The exact sum they approximate is :func:`propopt.direct_gravity`.
"""

from . import expansions
from ._kernels import (
    NMOM,
    evaluate_rows,
    merge_rows,
    merge_segments,
    moments_of_points,
    moments_segments,
    multipole_accel,
    shift_add,
)
from .expansions import expansion_tables
from .lowrank import LowRank, MatvecOperator, low_rank
from .multipole import Moments, RawMoments, merge_moments, moments

__all__ = [
    "NMOM",
    "LowRank",
    "MatvecOperator",
    "Moments",
    "RawMoments",
    "evaluate_rows",
    "expansion_tables",
    "expansions",
    "low_rank",
    "merge_moments",
    "merge_rows",
    "merge_segments",
    "moments",
    "moments_of_points",
    "moments_segments",
    "multipole_accel",
    "shift_add",
]
