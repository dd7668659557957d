"""One entry point for the gravitational field of point masses: :func:`field`.

Every N-body verb of :mod:`propopt_case_studies.nbody` (and :func:`propopt.direct_gravity`)
spells its arguments the same way and returns the same pair:

========================  ==============================================================
argument                  meaning (in every verb that takes it)
========================  ==============================================================
``pos``, ``mass``         ``(n, 3)`` positions; ``(n,)`` or scalar masses (1 each if None)
``targets``               ``(m, 3)`` evaluation points (default the bodies, ``j = i`` left out)
``eps``, ``target_eps``   softening lengths (one or one per body / target)
``softening``             ``'plummer'`` or ``'spline'`` (``eps`` is then the support ``h``)
``G``                     the gravitational constant
``potential``             also compute the potentials (``False`` by default)
``theta``                 opening angle, finite and ``>= 0`` (``< 1`` for the FMM); 0 exact
``leaf_size``             the most bodies in a leaf of the (source) tree
``method``, ``device``    which algorithm, and where it runs
========================  ==============================================================

and returns ``(acc, pot)``, ``pot`` None unless ``potential=True``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from propopt import direct_gravity, dispatch
from propopt.arrays import count, flag, real

from ._args import check_theta, place

__all__ = ["DEVICES", "METHODS", "OPTIONS", "field"]

METHODS = ("tree", "fmm", "direct")
"""The algorithms of :func:`field`: Barnes-Hut, the fast multipole method, the exact sum."""
DEVICES = ("cpu", "cuda", "dask")
"""Where :func:`field` runs: numba threads, numba.cuda, or a Dask cluster (``client=``)."""
OPTIONS = {
    "tree": ("theta", "leaf_size", "quadrupole", "group_size", "precision"),
    "fmm": ("theta", "leaf_size", "tol", "quantile", "order"),
    "direct": (),
}
"""The method-specific arguments of :func:`field` that each method takes."""

DIRECT_PAIRS = 1_000_000
"""``method='auto'`` sums exactly up to this many (target, source) pairs: Plummer
spheres, eps 1e-3, 2-core Xeon (rocketlake), the exact sum against the tree at its
defaults: 500 bodies 1.07 / 1.08 ms, 1,000 1.37 / 1.27 ms, 2,000 2.42 / 1.99 ms, 8,000
24.9 / 6.9 ms."""
TREE_TOL = {0.99: 2.5e-3, 0.5: 6.5e-4}
"""``method='auto'`` with ``tol`` below this (for its ``quantile``) runs the FMM, else the
tree: the tree's error at its defaults (Plummer, N = 10^6: median 6.25e-4, p99 2.43e-3,
1.28 s); the FMM reaches a lower error for less time than the tree would at a smaller
``theta`` (tol 3e-3: p99 3.06e-4, 3.07 s; tol 0.03: p99 1.31e-3, 1.89 s)."""


def field(
    pos: Any,
    mass: Any = None,
    *,
    method: str = "auto",
    device: str = "auto",
    targets: Any = None,
    target_eps: Any = None,
    potential: bool = False,
    eps: Any = 0.0,
    softening: str = "plummer",
    G: float = 1.0,
    theta: float | None = None,
    leaf_size: int | None = None,
    tol: float | None = None,
    quantile: float | None = None,
    order: int | None = None,
    quadrupole: bool | None = None,
    group_size: int | None = None,
    precision: str | None = None,
    client: Any = None,
    chunk: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Gravitational accelerations (and potentials) of point masses, by any method.

    .. math:: a(x) = G \\sum_j m_j (x_j - x) / (|x_j - x|^2 + \\epsilon^2)^{3/2},
              \\quad \\phi(x) = -G \\sum_j m_j / (|x_j - x|^2 + \\epsilon^2)^{1/2}

    (Plummer softening; ``softening='spline'`` for the cubic-spline kernel).

    Parameters
    ----------
    pos : array (n, 3)
        Finite positions (float32 or float64).
    mass : array (n,) or scalar, optional
        Finite masses ``>= 0``, 1 each by default, for every method: a cell
        acts through its centre of mass, which masses of both signs can put
        anywhere (far outside the cell), so the opening test and the error
        bounds would fail, and one rule lets code move between methods.
        Sources of both signs are :func:`propopt.pairwise_sum`'s.
    method : {'auto', 'tree', 'fmm', 'direct'}
        Barnes-Hut (:func:`.barnes_hut`; ``theta``, ``quadrupole``,
        ``group_size``, ``precision``), the fast multipole method
        (:func:`.fmm`; ``tol``, ``order``, ``theta``), or the exact ``O(n m)``
        sum (:func:`propopt.direct_gravity`).  ``'auto'`` (the default) picks
        by the accuracy asked for and the size: the method whose options are
        given; the FMM for ``tol`` below :data:`TREE_TOL` (the tree's error
        at its defaults, at the same ``quantile``); the exact sum up to
        :data:`DIRECT_PAIRS`
        (target, source) pairs, where it is as fast; the tree otherwise
        (:data:`AUTO_REFUSE`).  On a device the FMM does not run on, a call
        that asks for it (``order``, or such a ``tol``) is refused in one
        line.
    device : {'auto', 'cpu', 'cuda', 'dask'}
        Numba threads; numba.cuda (``'tree'``, ``'direct'``); a Dask cluster
        (``'tree'``: the tree built here, scattered once, ``targets`` in
        chunks of ``chunk``; needs ``client`` and ``targets``).  ``'auto'``
        (the default): the cluster of ``client`` when one is given, else
        where ``pos`` is (``'cuda'`` for a CUDA array, else ``'cpu'``).
    targets : array (m, 3), optional
        Evaluation points; default the bodies themselves (then ``j = i`` is
        left out).
    target_eps : float or array (m,), optional
        Softening of the targets (default: ``eps`` when it is one number,
        else 0); only with ``targets``.
    potential : bool
        Also compute the potentials (the tree skips their terms without).
    eps : float or array (n,)
        Softening length, ``>= 0``, one for all or one per body.
    softening : {'plummer', 'spline'}
        Plummer (a pair uses ``(eps_i^2 + eps_j^2) / 2``) or the cubic
        spline of pytreegrav and Gadget (``eps`` is its support ``h``, a pair
        uses ``max(h_i, h_j)``, Newtonian beyond it).
    G : float
        Gravitational constant.
    theta : float, optional
        Opening angle (``'tree'``: default 0.7; ``'fmm'``: overrides the one
        chosen from ``tol``).  A real number (a NumPy scalar or 0-d array
        too), finite and ``>= 0``; below 1 for the FMM.  0 is the exact sum.
    leaf_size : int, optional
        The most bodies in a leaf of the source tree (the FMM's target tree
        too): 32 for the tree, 64 for the FMM by default.
    tol : float, optional
        The FMM's target relative force error (default 1e-3); with
        ``method='auto'``, the accuracy asked for.
    quantile : {0.99, 0.5}, optional
        Which error ``tol`` bounds: the 99th percentile (default) or the
        median (:func:`.fmm`).
    order : int, optional
        The FMM's expansion order (default from ``tol``).
    quadrupole, group_size, precision : optional
        The tree's: quadrupole terms (True), targets per walk (256), the
        arithmetic of the CPU walk's loops (``'float64'``).
    client : distributed.Client, optional
        For ``device='dask'``.
    chunk : int, optional
        Targets per Dask task (250,000).

    Returns
    -------
    acc : ndarray (m, 3)
    pot : ndarray (m,) or None
        None unless ``potential=True``.

    Raises
    ------
    ValueError
        An unknown method or device, a device the method does not run on, an
        option of another method (``tol`` with ``method='tree'``), or, with
        ``method='auto'``, options that no one method takes (``tol=1e-5``
        with ``quadrupole=``): each one line naming the argument, its value
        and what to pass instead.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt_case_studies.nbody import field
    >>> rng = np.random.default_rng(0)
    >>> x, m = rng.normal(size=(2000, 3)), rng.uniform(size=2000)
    >>> exact, _ = field(x, m, eps=0.01, method="direct")
    >>> for method in ("tree", "fmm"):
    ...     a, p = field(x, m, eps=0.01, method=method)
    ...     err = np.linalg.norm(a - exact, axis=1) / np.linalg.norm(exact, axis=1)
    ...     print(method, p is None, bool(np.median(err) < 1e-3))
    tree True True
    fmm True True
    """
    method, device = dispatch.method_device("field", method, device, BACKENDS)
    given = dict(theta=theta, leaf_size=leaf_size, tol=tol, quantile=quantile, order=order,
                 quadrupole=quadrupole, group_size=group_size, precision=precision)  # fmt: skip
    here = "dask" if client is not None else place(pos)
    where = here if device == "auto" else device
    for name, value in (("client", client), ("chunk", chunk)):
        if value is not None and where != "dask":
            raise ValueError(f"{name}= is for device='dask' (got device={where!r}): leave it out")
    potential = flag("potential", potential)
    if targets is None and target_eps is not None:
        raise ValueError("target_eps is given without targets: pass targets=, or leave it out")
    plan = _Plan(pos, mass, eps, softening, G, targets, target_eps, potential, where,
                 {k: v for k, v in given.items() if v is not None}, client, chunk)  # fmt: skip
    key = dispatch.choose_on(BACKENDS, method, device, plan, here, AUTO, AUTO_REFUSE,
                             what="pos", moves=True)  # fmt: skip
    if key is None:
        raise _no_auto(plan)
    return BACKENDS[key].run(plan)


