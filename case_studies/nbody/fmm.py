"""A fast multipole method for softened gravity, with the error as the knob.

Built from propopt's public verbs:

* **Locality** - :func:`propopt.locality.morton_order` sorts bodies (and
  separate targets) along the Z-order curve; the octrees of :mod:`._build`
  are Morton-key prefixes, every cell a contiguous run.
* **Separability** - :mod:`propopt.separability.expansions`: Cartesian
  Taylor expansions of the softened ``1/r`` to order ``p`` (P2M, M2M, M2L,
  L2L, L2P).  A dual-tree traversal pairs target and source cells: a pair
  with ``r_a + r_b < theta |z_a - c_b|`` (radii of the cells' tight boxes)
  is one M2L translation, the larger cell of any other pair is split, and a
  pair of leaves is summed directly (P2P).  Each target's far field is then
  one local expansion of its leaf: ``O(N)`` work for a fixed ``(p, theta)``.
* **Associativity** - the sums are regrouped per target cell, so that the
  M2L and P2P work runs on threads (each taking the next target subtree)
  without write conflicts.
* **Symmetry** - for self-gravity, the mutual method (:mod:`._mutual`,
  :func:`_run_mutual`) visits each pair of cells once for both: one set of
  derivatives gives both local expansions.  ``fmm`` runs it at the
  tolerances of :data:`MUTUAL_TABLES`.

Softening: the near field (P2P) is the exact Plummer sum, pair softening
``eps_ij^2 = (eps_i^2 + eps_j^2) / 2``.  The far field expands the
*softened* kernel ``(|r|^2 + eps^2)^(-1/2)`` (the derivative recurrence is
exact for it) with ``eps^2`` the mean of the two cells' mass-weighted mean
``eps^2``: exact for one softening length, an approximation when lengths
differ within a cell.  With ``softening='spline'`` (pytreegrav's and
Gadget's cubic spline of support ``h``, a pair using ``max(h_i, h_j)``) the
near field sums the spline kernel in float64 and the far field is the
Newtonian expansion, exact because two cells are translated only when
their radii plus the larger ``h`` of their bodies is below their distance.
Measured (N = 2 10^4, the three distributions, ``h`` 2.8e-3 and 3e-2, tol
1e-2, 1e-3, 1e-5): 99th percentiles of 0.04 - 0.92 ``tol``, at 2.6 - 3.9x the
time of Plummer softening at tol 1e-3 (the float32 near field is Plummer's
only).

The knob ``tol`` is a target relative force error, held by error control
(:mod:`._control`): a first pass estimates each target's force; every pair of
cells within the opening angle of a first guess of ``(p, theta)`` (the row
of :data:`TOL_TABLE` at ``GUESS * tol``) is translated only if an a priori
bound of its error, from the source's multipole power and both radii, is at
most ``ETA * tol`` times the smallest estimate among the target cell's
bodies; otherwise the larger cell is split.  This replaced the stricter
parameters and the verifying re-runs that bodies on a line or a plane took
(the table, calibrated on 3-D bodies, gave p99 errors of 1.3 ``tol`` on
planes and up to 300 ``tol`` on softened lines): the bound sees the cancelling
pulls through the small force estimate, whatever the shape.

Tried and kept (2 cores, Plummer sphere): expansion centres at the centre
of mass with the exact largest distance as radius, instead of the tight
box's centre and half-diagonal: the same errors with about half the M2L
and P2P work at N = 2 10^4; M2L batched over up to 64 sources of one target
cell (every inner loop over the sources: 8x faster at p = 12 than one
source at a time); the near field gathered into one buffer per target leaf
(10x faster than looping over the source leaves' ranges); a target leaf
summing a source cell directly when that costs less than an M2L (20% at
N = 3 10^5); leaves of 64 (32, 48, 96, 128 were slower at p = 5 and 8).
One traversal per target subtree replaced a global list of pairs (sorted
by target): no sort, no shared lists, the traversal on threads.
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numba
import numpy as np

from propopt import threads
from propopt.arrays import count, flag, points, real
from propopt.separability.expansions import MAX_ORDER, expansion_tables
from propopt.symmetry import SOFTENINGS
from propopt.symmetry.gravity import check_masses

from . import _control, _fmm, _mutual
from ._args import check_theta, result_dtype
from ._build import build_topology
from ._units import bodies, targets_in, to_user
from .barnes_hut import _check_G, _segment_max, per_body

__all__ = [
    "ETA", "GUESS", "LEAF_SIZE", "MUTUAL_TABLES", "MUTUAL_TOL_TABLE", "MUTUAL_TOL_TABLE_MEDIAN",
    "QUANTILES", "TOL", "TOL_TABLE", "TOL_TABLE_MEDIAN", "fmm", "fmm_parameters",
]  # fmt: skip

TOL = 1e-3
"""Default target relative force error."""
LEAF_SIZE = 64
"""The most bodies in a leaf of the source tree and of the target tree (the same
meaning as :func:`barnes_hut`'s ``leaf_size``, whose default is 32; its target
groups are ``group_size``)."""
NEAR32_TOL = 1e-4
"""From this ``tol`` up, and for a given ``order`` and ``theta`` no more accurate than
this ``tol``'s (:func:`_coarse`), the near field and the M2L sums run in float32
(near-field coordinates relative to each target leaf's centre, M2L in units of each
batch's nearest distance; rounding ~1e-6 relative, 100x below the tolerance).  A target
with a body closer than ``_near.CLOSE`` (1e-2) of its leaf's radius, where float32 would
err by more (by 100% at 1e-7), has its near field summed again in float64."""
GUESS = 3.0
"""A ``tol`` takes the table row of ``GUESS * tol`` as its first guess of ``(p, theta)``:
its order, and its angle as the widest a pair may open; the error control
(:mod:`._control`) then splits every pair whose error bound exceeds its share."""
ETA = {0.99: 0.5, 0.5: 4.0}
"""Per quantile, the share ``eta`` of ``tol`` times a target cell's smallest force estimate
that one pair's error bound may take (:func:`._control.allowance`).  The bound is a worst
case for one interaction; a body's errors add over its ~100-600 interactions, mostly in
different directions: the nine distributions of ``benchmarks.fmm_tol`` (N = 2 10^4, tol
1e-2 to 1e-5) came to at most 0.56 ``tol`` at the 99th percentile and 0.51 at the median
with these (docs/nbody.md, section 6)."""
FIRST = (2, 0.9)
"""``(p, theta)`` of the first pass whose forces scale the allowances (float32; the mutual
method for self-gravity)."""
CHEAP = 0.5
"""A target leaf sums a source cell directly when ``n_a n_b <= CHEAP * (M2L flops)``."""
ITEMS = 256
"""Target subtrees, taken one at a time by the threads (the load balances).  A
constant, not a multiple of the thread count: the cut decides where M2L and
L2L meet, so the results are bit for bit the same on any number of threads."""

TOL_TABLE: tuple[tuple[float, int, float], ...] = (
    # (tol, p, theta): the cheapest (p, theta) whose 99th-percentile relative
    # force error stayed at or below tol / 1.5 on all three distributions of
    # propopt_case_studies.nbody.distributions (Plummer, two clusters + a thin disc,
    # uniform cube), eps = 1e-3, leaves of 64, at N = 2 10^4 (every body) and
    # N = 10^5 (2000 random bodies); cost: the time at N = 10^5.  Measured by
    # ``python -m benchmarks.nbody_accuracy --calibrate --n 20000,100000``.
    # The 99th percentile is 30-1000x the median: it is set by bodies whose
    # acceleration nearly cancels (between the clusters, at the centre) or
    # that see one cell at the edge of the criterion (sparse outskirts).
    (1e-1, 4, 0.8),
    (3e-2, 6, 0.8),
    (1e-2, 6, 0.7),
    (3e-3, 8, 0.8),
    (1e-3, 8, 0.6),
    (3e-4, 9, 0.6),
    (1e-4, 8, 0.5),
    (3e-5, 9, 0.5),
    (1e-5, 10, 0.5),
    (3e-6, 10, 0.4),
    (1e-6, 11, 0.4),
    (3e-7, 12, 0.4),
    (1e-7, 13, 0.4),
)


TOL_TABLE_MEDIAN: tuple[tuple[float, int, float], ...] = (
    # (tol, p, theta): as TOL_TABLE, for the median error (``quantile=0.5``): the
    # cheapest (p, theta) whose median relative force error stayed at or below
    # tol / 1.5 on all three distributions and both sizes; ``python -m
    # benchmarks.nbody_accuracy --calibrate --n 20000,100000`` on a 2-core Xeon
    # (rocketlake), where the p99 rows at 1e-3 asked for (10, 0.8): 2.6x the time
    # of the median's (6, 0.8) over the six runs.
    (1e-1, 2, 0.8),
    (3e-2, 3, 0.8),
    (1e-2, 3, 0.8),
    (3e-3, 4, 0.8),
    (1e-3, 6, 0.8),
    (3e-4, 7, 0.8),
    (1e-4, 7, 0.7),
    (3e-5, 7, 0.6),
    (1e-5, 8, 0.6),
    (3e-6, 9, 0.6),
    (1e-6, 10, 0.6),
    (3e-7, 9, 0.5),
    (1e-7, 11, 0.5),
)

MUTUAL_TOL_TABLE: dict[float, tuple[int, float]] = {
    # tol -> (p, theta) of the mutual method (self-gravity), for the rows of TOL_TABLE
    # where it met tol in less time than the one-way method.  None did: its cheapest
    # parameters for the 99th percentile took 1.03-1.5x the one-way row's time (tol
    # 1e-1 to 1e-3), its tails calling for smaller angles.  Measured by ``python -m
    # benchmarks.nbody_accuracy --calibrate --mutual --n 20000,100000`` (the three
    # distributions, eps 1e-3, orders 1-6, theta 0.3-0.8, 2-core Xeon, rocketlake).
}
MUTUAL_TOL_TABLE_MEDIAN: dict[float, tuple[int, float]] = {
    # as MUTUAL_TOL_TABLE, for the median (quantile=0.5); the same run, the times summed
    # over the six (distribution, N) cases, mutual against the one-way row:
    1e-1: (2, 0.8),  # 0.25 s against (2, 0.8) 0.31 s
    3e-2: (3, 0.8),  # 0.27 s against (3, 0.8) 0.34 s
    1e-2: (3, 0.8),  # 0.27 s against (3, 0.8) 0.34 s
    3e-3: (4, 0.8),  # 0.31 s against (4, 0.8) 0.39 s
    1e-3: (5, 0.7),  # 0.51 s against (6, 0.8) 0.63 s
    3e-4: (5, 0.6),  # 0.69 s against (7, 0.8) 0.80 s
    1e-4: (6, 0.6),  # 0.94 s against (7, 0.7) 1.02 s
    3e-5: (6, 0.5),  # 1.41 s against (7, 0.6) 2.15 s
    1e-5: (6, 0.4),  # 2.21 s against (8, 0.6) 2.66 s
}
MUTUAL_TABLES = {0.99: MUTUAL_TOL_TABLE, 0.5: MUTUAL_TOL_TABLE_MEDIAN}
"""Per quantile, the tolerances whose self-gravity the mutual method computes (:func:`fmm`)."""

QUANTILES = {0.99: TOL_TABLE, 0.5: TOL_TABLE_MEDIAN}
"""The error quantiles ``tol`` can bound (``quantile=``), and the table of each."""


def fmm_parameters(tol: float, quantile: float = 0.99) -> tuple[int, float]:
    """The table row of ``tol``: the cheapest ``(p, theta)`` calibrated on three distributions
    to keep that ``quantile`` of the relative error below ``tol``.

    :func:`fmm` takes the row of ``GUESS * tol`` as its first guess (the order, and the widest
    opening angle) and holds ``tol`` by its error control (:mod:`._control`).

    Self-gravity at a tolerance of :data:`MUTUAL_TABLES` runs the mutual method with that
    table's ``(p, theta)`` instead (docs/nbody.md, section 7)."""
    tol = _check_tol(tol)
    table = _table(quantile)
    for t, p, theta in table:
        if t <= tol:
            return p, theta
    raise ValueError(
        f"tol={tol!r}: below the smallest calibrated tolerance {table[-1][0]:g} for "
        f"quantile={quantile!r}; use propopt.direct_gravity for the exact sum"
    )


def _table(quantile: Any) -> tuple[tuple[float, int, float], ...]:
    if isinstance(quantile, bool) or quantile not in QUANTILES:
        raise ValueError(
            f"quantile={quantile!r} is not one of 0.5, 0.99: tol bounds the median (0.5) or "
            "the 99th percentile (0.99, the default) of the relative force error"
        )
    return QUANTILES[float(quantile)]


def _parameters(tol: float, quantile: float = 0.99) -> tuple[int, float]:
    """:func:`fmm_parameters`, and beyond the table's smallest tolerance one order more
    per factor 3 at its ``theta`` (the table's own step there); the order may then exceed
    ``MAX_ORDER`` (the caller caps it)."""
    t, p, theta = _table(quantile)[-1]
    if tol >= t:
        return fmm_parameters(tol, quantile)
    return p + math.ceil(math.log(t / tol) / math.log(3.0) - 1e-9), theta


def _coarse(p: int, theta: float, quantile: float) -> bool:
    """Whether the expansion ``(p, theta)`` errs, at ``quantile``, at least as much as the
    parameters of a ``tol`` from :data:`NEAR32_TOL` up (a row of that quantile's table with
    an order no lower and an angle no larger): then, as for that ``tol``, the near field and
    the M2L sums run in float32, whose rounding is ~100x below that error."""
    rows = _table(quantile)
    return any(p <= rp and theta >= rt for t, rp, rt in rows if t >= NEAR32_TOL)


def _mutual_choice(selfgravity: bool, tol: float, quantile: float, given: bool, p: int,
                   theta: float) -> tuple[bool, int, float]:  # fmt: skip
    """Whether self-gravity runs the mutual method (:func:`_run_mutual`), and its ``(p, theta)``.

    For a ``tol``: where :data:`MUTUAL_TOL_TABLE` (or its median table) has a row for the
    tolerance :func:`fmm_parameters` lands on, that row, whose calibrated error meets ``tol``
    in less time than the one-way method's row; a given ``order`` and ``theta`` run as the
    tolerance whose row they are.  Separate targets take the one-way method.
    """
    if not selfgravity or _FORCE_MUTUAL is False:
        return False, p, theta
    if _FORCE_MUTUAL:
        return 1 <= p <= _mutual.UNROLLED, p, theta
    if given:  # the parameters of a tol give that tol's result
        return (p, theta) in MUTUAL_TABLES[quantile].values(), p, theta
    rows = MUTUAL_TABLES[quantile]
    for t, _, _ in _table(quantile):
        if t <= tol:
            if t in rows:
                return True, *rows[t]
            break
    return False, p, theta


def _check_tol(tol: Any) -> float:
    tol = real("tol", tol)  # a NumPy scalar or 0-d array too; not '1e-3' or True
    if not (math.isfinite(tol) and 0 < tol < 1):
        raise ValueError(f"tol={tol!r}: the target relative error must be in (0, 1)")
    return tol


@dataclass(frozen=True)
class _Tree:
    """The FMM's view of an octree over sorted points (tree units): each node's geometry.

    Points (Morton order) and nodes (the pre-order octree of :mod:`._build`,
    node ``i``'s points ``start[i]:end[i]``); :meth:`build` makes one.
    """

    order: np.ndarray  # (n,) each sorted point's index among the caller's points
    pos: np.ndarray  # (n, 3) positions
    x: np.ndarray  # (n,) each coordinate, contiguous
    y: np.ndarray
    z: np.ndarray
    w: np.ndarray  # (n,) weights: masses of sources, 1 for targets
    e2: np.ndarray  # (n,) eps^2 (Plummer) or h^2 (spline)
    start: np.ndarray  # (k,) each node's first point
    end: np.ndarray  # (k,) one past its last point
    nxt: np.ndarray  # (k,) the next node after its subtree
    leaf: np.ndarray  # (k,) whether it is a leaf
    ctr: np.ndarray  # (k, 3) expansion centres (:func:`._fmm.geometry`)
    rad: np.ndarray  # (k,) radii about them
    wsum: np.ndarray  # (k,) total weight
    me2: np.ndarray  # (k,) weighted mean eps^2 (0 with spline: the far field is Newtonian)
    parent: np.ndarray  # (k,) parent node (-1 at the root)
    nodes: np.ndarray  # nodes grouped by depth: nodes[ptr[d]:ptr[d + 1]] at depth d
    ptr: np.ndarray
    hmax: np.ndarray  # (k,) largest spline support h in each node (0 without spline)

    @classmethod
    def build(cls, Ps: np.ndarray, ws: np.ndarray, es: np.ndarray, order: np.ndarray,
              topology: tuple[np.ndarray, ...], spline: bool = False) -> _Tree:  # fmt: skip
        """The tree over sorted points ``Ps`` (n, 3) with weights ``ws`` and ``es``.

        ``Ps``, ``ws``, ``es`` are in Morton order (``order``), with the
        nodes ``topology = (start, end, nxt, leaf)`` over them
        (:func:`._units.bodies` for the sources).  ``es``: each point's ``eps^2``
        (Plummer) or ``h^2`` (``spline``: the far field is then Newtonian,
        ``me2 = 0``, and ``hmax`` holds each node's largest ``h`` for the
        traversal).
        """
        start, end, nxt, leaf = topology
        Ps = np.ascontiguousarray(Ps)
        x, y, z = (np.ascontiguousarray(Ps[:, a]) for a in range(3))
        ws, es = np.ascontiguousarray(ws), np.ascontiguousarray(es)
        ctr, rad, wsum, me2, depth, parent = _fmm.geometry(x, y, z, ws, es, start, end, nxt,
                                                           leaf)  # fmt: skip
        nodes, ptr = _fmm.by_depth(depth)
        hmax = np.zeros(start.shape[0])
        if spline and start.shape[0]:
            me2[:] = 0.0
            hmax = np.sqrt(_segment_max(es, start, end))
        return cls(order, Ps, x, y, z, ws, es, start, end, nxt, leaf, ctr, rad, wsum, me2,
                   parent, nodes, ptr, hmax)  # fmt: skip

    def records(self) -> np.ndarray:
        """The packed node records of :func:`._fmm.records` (one cache line a node)."""
        return _fmm.records(self.ctr, self.rad, self.wsum, self.leaf, self.nxt,
                            self.end - self.start)  # fmt: skip


@threads.parallel
def fmm(
    pos: Any,
    mass: Any = None,
    *,
    tol: float = TOL,
    quantile: float = 0.99,
    eps: Any = 0.0,
    targets: Any = None,
    target_eps: Any = None,
    G: float = 1.0,
    potential: bool = False,
    order: int | None = None,
    theta: float | None = None,
    leaf_size: int = LEAF_SIZE,
    softening: str = "plummer",
) -> tuple[np.ndarray, np.ndarray | None]:
    """Gravitational accelerations (and potentials) by a fast multipole method.

    .. math:: a(x) \\approx G \\sum_j m_j (x_j - x) / (|x_j - x|^2 + \\epsilon^2)^{3/2},
              \\quad \\phi(x) \\approx -G \\sum_j m_j / (|x_j - x|^2 + \\epsilon^2)^{1/2}

    Parameters
    ----------
    pos : array (n, 3)
        Finite positions (float32 or float64).
    mass : array (n,) or scalar, optional
        Finite masses ``>= 0`` (1 each by default).  Negative masses are
        refused, as by every gravity verb: a cell's expansion is about its
        centre of mass, which masses of both signs can put anywhere, and the
        error calibration fails (sources of both signs:
        :func:`propopt.pairwise_sum`).
    tol : float
        Target relative force error ``|a - a_exact| / |a_exact|``: the
        error is controlled pair by pair: the table row of ``GUESS * tol``
        (:func:`fmm_parameters`) gives the order and the widest opening angle,
        and a pair is translated only if an a priori bound of its force error
        is at most ``ETA[quantile] * tol`` times the smallest force, estimated
        by a cheap first pass, among its target cell's bodies (:mod:`._control`;
        lines, planes and cusps alike; docs/nbody.md, section 6, gives the
        measured slack).  From 1e-1 to 1e-7.
        From 1e-4 up the near field and the
        M2L sums run in float32 (:data:`NEAR32_TOL`); a target with a body
        closer than 1e-2 of its leaf's radius has its near field summed in
        float64 (rare), so close pairs keep their pull.  Only bodies at one
        position with ``eps = 0`` are skipped (no direction), as in
        :func:`propopt.direct_gravity`.
    quantile : {0.99, 0.5}
        Which error ``tol`` bounds: the 99th percentile (the default, the
        safe choice: it is set by the few bodies whose pulls nearly cancel)
        or the median, what most comparisons quote, from a table of its own
        (:data:`TOL_TABLE_MEDIAN`); the median is typically 10-30x below the
        99th percentile, so the same ``tol`` on the median is much cheaper.
        Self-gravity on the median runs the mutual method (each pair of cells
        visited once for both, the net force 0 to rounding) with the parameters
        of :data:`MUTUAL_TOL_TABLE_MEDIAN`, from ``tol`` 1e-5 up: it was measured
        10-35% faster there.
    eps : float or array (n,)
        Plummer softening length, per body if an array (pair softening
        ``eps_ij^2 = (eps_i^2 + eps_j^2) / 2``, as in :func:`propopt.direct_gravity`),
        or with ``softening='spline'`` the support ``h`` of the cubic spline.
    targets : array (m, 3), optional
        Evaluation points; default the bodies themselves (then ``j = i`` is left out).
    target_eps : float or array (m,), optional
        Softening of the targets (default: ``eps`` when it is one number, else 0).
    G : float
        Gravitational constant.
    potential : bool
        Also compute the potentials.
    order, theta : optional
        Override the expansion order ``p`` and opening angle chosen from ``tol``.
        The near field and the M2L sums run in float32 when ``(order, theta)``
        is no more accurate, at ``quantile``, than the parameters of a ``tol``
        from :data:`NEAR32_TOL` up (:func:`fmm_parameters`), in float64
        otherwise.  Given parameters run without the error control: the
        opening angle alone decides, and ``tol`` is not checked.
        ``theta`` is a real number in ``[0, 1)`` (a NumPy scalar or 0-d array
        too): the expansions of two cells converge only while their radii sum
        to less than their distance; ``theta = 0`` sums every pair directly
        (the exact sum).
    leaf_size : int
        The most bodies in a leaf of the source tree, and targets in a leaf
        of the target tree (the meaning of :meth:`Octree.build`'s
        ``leaf_size``; the default differs: leaves of 64 were the fastest
        here, 32 for the tree's walk).  ``tol``'s table is calibrated with
        leaves of 64.  Measured on the three distributions at N = 5000,
        ``tol`` 1e-2, 1e-3 and 1e-5: leaves of 16 and 32 kept the 99th
        percentile at or below ``tol``; leaves of 8 or fewer add more M2L
        translations per target, and their errors add up (p99 up to 1.8
        ``tol`` with leaves of 8 and 4.8 ``tol`` with leaves of 4, at
        ``tol`` 1e-5).  The same run found 1.2 ``tol`` at the default 64 and
        3.2 ``tol`` with leaves of 128 on the clusters and disc at ``tol``
        1e-5, a size below the table's calibration (N = 2 10^4 and 10^5).

    softening : {'plummer', 'spline'}
        ``'spline'``: pytreegrav's and Gadget's cubic-spline kernel
        (:func:`propopt.symmetry.spline_kernel`), a pair using ``h =
        max(h_i, h_j)`` and Newtonian beyond it, as :meth:`Octree.build` and
        :func:`propopt.direct_gravity` take it.  The near field sums the
        kernel (in float64), the far field expands the Newtonian ``1/r``: a
        pair of cells is translated only when, besides the opening angle,
        their radii plus the larger ``h`` of their bodies is below their
        distance, so that every pair it covers is beyond its support.

    Returns
    -------
    acc : ndarray (m, 3)
        Accelerations.
    pot : ndarray (m,) or None
        Potentials, ``None`` unless ``potential=True``.  float32 when
        positions, masses (and targets) are float32, else float64.

        Always the pair ``(acc, pot)``, as every N-body verb.  Until this
        release ``fmm`` returned the bare ``acc`` array without
        ``potential=True``: such calls now get a tuple (``a = fmm(...)``
        becomes ``a, _ = fmm(...)``).  A return type cannot announce its
        own change with a warning, so this one is listed in docs/nbody.md.

    Notes
    -----
    ``O(n + m)`` for a fixed ``tol`` (plus the ``O(n log n)`` Morton sort);
    the cost grows with ``log(1 / tol)`` through the order ``p`` (M2L costs
    ``~p^6 / 720`` operations).

    Examples
    --------
    >>> import numpy as np
    >>> from propopt_case_studies.nbody import fmm
    >>> from propopt import direct_gravity
    >>> x = np.random.default_rng(0).normal(size=(3000, 3))
    >>> m = np.full(3000, 1 / 3000)
    >>> a, phi = fmm(x, m, eps=0.01, tol=1e-4, potential=True)
    >>> a0, phi0 = direct_gravity(x, m, eps=0.01, potential=True)
    >>> err = np.linalg.norm(a - a0, axis=1) / np.linalg.norm(a0, axis=1)
    >>> bool(np.quantile(err, 0.99) < 1e-4), bool(np.allclose(phi, phi0, rtol=1e-4))
    (True, True)
    >>> fmm(x, m, eps=0.01)[1] is None  # no potential unless asked for
    True

    References
    ----------
    Greengard and Rokhlin (1987); Dehnen (2002), J. Comput. Phys. 179, 27.
    """
    if softening not in SOFTENINGS:
        raise ValueError(
            f"softening={softening!r} is not one of {', '.join(map(repr, SOFTENINGS))}"
        )
    spline = softening == "spline"
    P = points("pos", pos, 3)
    n = P.shape[0]
    m = check_masses(mass, n)
    e = per_body("eps", eps, n, 0.0, "softening lengths")
    leaf_size = count("leaf_size", leaf_size)
    G = _check_G(G)
    potential = flag("potential", potential)
    fmm_parameters(tol, quantile)  # tol and quantile within the calibrated range
    tol, quantile = _check_tol(tol), float(quantile)
    if order is not None:
        if (
            isinstance(order, bool)
            or not isinstance(order, (int, np.integer))
            or not (0 <= order <= MAX_ORDER)
        ):
            raise ValueError(f"order={order!r}: must be an int in [0, {MAX_ORDER}]")
    if theta is not None:
        theta = check_theta(theta, "fmm")
    dtype = result_dtype(P, mass)
    if targets is None and target_eps is not None:
        raise ValueError("target_eps is given without targets: pass targets=, or leave it out")
    T = None
    if targets is not None:
        T = points("targets", targets, 3)
        if T.dtype != np.float32:
            dtype = np.dtype(np.float64)
        te = per_body(
            "target_eps", target_eps, T.shape[0],
            float(e[0]) if n and np.all(e == e[0]) else 0.0, "softening lengths",
        )  # fmt: skip
    # the bodies in tree units (positions of 2**lexp from an exact origin, masses of
    # 2**mexp) and Morton order, with their octree: the tree's own (_units.bodies)
    b = bodies(P, m, e, leaf_size)
    lexp, mexp = b.lexp, b.mexp
    # (p, theta) given, or for a tol the first guess of the row of GUESS * tol, which the
    # error control then checks pair by pair
    given = order is not None or theta is not None
    guess = float(tol) if given else min(GUESS * float(tol), _table(quantile)[0][0])
    p, th = _parameters(guess, quantile)
    p = p if order is None else int(order)
    th = th if theta is None else float(theta)
    near32 = (_coarse(p, th, quantile) if given else tol >= NEAR32_TOL) and not spline
    src = _Tree.build(b.pos, b.src[3], b.src[4], b.order, (b.start, b.end, b.nxt, b.leaf), spline)
    if T is None:
        tgt = src
    else:
        Ts, torder, tkeys = targets_in(b, T)
        start, end, nxt, leaf, _ = build_topology(tkeys, leaf_size)
        te2 = np.ldexp(te[torder], -lexp) ** 2
        tgt = _Tree.build(Ts, np.ones(T.shape[0]), te2, torder, (start, end, nxt, leaf), spline)
    mt = tgt.x.shape[0]
    res = np.zeros((mt, 4))
    mutual, p, th = _mutual_choice(T is None, guess, quantile, given, p, th)
    if mt and n:
        how = _Passes(p, th, near32, T is None, spline, mutual)
        if not given:
            how = how._replace(ctl=_controls(src, tgt, how, float(tol), quantile))
        res = _run(src, tgt, how)
    res[:, 3] = -res[:, 3]  # the expansions sum +m/r: the potential is its negative
    self_m = self_e2 = np.zeros(0)
    if T is None and mt and n and not mutual:  # the one-way P2P counted each body's own 1/eps
        self_m, self_e2 = src.w, src.e2
    acc, pot = to_user(res, tgt.order, G, lexp, mexp, dtype, self_m, self_e2,
                       2.8 if spline else 1.0)  # fmt: skip
    return acc, (pot if potential else None)


def _items(tgt: _Tree, want: int) -> np.ndarray:
    """Disjoint target subtrees covering every target: split the largest until ``want``."""
    start, end, nxt, leaf = tgt.start, tgt.end, tgt.nxt, tgt.leaf
    heap = [(-(int(end[0] - start[0])), 0)]
    done = []
    while heap and len(heap) + len(done) < want:
        _, i = heapq.heappop(heap)
        if leaf[i]:
            done.append(i)
            continue
        c = i + 1
        while c < nxt[i]:
            heapq.heappush(heap, (-(int(end[c] - start[c])), int(c)))
            c = int(nxt[c])
    # largest first: threads take items in order, the small ones fill the gaps
    rest = [i for _, i in sorted(heap)]
    return np.array(rest + done, dtype=np.int64)


@functools.cache
def _m2l_triples(p: int) -> tuple[np.ndarray, np.ndarray]:
    """M2L triples without dipole sources: about its centre of mass a cell has no dipole.

    Source centres are centres of mass (:func:`._fmm.geometry`), so every
    multipole term of degree 1 is 0 up to rounding and its triples
    (``3 C(p + 2, 3)`` of ``C(p + 6, 6)``: 18% at p = 6) are dropped.
    """
    tab = expansion_tables(p)
    keep = tab.idx[tab.trip[:, 2]].sum(axis=1) != 1
    trip = np.ascontiguousarray(tab.trip[keep])
    ptr = np.searchsorted(trip[:, 1], np.arange(tab.nterms + 1)).astype(np.int64)
    return trip, ptr


class _Passes(NamedTuple):
    """How :func:`_run` runs the passes: order, opening angle and the near field's kind."""

    p: int
    theta: float
    near32: bool = False  # the near field and the M2L sums in float32
    selfpairs: bool = False  # targets are the sources: skip each body's pull on itself
    spline: bool = False  # Gadget's spline softening instead of Plummer's
    mutual: bool = False  # self-gravity by mutual cell-pair interactions (_run_mutual)
    ctl: tuple | None = None  # error control (allow, spow, binom): _controls; None: theta only
    first: bool = False  # the first pass of the error control


def _controls(src: _Tree, tgt: _Tree, how: _Passes, tol: float, quantile: float) -> tuple:
    """The error control of a ``tol`` (:mod:`._control`): a first pass at :data:`FIRST` for
    each target's force, then per target node the allowance ``ETA tol a_min``, per source
    node its multipole powers to the order ``how.p``, and ``C(p, k)``."""
    first = _run(src, tgt, how._replace(p=FIRST[0], theta=FIRST[1], near32=not how.spline,
                                        mutual=how.selfpairs, first=True))  # fmt: skip
    allow = _control.allowance(np.sqrt((first[:, :3] ** 2).sum(axis=1)), tgt.start, tgt.end,
                               tgt.nxt, tgt.leaf, tol, ETA[quantile], quantile)  # fmt: skip
    spow = _control.power(src.x, src.y, src.z, src.w, src.start, src.end, src.nxt, src.leaf,
                          src.ctr, src.rad, src.wsum, how.p)  # fmt: skip
    return allow, spow, _control.binomials(how.p)


def _no_control(src: _Tree, tgt: _Tree, p: int) -> tuple:
    """Allowances that let every pair within the opening angle through."""
    return (np.full(tgt.start.shape[0], np.inf), np.zeros((src.start.shape[0], p + 1)),
            np.ones(p + 1))  # fmt: skip


def _upward(src: _Tree, tab: Any) -> np.ndarray:
    """Every node's multipole about its centre of mass, deepest nodes first, on threads."""
    M = np.zeros((src.start.shape[0], tab.nterms))
    nthreads = numba.get_num_threads()
    ptr = src.ptr
    for d in range(ptr.shape[0] - 2, -1, -1):  # deepest first: children before parents
        threads.run_threads(_fmm.upward, min(nthreads, int(ptr[d + 1] - ptr[d])), ptr[d],
                         ptr[d + 1], src.pos, src.w, src.start, src.end, src.nxt,
                         src.leaf, src.ctr, src.nodes, tab.mono, tab.trip, M)  # fmt: skip
    return M


_FORCE_MUTUAL: bool | None = None  # the calibration's switch: None decides by the tables
MUTUAL_ITEMS = 64
"""Subtrees the mutual method's tasks pair up (:func:`_schedule`): a constant, so that
the result does not depend on the thread count."""


def _run_mutual(src: _Tree, how: _Passes, counts: list | None = None) -> np.ndarray:
    """Self-gravity by mutual interactions (:mod:`._mutual`): ``(n, 4)`` grad psi and psi."""
    p, theta = how.p, how.theta
    tab = expansion_tables(p)
    M = _upward(src, tab)
    k, n = src.start.shape[0], src.x.shape[0]
    L = np.zeros((k, tab.nterms))
    out = np.zeros((4, n))
    items = np.sort(_items(src, MUTUAL_ITEMS))  # pre-order: disjoint subtrees, left to right
    rec = src.records()
    # body pairs that cost less than one mutual M2L, in units of a pair (~25 flops)
    cheap = MUTUAL_CHEAP * (2 * tab.trip.shape[0] + 8 * tab.nterms) / 25.0
    interact = _mutual.kernels(p).interact
    # theta = 0: nothing is separated, every pair is summed directly
    rcrit = src.rad / theta if theta > 0 else np.full_like(src.rad, np.inf)
    nthreads = numba.get_num_threads()
    ctl = how.ctl if how.ctl is not None else _no_control(src, src, p)
    for tasks, serial in _schedule(items, rec, rcrit):
        cnt = np.zeros((tasks.shape[0], 2), np.int64)
        nt = 1 if serial else min(nthreads, tasks.shape[0])
        threads.run_threads(interact, nt, tasks, items, rec,
                         src.start, src.me2, src.hmax, M, L, src.x, src.y,
                         src.z, src.w, src.e2, rcrit, cheap, how.spline, out,
                         cnt, *ctl)  # fmt: skip
        if counts is not None:
            counts.append(cnt.sum(axis=0))
    threads.run_threads(_mutual.downward, min(nthreads, items.shape[0]), items, src.nxt,
                     src.leaf, src.parent, src.ctr, src.start, src.end, L,
                     src.x, src.y, src.z, tab.mono, tab.trip, tab.grad, out)  # fmt: skip
    return np.ascontiguousarray(out.T)


def _schedule(items: np.ndarray, rec: np.ndarray,
              rcrit: np.ndarray) -> list[tuple[np.ndarray, bool]]:  # fmt: skip
    """Every task over the subtrees ``items`` (each with itself, each pair once), in rounds
    of tasks that share no subtree: ``(tasks, serial)``, each round's tasks dearest first.

    * every subtree with itself: one round;
    * the pairs of subtrees that meet cell by cell (not separated as wholes), priced
      ``n_i n_j``: greedily, dearest first, each into the lightest round where both are
      free, so that the dear pairs share rounds and keep every thread busy (a
      round-robin tournament left one dear pair alone in most of its rounds: two
      threads gave 1.35x one thread there);
    * the pairs separated as wholes, one M2L each: one round run by one thread
      (``serial``), in order.

    Depends on the bodies only, not on the thread count: each cell sees its
    interactions in one order on any number of threads.
    """
    k = items.shape[0]
    c, n = rec[items, :3], rec[items, 7]
    own = np.arange(k)
    selfs = np.stack([own, own], axis=1)[np.argsort(-n * n, kind="stable")]
    i, j = np.triu_indices(k, 1)
    d2 = ((c[i] - c[j]) ** 2).sum(axis=1)
    meet = (rcrit[items[i]] + rcrit[items[j]]) ** 2 >= d2
    price = n[i] * n[j]
    order = np.flatnonzero(meet)[np.argsort(-price[meet], kind="stable")]
    used = np.zeros((0, k), bool)
    load = np.zeros(0)
    rounds: list[list[int]] = []
    for q in order:
        free = np.flatnonzero(~(used[:, i[q]] | used[:, j[q]]))
        if free.size:
            r = int(free[np.argmin(load[free])])
        else:
            r = len(rounds)
            rounds.append([])
            used = np.vstack([used, np.zeros((1, k), bool)])
            load = np.append(load, 0.0)
        used[r, i[q]] = used[r, j[q]] = True
        load[r] += price[q]
        rounds[r].append(int(q))
    out = [(selfs, False)]
    out += [(np.stack([i[r], j[r]], axis=1), False) for r in map(np.array, rounds)]
    far = np.flatnonzero(~meet)
    if far.size:
        out.append((np.stack([i[far], j[far]], axis=1), True))
    return out


MUTUAL_CHEAP = 1.0
"""The mutual method sums a pair of cells directly when ``n_a n_b`` body pairs cost at most
this many mutual M2L translations."""


def _run(src: _Tree, tgt: _Tree, how: _Passes) -> np.ndarray:
    """The passes of the method on two trees in tree units: ``(m, 4)`` grad psi and psi."""
    if how.mutual:
        return _run_mutual(src, how)
    p, theta, near32, selfpairs, spline = how[:5]
    ctl = how.ctl if how.ctl is not None else _no_control(src, tgt, p)
    tab = expansion_tables(p)
    kt = tgt.start.shape[0]
    M = _upward(src, tab)
    nthreads = numba.get_num_threads()
    L = np.zeros((kt, tab.nterms))
    out = np.empty((tgt.x.shape[0], 4))
    items = _items(tgt, ITEMS)
    T = (tgt.ctr, tgt.rad, tgt.leaf, tgt.nxt, tgt.start, tgt.end, tgt.parent, tgt.me2, tgt.x,
         tgt.y, tgt.z, tgt.e2)  # fmt: skip
    S = (src.ctr, src.rad, src.leaf, src.nxt, src.start, src.end, src.wsum, src.me2, src.x,
         src.y, src.z, src.w, src.e2)  # fmt: skip
    trec = tgt.records()
    srec = src.records()
    # body pairs that cost less than one M2L (and the descent below it), in
    # units of a pair interaction (~20 flops): measured break-even ~ CHEAP
    cheap = CHEAP * (tab.trip.shape[0] + 6 * tab.nterms)
    c = np.array([0.0, 0.5, 1.0], np.float32 if near32 else np.float64)
    mtrip, mptr = _m2l_triples(p)
    rec = (tab.idx.sum(axis=1), tab.rec1[:, :, 0].astype(np.int64),
           tab.rec1[:, :, 1].astype(c.dtype), tab.rec2[:, :, 0].astype(np.int64),
           tab.rec2[:, :, 1].astype(c.dtype))  # fmt: skip
    threads.run_threads(_fmm.solve, min(nthreads, items.shape[0]), items, trec,
                     srec, T, S, M, theta, cheap, rec, tab.mono, tab.trip, mtrip, mptr,
                     tab.grad, c, near32, selfpairs, tgt.hmax, src.hmax, spline, L,
                     out, *ctl)  # fmt: skip
    return out
