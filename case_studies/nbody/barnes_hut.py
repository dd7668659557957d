"""Barnes-Hut gravity: an octree on Morton order, multipole far fields, direct near fields.

The method of the chapter's Problem 3, built from propopt's public verbs:

* **Locality** - :func:`propopt.locality.morton_order` sorts the bodies along
  the Z-order curve; every octree cell is then a contiguous run of bodies,
  and the tree is the set of Morton-key prefixes (:mod:`._build`).
* **Separability** - the far field of a cell is its multipole expansion:
  :func:`propopt.separability.moments_segments` gives the leaves' moments and
  :func:`propopt.separability.merge_rows` merges children into parents
  (``moments(A u B) == merge(moments(A), moments(B))``).  Monopole or
  quadrupole (``S2`` about the centre of mass; the softened kernel keeps its
  trace term) are evaluated.
* **Associativity** - the field at a target is a sum over cells, regrouped
  freely: one walk per group of ~32 nearby targets, threads over groups.

Tried and kept, Plummer sphere, N = 10^5, 2 cores: grouping targets (one
walk per target leaf, dense SIMD loops over the accepted cells and the near
bodies) instead of a walk per target; quadrupoles, which reach the same error
at a larger ``theta`` and so with fewer interactions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from propopt import direct_gravity, dispatch, morton_order, threads
from propopt.arrays import count, flag, per_point, plain, points, real
from propopt.symmetry import SOFTENINGS
from propopt.symmetry.gravity import check_masses

from ._args import check_theta, place, result_dtype
from ._build import build_topology, node_moments
from ._units import bodies, to_user
from ._walk import walk

__all__ = ["DEVICES", "METHODS", "THETA", "Octree", "barnes_hut"]

METHODS = ("tree", "direct")
"""The algorithms: the tree walk, or the exact sum (:func:`propopt.direct_gravity`)."""
DEVICES = ("cpu", "cuda")
"""Where they run: numba threads, or numba.cuda (a GPU thread per target for the walk)."""
PRECISIONS = ("auto", "float64", "float32")
FLOAT32_FROM_THETA = 0.1
"""``precision='auto'`` runs the walk's loops in float32 from this ``theta`` up (without
potentials).  Plummer
sphere, N = 10^5, eps 1e-3, errors against the exact sum at 1000 targets (median / p99),
float64 and float32 loops: theta 0.1 3.28e-7 / 1.51e-6 and 3.37e-7 / 1.48e-6; 0.3
2.01e-5 / 1.16e-4 both; 0.7 5.32e-4 / 2.54e-3 both.  Below it (theta 0 is the exact
sum) the loops stay float64."""
LEAF_SIZE = 32
"""The most bodies in a leaf of the tree (:func:`fmm`'s ``leaf_size`` has the same
meaning; its default is 64)."""
GROUP_SIZE = 512
"""Targets per walk on the CPU.  A group opens a node for all its targets at once, so a
larger group is both faster and more accurate, up to a point: Plummer sphere, N = 10^6,
theta 0.7, float32 loops, 2-core Xeon (rocketlake): 256 took 1.44 s (median / p99
error 6.99e-4 / 2.66e-3), 512 1.29 s (6.25e-4 / 2.43e-3), 1024 1.32 s
(5.35e-4 / 2.43e-3)."""
THETA = 0.7
"""The default opening angle (quadrupole): a median relative force error of
about 5e-4 on Plummer spheres, below pytreegrav's at its defaults (theta 0.7,
monopole); see docs/nbody.md."""


# ------------------------------------------------------------ validation
def _check_theta(theta: Any) -> float:
    """The tree's ``theta``: :func:`._args.check_theta` (finite, ``>= 0``)."""
    return check_theta(theta, "tree")


def _check_G(G: Any) -> float:
    """The gravitational constant as a float: finite (a NumPy scalar or 0-d array too)."""
    G = real("G", G)
    if not math.isfinite(G):
        raise ValueError(f"G={G!r}: the gravitational constant must be a finite number")
    return G