def _length(x: Any) -> int:
    """How many points ``x`` holds, before it is checked (the check comes after)."""
    shape = getattr(x, "shape", None)
    if shape is None:
        shape = np.shape(x)
    return int(shape[0]) if len(shape) else 0


@dataclass
class _Plan:
    """A checked :func:`field` call: what every backend of :data:`BACKENDS` runs."""

    pos: Any
    mass: Any
    eps: Any
    softening: str
    G: float
    targets: Any
    target_eps: Any
    potential: bool
    device: str
    options: dict[str, Any]  # the method's own options that were given
    client: Any
    chunk: Any


def _refuse_dask(p: _Plan) -> Exception | None:
    if p.client is None:
        return ValueError("device='dask' needs client= (a distributed.Client)")
    if p.targets is None:
        return ValueError(
            "device='dask' splits targets= into chunks: pass targets (e.g. the "
            "bodies' positions), or use device='cpu' for the field at the bodies"
        )
    return None


def _run_direct(p: _Plan) -> tuple[Any, Any]:
    return direct_gravity(p.pos, p.mass, eps=p.eps, G=p.G, targets=p.targets,  # type: ignore[no-any-return]
                          target_eps=p.target_eps, softening=p.softening, device=p.device,
                          potential=p.potential)  # fmt: skip


