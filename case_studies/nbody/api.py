"""One entry point for the gravitational field of point masses: :func:`field`.

Every N-body verb of :mod:`case_studies.nbody` (and :func:`propopt.direct_gravity`)
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

from ._args import check_theta

__all__ = ["DEVICES", "METHODS", "OPTIONS", "field"]

METHODS = ("tree", "fmm", "direct")
"""The algorithms of :func:`field`: Barnes-Hut, the fast multipole method, the exact sum."""
DEVICES = ("cpu", "cuda", "dask")
"""Where :func:`field` runs: numba threads, numba.cuda, or a Dask cluster (``client=``)."""
METHOD_DEVICES = {"tree": ("cpu", "cuda", "dask"), "fmm": ("cpu",), "direct": ("cpu", "cuda")}
"""The devices each method runs on (the keys of :data:`BACKENDS`)."""
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
    device: str = "cpu",
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
        Finite masses, 1 each by default.  ``>= 0`` for ``method='tree'``
        and ``'fmm'``: a cell acts through its centre of mass, which masses
        of both signs can put anywhere (far outside the cell), so the
        opening test and the error bounds fail.  ``method='direct'`` is
        exact for either sign.
    method : {'auto', 'tree', 'fmm', 'direct'}
        Barnes-Hut (:func:`.barnes_hut`; ``theta``, ``quadrupole``,
        ``group_size``, ``precision``), the fast multipole method
        (:func:`.fmm`; ``tol``, ``order``, ``theta``), or the exact ``O(n m)``
        sum (:func:`propopt.direct_gravity`).  ``'auto'`` (the default) picks
        by the accuracy asked for and the size: the method whose options are
        given; the FMM for ``tol`` below :data:`TREE_TOL` (the tree's error
        at its defaults, at the same ``quantile``); the exact sum up to
        :data:`DIRECT_PAIRS`
        (target, source) pairs, where it is as fast; the tree otherwise; and
        on a device the FMM does not run on, the tree or the exact sum.
    device : {'cpu', 'cuda', 'dask'}
        Numba threads; numba.cuda (``'tree'``, ``'direct'``); a Dask cluster
        (``'tree'``: the tree built here, scattered once, ``targets`` in
        chunks of ``chunk``; needs ``client`` and ``targets``).
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
        An unknown method or device, a device the method does not run on, or
        an option of another method (``tol`` with ``method='tree'``): each
        one line naming the argument, its value and what to pass instead.

    Examples
    --------
    >>> import numpy as np
    >>> from case_studies.nbody import field
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
    if method == "auto":
        method = _auto(pos, targets, device, dict(theta=theta, leaf_size=leaf_size, tol=tol,
                       quantile=quantile, order=order, quadrupole=quadrupole,
                       group_size=group_size, precision=precision))  # fmt: skip
        if method == "tree":
            tol = quantile = None  # the tree at its defaults meets it (TREE_TOL)
    if method not in METHODS:
        names = ", ".join(map(repr, ("auto", *METHODS)))
        raise ValueError(f"method={method!r} is not one of {names}")
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is not one of {', '.join(map(repr, DEVICES))}")
    if device not in METHOD_DEVICES[method]:
        where = [m for m in METHODS if device in METHOD_DEVICES[m]]
        raise ValueError(
            f"device={device!r}: method={method!r} runs on "
            f"{', '.join(map(repr, METHOD_DEVICES[method]))}; pass another device, or "
            f"method={' or '.join(map(repr, where))}"
        )
    given = dict(theta=theta, leaf_size=leaf_size, tol=tol, quantile=quantile, order=order,
                 quadrupole=quadrupole, group_size=group_size, precision=precision)  # fmt: skip
    for name, value in given.items():
        if value is not None and name not in OPTIONS[method]:
            takes = [m for m in METHODS if name in OPTIONS[m]]
            raise ValueError(
                f"{name}={value!r} is an option of method={' or '.join(map(repr, takes))}, "
                f"not of method={method!r}: leave it out"
            )
    for name, value in (("client", client), ("chunk", chunk)):
        if value is not None and device != "dask":
            raise ValueError(f"{name}= is for device='dask' (got device={device!r}): leave it out")
    potential = flag("potential", potential)
    if targets is None and target_eps is not None:
        raise ValueError("target_eps is given without targets: pass targets=, or leave it out")
    plan = _Plan(pos, mass, eps, softening, G, targets, target_eps, potential, device,
                 {k: v for k, v in given.items() if v is not None}, client, chunk)  # fmt: skip
    key = (method, device)
    dispatch.choose(BACKENDS, key, plan, ())  # raises the row's refusal
    return BACKENDS[key].run(plan)


def _auto(pos: Any, targets: Any, device: Any, given: dict[str, Any]) -> str:
    """The method ``method='auto'`` runs (see :func:`field`)."""
    named = {k for k, v in given.items() if v is not None}
    for method in ("fmm", "tree"):  # an option only one method takes names it (tol aside)
        own = set(OPTIONS[method]) - set(OPTIONS["fmm" if method == "tree" else "tree"])
        if named & own - {"tol", "quantile"}:
            return method
    tol, q = given["tol"], given["quantile"]
    if tol is not None:
        bound = TREE_TOL.get(0.99 if q is None else q)
        if bound is None:  # an unknown quantile: the FMM's check names it
            return "fmm"
        return "fmm" if float(real("tol", tol)) < bound else "tree"
    n = _length(pos)
    m = n if targets is None else _length(targets)
    if device in ("cpu", "cuda") and not named and n * m <= DIRECT_PAIRS:
        return "direct"
    return "tree"


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


def _direct(p: _Plan) -> tuple[Any, Any]:
    return direct_gravity(p.pos, p.mass, eps=p.eps, G=p.G, targets=p.targets,  # type: ignore[no-any-return]
                          target_eps=p.target_eps, softening=p.softening, device=p.device,
                          potential=p.potential)  # fmt: skip


def _fmm(p: _Plan) -> tuple[Any, Any]:
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


def _tree(p: _Plan) -> tuple[Any, Any]:
    tree, kw = _tree_and_options(p)
    return tree.field(p.targets, device=p.device, **kw)  # type: ignore[no-any-return]


def _tree_dask(p: _Plan) -> tuple[Any, Any]:
    from .distributed import field_dask

    tree, kw = _tree_and_options(p)
    chunk = 250_000 if p.chunk is None else count("chunk", p.chunk)
    return field_dask(p.client, tree, p.targets, chunk=chunk, **kw)  # type: ignore[no-any-return]


BACKENDS: dict[tuple[str, str], dispatch.Backend[_Plan, tuple[Any, Any]]] = {
    **dispatch.on_devices("tree", _tree),
    ("tree", "dask"): dispatch.Backend(_refuse_dask, _tree_dask),
    ("fmm", "cpu"): dispatch.Backend(dispatch.takes_any, _fmm),
    **dispatch.on_devices("direct", _direct),
}
"""Every ``(method, device)`` that :func:`field` runs."""