def per_body(name: str, v: Any, n: int, default: float, what: str) -> np.ndarray:
    """``(n,)`` float64 values ``>= 0``, one per body (``default`` for None, a scalar for all).

    :func:`propopt.arrays.per_point`, with the fix in the message of a bad
    value: ``mass[2] = nan: masses must be finite and >= 0 (fix or drop body 2)``.
    """
    a = plain(name, v) if v is not None else None
    if a is not None and a.dtype.kind in "fiub" and (a.ndim == 0 or a.shape == (n,)):
        f = a.astype(np.float64)
        bad = ~np.isfinite(f) | (f < 0)
        if a.ndim == 0 and bad:
            raise ValueError(f"{name}={f.item()!r}: {what} must be finite and >= 0")
        if a.ndim == 1 and bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"{name}[{i}] = {f[i]}: {what} must be finite and >= 0 (fix or drop body {i})"
            )
    return per_point(name, v, n, default, what)


def _segment_max(v: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``max(v[start[i]:end[i]])`` for every node ``i`` (non-empty, possibly nested runs).

    ``np.maximum.reduceat(v, start)`` alone reduces ``v[start[i]:start[i + 1]]``:
    in pre-order a parent's next node is its first child, which starts where
    the parent does, so a parent got its first body's value, not its bodies'
    largest.  Interleaving the ends gives each node its own run.
    """
    idx = np.column_stack([start, end]).ravel()
    return np.maximum.reduceat(np.append(v, v[:1]), idx)[::2]


def _groups(keys: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    start, end, _, leaf, _ = build_topology(keys, group_size)
    gs, ge = start[leaf], end[leaf]
    return gs, ge, int((ge - gs).max()) if gs.size else 1


# ------------------------------------------------------------ the tree
@dataclass(eq=False)
class Octree:
    """An octree of point masses with multipole moments: build once, evaluate many target sets.

    Build with :meth:`Octree.build`; evaluate with :meth:`field`.  The arrays
    are plain NumPy (the tree pickles, e.g. to Dask workers).

    Attributes
    ----------
    n : int
        Number of bodies.
    order : ndarray (n,)
        Morton order: sorted body ``k`` is input body ``order[k]``.
    src : ndarray (5, n)
        Sorted x, y, z, m, eps^2 (float64), in the tree's units: positions
        from ``origin`` (an exact shift, see :func:`_exact_origin`), lengths in units of
        ``2**length_exp`` and masses in units of ``2**mass_exp``
        (powers of two near the root box's side and the largest mass, so
        that scaling is exact and bodies at any finite scale, 1e-150 or
        1e150, neither overflow nor underflow in the moments and the walk).
    keys : ndarray (n,)
        Sorted Morton keys in the root ``box``.
    start, end, next, leaf, level : ndarrays (k,)
        Node ``i`` holds sorted bodies ``start[i]:end[i]``; its subtree is
        nodes ``i .. next[i] - 1`` (pre-order); ``level`` is its cell depth.
    rows : ndarray (k, 20)
        Moment rows (:mod:`propopt.separability` layout) about each centre of mass.
    lo, hi : ndarrays (k, 3)
        Tight bounding box of each node's bodies (tree units).
    nodes : ndarray (k, 13)
        What the walk reads: M, centre, S2, mean eps^2, b_max^2, size^2.
    length_exp, mass_exp : int
        The tree's units, ``2**length_exp`` and ``2**mass_exp``.
    origin : ndarray (3,)
        The point the tree's positions are measured from (user units).
    """

    n: int
    order: np.ndarray
    src: np.ndarray
    keys: np.ndarray
    start: np.ndarray
    end: np.ndarray
    next: np.ndarray
    leaf: np.ndarray
    level: np.ndarray
    rows: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    nodes: np.ndarray
    box: tuple[np.ndarray, np.ndarray]
    leaf_size: int
    dtype: np.dtype
    uniform_eps2: float | None  # every body's eps^2 (tree units) when all are equal
    length_exp: int = 0
    mass_exp: int = 0
    origin: np.ndarray | None = None
    softening: str = "plummer"

    @classmethod
    @threads.parallel
    def build(
        cls,
        pos: Any,
        mass: Any = None,
        *,
        eps: Any = 0.0,
        leaf_size: int = LEAF_SIZE,
        box: Any = None,
        softening: str = "plummer",
    ) -> Octree:
        """Sort the bodies by Morton key, build the octree and every node's moments.

        Parameters
        ----------
        pos : array (n, 3)
            Finite positions (float32 or float64).
        mass : array (n,) or scalar, optional
            Finite masses ``>= 0`` (1 each by default); zero masses are allowed.
            Negative masses are refused, as by every gravity verb: a cell acts
            through its centre of mass, which masses of both signs can put
            anywhere, and the error bounds fail (sources of both signs:
            :func:`propopt.pairwise_sum`).
        eps : float or array (n,)
            Plummer softening length, per body if an array.  A pair ``(i, j)``
            is softened with ``eps_ij^2 = (eps_i^2 + eps_j^2) / 2`` (symmetric,
            so Newton's third law holds; equal to ``eps^2`` for one length).
        leaf_size : int
            The most bodies in a leaf: a cell with more is split (unless they
            all share a Morton key: coincident bodies are one leaf, so depth
            is at most 21 levels).  The same meaning as in :func:`fmm`.
        box : (lo, hi), optional
            Root cube (default: the bodies' bounding cube).
        softening : {'plummer', 'spline'}
            ``'plummer'`` as above; ``'spline'``: ``eps`` is the support
            radius ``h`` of pytreegrav's (and Gadget's) cubic-spline kernel, a
            pair uses ``max(h_i, h_j)`` and is Newtonian beyond it
            (:func:`propopt.symmetry.spline_kernel`); a node is then used
            whole only where no pair it holds is within its ``h``.

        Notes
        -----
        ``O(n log n)`` (the sort), then ``O(n)`` for the moments; memory
        ``O(n)``: fewer than ``2 n / leaf_size`` nodes for spread-out bodies.
        """
        if softening not in SOFTENINGS:
            raise ValueError(
                f"softening={softening!r} is not one of {', '.join(map(repr, SOFTENINGS))}"
            )
        P = points("pos", pos, 3)
        n = P.shape[0]
        m = check_masses(mass, n)
        e = per_body("eps", eps, n, 0.0, "softening lengths")
        leaf_size = count("leaf_size", leaf_size)
        dtype = result_dtype(P, mass)
        b = bodies(P, m, e, leaf_size, box)
        src, order, keys, start, end, nxt, leaf, level = (
            b.src, b.order, b.keys, b.start, b.end, b.nxt, b.leaf, b.level)  # fmt: skip
        box, lexp, mexp, origin = b.box, b.lexp, b.mexp, b.origin
        rows, lo, hi, me2 = node_moments(b.pos, src[3], src[4], start, end, nxt, leaf)
        k = start.shape[0]
        nodes = np.empty((k, 14))  # one node per row: a visit touches 2 cache lines
        nodes[:, :10] = rows[:, :10]
        nodes[:, 10] = me2
        corner = np.maximum(np.abs(hi - rows[:, 1:4]), np.abs(rows[:, 1:4] - lo))
        nodes[:, 11] = (corner * corner).sum(axis=1)
        nodes[:, 12] = (hi - lo).max(axis=1) ** 2 if k else 0.0
        nodes[:, 13] = 0.0  # the largest spline support h of each node's bodies
        if softening == "spline" and k and n:
            nodes[:, 13] = np.sqrt(_segment_max(src[4], start, end))
        uni = float(src[4, 0]) if n and np.all(e == e[0]) else (0.0 if n == 0 else None)
        return cls(
            n, order, src, keys, start, end, nxt, leaf, level, rows, lo, hi, nodes,
            (np.asarray(box[0], float), np.asarray(box[1], float)), leaf_size, dtype, uni,
            lexp, mexp, origin, softening,
        )  # fmt: skip

    # -------------------------------------------------------------- evaluate
    @threads.parallel
    def field(
        self,
        targets: Any = None,
        *,
        target_eps: Any = None,
        theta: float = THETA,
        quadrupole: bool = True,
        group_size: int = GROUP_SIZE,
        G: float = 1.0,
        method: str = "tree",
        device: str = "auto",
        precision: str = "auto",
        potential: bool = False,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Accelerations (and potentials) of the bodies' gravity, at the bodies or at ``targets``.

        .. math:: a(x) \\approx G \\sum_j m_j (x_j - x) / (|x_j - x|^2 + \\epsilon^2)^{3/2},
                  \\quad \\phi(x) \\approx -G \\sum_j m_j / (|x_j - x|^2 + \\epsilon^2)^{1/2}

        Parameters
        ----------
        targets : array (m, 3), optional
            Evaluation points; default the bodies themselves (then ``j = i`` is
            left out, as in :func:`propopt.direct_gravity`).
        target_eps : float or array (m,), optional
            Softening of the targets (default: the bodies' length when it is
            one number, else 0).  Only with ``targets``.
        theta : float
            Opening angle, the accuracy knob: a node of size ``s`` is used whole
            when its distance ``d`` to the target group satisfies
            ``s < theta d`` (and ``d`` exceeds its radius).  Finite and
            ``>= 0`` (a NumPy scalar or 0-d array too); ``theta = 0`` gives
            the exact sum.  Relative error ``~theta^2`` (monopole),
            ``~theta^3`` (quadrupole).
        quadrupole : bool
            Use the quadrupole term (more accuracy per interaction).
        group_size : int
            Targets per walk (a leaf of the targets' octree).
        G : float
            Gravitational constant.
        method : {'tree', 'direct'}
            The tree walk (``theta``, ``quadrupole``, ``group_size``), or the
            exact ``O(n m)`` sum (:func:`propopt.direct_gravity`, the yardstick).
        device : {'auto', 'cpu', 'cuda'}
            Numba threads, or the GPU; ``'auto'`` (the default) is the GPU for
            ``targets`` on a CUDA device, else the CPU.  The GPU walks one target per thread,
            so a node is opened for that target alone, where the CPU opens it
            for the whole group: at the same ``theta`` the GPU's error is
            larger (Plummer, N = 10^6, theta 0.72: median 1.3e-3, and
            8.4e-4 for the CPU walk in another run); its results equal the
            CPU's with ``group_size=1``.
        precision : {'auto', 'float64', 'float32'}
            Arithmetic of the CPU walk's inner loops; ``'auto'``: float32 for
            accelerations from ``theta`` :data:`FLOAT32_FROM_THETA` up, where
            its rounding is measured to change no error; float64 below (and
            for the exact sum of ``theta=0``) and with ``potential=True`` (the
            walk counts each body's own softened potential, ``m / eps``, and
            removes it after: in float32 that leaves ``~1e-7 m / eps``, which
            energy diagnostics would see).  'float32' runs twice as
            many SIMD lanes on coordinates taken relative to each target
            group's centre, and adds each loop's partial sums in float64: a
            relative rounding error ``~1e-6``, far below the tree's
            truncation error at any useful ``theta``.  A target with a body
            closer than 1e-2 of its group's radius (where float32 would err
            by more, and by 100% below 1e-7) has its near field summed in
            float64 (rare), so close pairs keep their pull; only bodies at
            one position with ``eps = 0`` are skipped.
        potential : bool
            Also compute the potentials (the CPU walk skips their terms
            without: ~10% fewer operations).  ``False`` by default, as in
            every N-body verb; until this release the default was ``True``
            (pass ``potential=True`` for the potentials).

        Returns
        -------
        acc : ndarray (m, 3)
        pot : ndarray (m,) or None
            float32 when positions, masses (and targets) are float32, else
            float64; ``None`` unless ``potential=True``.
        """
        if method not in METHODS:
            raise ValueError(f"method={method!r} is not one of {', '.join(map(repr, METHODS))}")
        if device == "auto":
            device = "cpu" if targets is None else place(targets)
        if device not in DEVICES:
            names = ", ".join(map(repr, ("auto", *DEVICES)))
            raise ValueError(f"device={device!r} is not one of {names}")
        if precision not in PRECISIONS:
            raise ValueError(
                f"precision={precision!r} is not one of {', '.join(map(repr, PRECISIONS))}"
            )
        theta = _check_theta(theta)
        quadrupole, potential = flag("quadrupole", quadrupole), flag("potential", potential)
        if precision == "auto":
            f32 = theta >= FLOAT32_FROM_THETA and not potential
            precision = "float32" if f32 else "float64"
        group_size = count("group_size", group_size)
        G = _check_G(G)
        if targets is None and target_eps is not None:
            raise ValueError("target_eps is given without targets: pass targets=, or leave it out")
        dtype = self.dtype
        if targets is None:
            tgt = self.src[[0, 1, 2, 4]]
            torder = self.order
            tkeys = self.keys
        else:
            T = points("targets", targets, 3)
            if T.dtype != np.float32:
                dtype = np.dtype(np.float64)
            default = 0.0
            if self.uniform_eps2 is not None:
                default = float(np.ldexp(self.uniform_eps2**0.5, self.length_exp))
            te = per_body("target_eps", target_eps, T.shape[0], default, "softening lengths")
            torder, tkeys = morton_order(T, return_keys=True) if T.shape[0] else (
                np.zeros(0, np.int64), np.zeros(0, np.uint64))  # fmt: skip
            tgt = np.empty((4, T.shape[0]))
            origin = np.zeros(3) if self.origin is None else self.origin
            tgt[:3] = np.ldexp(T[torder].T - origin[:, None], -self.length_exp)
            tgt[3] = np.ldexp(te[torder], -self.length_exp) ** 2
        m = tgt.shape[1]
        plan = _UnitField(self, tgt, tkeys, targets is not None, theta, quadrupole, group_size,
                          precision, potential)  # fmt: skip
        key = (method, device)
        dispatch.choose(UNIT_FIELDS, key, plan, ())  # raises the row's refusal
        res = UNIT_FIELDS[key].run(plan) if m and self.n else np.zeros((m, 4))
        self_m = self_e2 = np.zeros(0)
        if targets is None and method == "tree" and m and self.n:
            # the walk counted each body's own softened potential: -m_i / eps_i
            # (Plummer) or the spline's -2.8 m_i / h_i
            self_m, self_e2 = self.src[3], self.src[4]
        self_coef = 2.8 if self.softening == "spline" else 1.0
        acc, pot = to_user(res, torder, G, self.length_exp, self.mass_exp, dtype, self_m, self_e2,
                           self_coef)  # fmt: skip
        return acc, (pot if potential else None)

    def _test(self, theta: float) -> np.ndarray:
        """What the walk reads of each node: centre, ``max(b_max^2, size^2 / theta^2)``.

        ``inf`` at ``theta = 0`` (no node is used whole), ``-1`` for a node
        without mass (skipped).
        """
        nd = self.nodes
        test = np.empty((nd.shape[0], 4))
        test[:, :3] = nd[:, 1:4]
        if theta > 0:
            with np.errstate(over="ignore"):
                test[:, 3] = np.maximum(nd[:, 11], nd[:, 12] / (theta * theta))
        else:
            test[:, 3] = np.inf
        test[nd[:, 0] == 0, 3] = -1.0
        return test

    def check(self) -> None:
        """Raise ``AssertionError``-free ``ValueError`` if a structural invariant is broken."""
        k = self.start.shape[0]
        if self.n == 0:
            if k:
                raise ValueError("empty tree has nodes")
            return
        if self.start[0] != 0 or self.end[0] != self.n or self.next[0] != k:
            raise ValueError("root does not cover every body")
        for i in range(k):
            if self.leaf[i]:
                continue
            c, pos = i + 1, self.start[i]
            nchild = 0
            while c < self.next[i]:
                if self.start[c] != pos:
                    raise ValueError(f"node {i}: children do not tile its bodies")
                pos = self.end[c]
                c = self.next[c]
                nchild += 1
            if pos != self.end[i] or c != self.next[i] or nchild < 2:
                raise ValueError(f"node {i}: {nchild} children, bodies up to {pos}")

    @property
    def num_nodes(self) -> int:
        return int(self.start.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by the tree's arrays."""
        return sum(
            v.nbytes for v in (self.order, self.src, self.keys, self.start, self.end, self.next,
                               self.leaf, self.level, self.rows, self.lo, self.hi, self.nodes)
        )  # fmt: skip


# ------------------------------------------------------- the raw field, by row
@dataclass
class _UnitField:
    """One evaluation of an :class:`Octree`'s field in tree units, for a row of
    :data:`UNIT_FIELDS`: ``tgt`` is (4, m), targets' x, y, z, eps^2 in Morton order."""

    tree: Octree
    tgt: np.ndarray
    tkeys: np.ndarray
    given: bool  # targets= was given (else the targets are the bodies)
    theta: float
    quadrupole: bool
    group_size: int
    precision: str
    potential: bool


def _walk_cpu(p: _UnitField) -> np.ndarray:
    t = p.tree
    res = np.empty((p.tgt.shape[1], 4))  # the walk writes every row
    gs, ge, gmax = _groups(p.tkeys, p.group_size)
    nblocks = int(min(gs.shape[0], 16 * numba.get_num_threads()))
    old = numba.get_parallel_chunksize()
    numba.set_parallel_chunksize(1)
    try:
        walk(
            np.ascontiguousarray(p.tgt), gs, ge, gmax, t.src, t.nodes, t._test(p.theta),
            t.start, t.end, t.next, t.leaf, p.quadrupole, p.potential, nblocks,
            np.array([0.0, 0.5, 1.0, 3.0, 5.0], p.precision), p.precision == "float32",
            t.softening == "spline", not p.given, res,
        )  # fmt: skip
    finally:
        numba.set_parallel_chunksize(old)
    return res


def _refuse_walk_cuda(p: _UnitField) -> Exception | None:
    if p.tree.softening != "plummer":
        return ValueError(
            f"softening={p.tree.softening!r}: the CUDA walk has Plummer softening only; use "
            "device='cpu' or method='direct'"
        )
    return None


def _walk_cuda(p: _UnitField) -> np.ndarray:
    from ._cuda import walk_cuda

    return walk_cuda(p.tree, p.tgt, p.theta, p.quadrupole)  # type: ignore[no-any-return]


def _exact(device: str) -> Any:
    def run(p: _UnitField) -> np.ndarray:
        """The exact sum, in the tree's units."""
        t = p.tree
        P = np.ascontiguousarray(t.src[:3].T)
        kw: dict[str, Any] = {}
        if p.given:
            kw = dict(targets=np.ascontiguousarray(p.tgt[:3].T), target_eps=np.sqrt(p.tgt[3]))
        a, pot = direct_gravity(P, t.src[3], eps=np.sqrt(t.src[4]), device=device,
                                softening=t.softening, potential=True, **kw)  # fmt: skip
        res = np.empty((p.tgt.shape[1], 4))
        res[:, :3], res[:, 3] = a, pot
        return res

    return run


UNIT_FIELDS: dict[tuple[str, str], dispatch.Backend[_UnitField, np.ndarray]] = {
    ("tree", "cpu"): dispatch.Backend(dispatch.takes_any, _walk_cpu),
    ("tree", "cuda"): dispatch.Backend(_refuse_walk_cuda, _walk_cuda),
    ("direct", "cpu"): dispatch.Backend(dispatch.takes_any, _exact("cpu")),
    ("direct", "cuda"): dispatch.Backend(dispatch.takes_any, _exact("cuda")),
}
"""The raw field of :meth:`Octree.field` (tree units, Morton order, rows ``ax, ay, az,
phi``) by ``(method, device)``."""


def barnes_hut(
    pos: Any,
    mass: Any = None,
    *,
    eps: Any = 0.0,
    theta: float = THETA,
    quadrupole: bool = True,
    targets: Any = None,
    target_eps: Any = None,
    leaf_size: int = LEAF_SIZE,
    softening: str = "plummer",
    group_size: int = GROUP_SIZE,
    G: float = 1.0,
    method: str = "tree",
    device: str = "auto",
    precision: str = "auto",
    potential: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Gravitational accelerations (and potentials) by the Barnes-Hut tree code.

    ``Octree.build(pos, mass, eps=eps).field(targets, theta=theta, ...)``; see
    :meth:`Octree.build` and :meth:`Octree.field`.  Cost ``O(n log n)``.
    :func:`propopt_case_studies.nbody.field` is the one entry point for every method.

    Returns ``(acc, pot)``: ``pot`` is None unless ``potential=True`` (the
    default was ``True`` until this release).

    Examples
    --------
    >>> import numpy as np
    >>> from propopt_case_studies.nbody import barnes_hut
    >>> from propopt import direct_gravity
    >>> rng = np.random.default_rng(0)
    >>> x, m = rng.normal(size=(2000, 3)), rng.uniform(size=2000)
    >>> a, p = barnes_hut(x, m, eps=0.01, theta=0.5)
    >>> p is None
    True
    >>> a0, _ = direct_gravity(x, m, eps=0.01)
    >>> err = np.linalg.norm(a - a0, axis=1) / np.linalg.norm(a0, axis=1)
    >>> bool(np.median(err) < 1e-3)
    True
    """
    if device == "auto":
        device = place(pos)
    tree = Octree.build(pos, mass, eps=eps, leaf_size=leaf_size, softening=softening)
    return tree.field(
        targets, target_eps=target_eps, theta=theta, quadrupole=quadrupole,
        group_size=group_size, G=G, method=method, device=device, precision=precision,
        potential=potential,
    )  # fmt: skip