def _run_fmm(p: _Plan) -> tuple[Any, Any]:
    from .fmm import LEAF_SIZE, TOL, fmm

    o = p.options
    theta = o.get("theta")
    return fmm(p.pos, p.mass, tol=o.get("tol", TOL), quantile=o.get("quantile", 0.99),
               eps=p.eps, targets=p.targets,
               target_eps=p.target_eps, G=p.G, potential=p.potential, order=o.get("order"),
               theta=None if theta is None else check_theta(theta, "fmm"),
               leaf_size=o.get("leaf_size", LEAF_SIZE), softening=p.softening)  # fmt: skip


def _tree_and_options(p: _Plan) -> tuple[Any, dict[str, Any]]:
    """The octree of the bodies, and the keywords of its ``field``."""
    from .barnes_hut import GROUP_SIZE, LEAF_SIZE, THETA, Octree

    o = p.options
    tree = Octree.build(p.pos, p.mass, eps=p.eps, softening=p.softening,
                        leaf_size=o.get("leaf_size", LEAF_SIZE))  # fmt: skip
    kw: dict[str, Any] = dict(
        theta=check_theta(o.get("theta", THETA), "tree"),
        quadrupole=o.get("quadrupole", True),
        group_size=o.get("group_size", GROUP_SIZE),
        precision=o.get("precision", "auto"),
        G=p.G,
        potential=p.potential,
    )
    if p.target_eps is not None:
        kw["target_eps"] = p.target_eps
    return tree, kw


def _run_tree(p: _Plan) -> tuple[Any, Any]:
    tree, kw = _tree_and_options(p)
    return tree.field(p.targets, device=p.device, **kw)  # type: ignore[no-any-return]


def _run_tree_dask(p: _Plan) -> tuple[Any, Any]:
    from .distributed import field_dask

    tree, kw = _tree_and_options(p)
    chunk = 250_000 if p.chunk is None else count("chunk", p.chunk)
    return field_dask(p.client, tree, p.targets, chunk=chunk, **kw)  # type: ignore[no-any-return]


def _options_of(method: str, ignore: tuple[str, ...] = ()) -> Any:
    """``refuse`` of a ``method`` row: the options given that ``method`` does not take."""

    def refuse(p: _Plan) -> Exception | None:
        for name, value in p.options.items():
            if name not in OPTIONS[method] and name not in ignore:
                takes = [m for m in METHODS if name in OPTIONS[m]]
                return ValueError(
                    f"{name}={value!r} is an option of method={' or '.join(map(repr, takes))}, "
                    f"not of method={method!r}: leave it out"
                )
        return None

    return refuse


