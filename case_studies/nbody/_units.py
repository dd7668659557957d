"""Tree units: the one scaling Barnes-Hut and the FMM both compute in, and the way back.

Positions are measured from an exact origin (:func:`exact_origin`) in units
of ``2**lexp``, masses in units of ``2**mexp``: powers of two, so that the
scaling is exact and no field that fits in the caller's dtype overflows or
underflows inside the tree.  :func:`to_user` scales the field back, adds
each body's own softened potential where the sum counted it, and refuses
(``OverflowError``) a field that does not fit: in one place for both
methods.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from propopt import morton_order
from propopt.locality import bounding_box

from ._build import build_topology, extent, gather_sources, scatter_field


def root_box(P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounding cube of the bodies, widened by a few ulps so that ``lo + side`` covers them all."""
    if P.shape[0] == 0:
        return np.zeros(3), np.ones(3)
    lo, hi = bounding_box(P)
    side = float((hi - lo)[0])
    pad = 4 * np.finfo(np.float64).eps * max(side, float(np.abs(lo).max()), 1e-300)
    return lo - pad, lo + side + 2 * pad


def exact_origin(P: np.ndarray, lohi: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """A point to measure the bodies from with exact differences ``x - origin``.

    Per axis: the bodies' bound nearest 0 when every coordinate is within a
    factor 2 of it (a box far from 0; by Sterbenz's lemma the difference is
    then exact), else 0 (the box is within about its side of 0, and ``x - 0``
    is ``x``).  The padded box corner would round every coordinate to ~1e-16
    of the box: two bodies 1e-13 apart near a box of side 10 lost 1% of
    their pull.  ``lohi``: the bodies' per-axis (min, max), when known
    (:func:`._build.extent`).
    """
    if P.shape[0] == 0:
        return np.zeros(3)
    lo, hi = extent(P) if lohi is None else lohi
    with np.errstate(over="ignore"):
        return np.where((lo > 0) & (hi <= 2 * lo), lo, np.where((hi < 0) & (lo >= 2 * hi), hi, 0.0))


def split(G: float) -> tuple[float, int]:
    """``G = g 2**e`` with ``1/2 <= |g| < 1`` (``(0, 0)`` for 0): scale by ``g``, then exactly."""
    g, e = math.frexp(float(G))
    return g, e


def pow2(e: int) -> str:
    """``2**e`` for a message: ``'1.0e+10'``, or ``'2**1100'`` beyond float64."""
    return f"{math.ldexp(1.0, e):.1e}" if -1070 < e < 1020 else f"2**{e}"


def length_scale(
    P: np.ndarray, e: np.ndarray, box: Any, lohi: tuple[np.ndarray, np.ndarray] | None = None
) -> float:
    """The length the tree's unit is chosen near: the box side, or for bodies that
    all coincide (one body, say) their largest softening length, so that a
    softening of 1e-103 is not 1e-103 units (its cube would underflow).
    ``lohi`` as for :func:`exact_origin`."""
    side = float(np.max(np.asarray(box[1], float) - np.asarray(box[0], float)))
    if P.shape[0] and e.size and e.max() > 0:
        lo, hi = extent(P) if lohi is None else lohi
        if (lo == hi).all():
            return float(e.max())
    return side


def unit_exponent(x: float) -> int:
    """``e`` with ``2**e`` near ``x`` (0 for 0): dividing by a power of two is exact."""
    if not x > 0:
        return 0
    return int(np.frexp(x)[1]) - 1


def to_user(
    res: np.ndarray, order: np.ndarray, G: float, lexp: int, mexp: int, dtype: Any,
    self_m: np.ndarray, self_e2: np.ndarray, self_coef: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The field in the caller's units and order: ``acc`` (m, 3) and ``pot`` (m,) of ``dtype``.

    ``res`` (m, 4) holds the field in tree units and tree order (rows
    ``ax, ay, az, phi``); row ``i`` belongs to target ``order[i]``.
    ``self_m``, ``self_e2`` (empty when the sum skipped each body's own
    pair): the sum counted body ``i``'s softened self-potential,
    ``-self_coef m_i / sqrt(e2_i)``, which is taken out again.
    """
    m = res.shape[0]
    # a ~ G M / L^2, phi ~ G M / L; G = g 2**ge with 1/2 <= |g| < 1, so that
    # res * g cannot overflow where the field itself does not
    g, ge = split(G)
    ea, ep = mexp - 2 * lexp + ge, mexp - lexp + ge
    acc = np.empty((m, 3), dtype)
    pot = np.empty(m, dtype)
    if max(abs(ea), abs(ep)) < 1000:  # 2**ea, 2**ep are float64 numbers
        ok = scatter_field(res, order, g, 2.0**ea, 2.0**ep, self_m, self_e2, self_coef, acc, pot)
    else:
        if self_m.size:
            with np.errstate(divide="ignore"):
                res[:, 3] += np.where(
                    self_e2 > 0, self_coef * self_m / np.sqrt(np.where(self_e2 > 0, self_e2, 1)), 0
                )
        with np.errstate(over="ignore"):
            a_user = np.ldexp(res[:, :3] * g, ea)
            p_user = np.ldexp(res[:, 3] * g, ep)
        ok = bool(np.isfinite(a_user).all() and np.isfinite(p_user).all())
        acc[order] = a_user
        pot[order] = p_user
    if ok and dtype == np.float32:  # finite in float64, maybe not in float32
        ok = bool(np.isfinite(acc).all() and np.isfinite(pot).all())
    if not ok:
        raise OverflowError(
            f"the field overflows {np.dtype(dtype).name}: bodies up to {pow2(lexp + 1)} apart "
            f"with masses up to {pow2(mexp + 1)} (G={G}) pull harder than "
            f"{np.finfo(dtype).max:.1e}; express positions and masses in larger units"
            + (" or pass float64" if dtype == np.float32 else "")
        )
    return acc, pot


class Bodies(NamedTuple):
    """Bodies in tree units and Morton order, and the octree over them: what Barnes-Hut's
    :class:`~propopt_case_studies.nbody.Octree` and the FMM both build on.

    ``src`` (5, n): rows x, y, z, m, eps^2 in tree units, sorted; ``pos`` the
    same positions as (n, 3); ``order`` the sort (``src[:, k]`` is body
    ``order[k]``); ``start, end, nxt, leaf, level`` the nodes (preorder) of
    :func:`._build.build_topology`, each a run ``start:end`` of sorted bodies.
    """

    src: np.ndarray
    pos: np.ndarray
    order: np.ndarray
    keys: np.ndarray
    start: np.ndarray
    end: np.ndarray
    nxt: np.ndarray
    leaf: np.ndarray
    level: np.ndarray
    box: tuple[np.ndarray, np.ndarray]
    origin: np.ndarray
    lexp: int
    mexp: int


def bodies(P: np.ndarray, m: np.ndarray, e: np.ndarray, leaf_size: int,
           box: Any = None) -> Bodies:  # fmt: skip
    """Sort checked bodies (positions, masses, softening lengths) into tree units and build
    their octree: positions from :func:`exact_origin` in units of ``2**lexp`` (near the
    box side), masses in units of ``2**mexp`` (near the largest)."""
    n = P.shape[0]
    box = root_box(P) if box is None else box
    order, keys = morton_order(P, box, return_keys=True)
    lohi = extent(P) if n else None  # the bodies' exact per-axis bounds
    lexp = unit_exponent(length_scale(P, e, box, lohi))
    mexp = unit_exponent(float(m.max()) if n else 1.0)
    origin = exact_origin(P, lohi)
    src = np.empty((5, n))
    pos = np.empty((n, 3))
    if max(abs(lexp), abs(mexp)) < 1000:  # 2**-lexp, 2**-mexp are float64 numbers
        gather_sources(P, m, e, order, origin, 2.0**-lexp, 2.0**-mexp, src, pos)
    else:
        src[:3] = np.ldexp(P[order].T - origin[:, None], -lexp)
        src[3] = np.ldexp(m[order], -mexp)
        src[4] = np.ldexp(e[order], -lexp) ** 2
        pos[:] = src[:3].T
    start, end, nxt, leaf, level = build_topology(keys, leaf_size)
    return Bodies(src, pos, order, keys, start, end, nxt, leaf, level, box, origin, lexp, mexp)


def targets_in(b: Bodies, T: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Targets ``T`` (m, 3) in ``b``'s tree units and their own Morton order: (positions
    (m, 3) sorted, order, keys)."""
    if T.shape[0] == 0:
        return np.zeros((0, 3)), np.zeros(0, np.int64), np.zeros(0, np.uint64)
    order, keys = morton_order(T, return_keys=True)
    return np.ldexp(T[order] - b.origin, -b.lexp), order, keys