def _either(*refusals: Any) -> Any:
    """``refuse`` that gives the first refusal of ``refusals``."""

    def refuse(p: _Plan) -> Exception | None:
        return next((e for r in refusals if (e := r(p)) is not None), None)

    return refuse


def _asks_fmm(p: _Plan) -> bool:
    """Whether the call asks for what only the FMM gives: an ``order``, or a ``tol``
    below the tree's error at its defaults (:data:`TREE_TOL`, at the call's quantile)."""
    if "order" in p.options:
        return True
    tol = p.options.get("tol")
    if tol is None:
        return False
    bound = TREE_TOL.get(p.options.get("quantile", 0.99))
    return bound is None or float(real("tol", tol)) < bound  # unknown quantile: fmm names it


def _auto_fmm(p: _Plan) -> Exception | None:
    if not _asks_fmm(p):
        return ValueError("the tree at its defaults meets the accuracy asked for")
    return _options_of("fmm")(p)


def _auto_direct(p: _Plan) -> Exception | None:
    if p.options:
        return ValueError("an option of the tree or the FMM is given")
    m = _length(p.pos) if p.targets is None else _length(p.targets)
    if _length(p.pos) * m > DIRECT_PAIRS:
        return ValueError(f"more than {DIRECT_PAIRS} pairs: the tree is faster")
    return None


def _auto_tree(row: Any) -> Any:
    def refuse(p: _Plan) -> Exception | None:
        if _asks_fmm(p):
            return ValueError("the accuracy asked for is the FMM's")
        return row(p)

    return refuse


def _no_auto(p: _Plan) -> Exception:
    """Why ``method='auto'`` found no row for ``p``: the tree takes every plan that does
    not ask for the FMM, unless its own row refuses."""
    if not _asks_fmm(p):
        return BACKENDS[("tree", p.device)].refuse(p) or ValueError("no method takes this call")
    why = "order=" if "order" in p.options else f"tol={p.options['tol']!r}"
    if p.device != "cpu":
        return ValueError(
            f"method='auto': {why} asks for the FMM, which runs on device 'cpu' only; pass "
            f"device='cpu', or method='tree' without {why}"
        )
    tree_only = ", ".join(f"{k}=" for k in p.options if k not in OPTIONS["fmm"])
    return ValueError(
        f"method='auto': {why} asks for the FMM, but {tree_only} only the tree takes; leave "
        f"out one or the other, or name the method"
    )


BACKENDS: dict[tuple[str, str], dispatch.Backend[_Plan, tuple[Any, Any]]] = {
    ("tree", "cpu"): dispatch.Backend(_options_of("tree"), _run_tree),
    ("tree", "cuda"): dispatch.Backend(_options_of("tree"), _run_tree),
    ("tree", "dask"): dispatch.Backend(_either(_options_of("tree"), _refuse_dask), _run_tree_dask),
    ("fmm", "cpu"): dispatch.Backend(_options_of("fmm"), _run_fmm),
    ("direct", "cpu"): dispatch.Backend(_options_of("direct"), _run_direct),
    ("direct", "cuda"): dispatch.Backend(_options_of("direct"), _run_direct),
}
"""Every ``(method, device)`` that :func:`field` runs; each row refuses the options of
another method."""

AUTO: tuple[tuple[str, str], ...] = (
    ("fmm", "cpu"), ("direct", "cpu"), ("direct", "cuda"),
    ("tree", "cpu"), ("tree", "cuda"), ("tree", "dask"),
)  # fmt: skip
"""``method='auto'``: the first of these on the device that accepts (:data:`AUTO_REFUSE`)."""

AUTO_REFUSE: dict[tuple[str, str], Any] = {
    ("fmm", "cpu"): _auto_fmm,
    ("direct", "cpu"): _auto_direct,
    ("direct", "cuda"): _auto_direct,
    ("tree", "cpu"): _auto_tree(_options_of("tree", ignore=("tol", "quantile"))),
    ("tree", "cuda"): _auto_tree(_options_of("tree", ignore=("tol", "quantile"))),
    ("tree", "dask"): _auto_tree(
        _either(_options_of("tree", ignore=("tol", "quantile")), _refuse_dask)
    ),
}
"""When ``method='auto'`` takes a row: the FMM for an ``order`` or a ``tol`` below the
tree's error at its defaults; the exact sum, with no option given, up to
:data:`DIRECT_PAIRS` pairs; the tree otherwise (a ``tol``
it meets at its defaults is then met, and not passed on)."""
