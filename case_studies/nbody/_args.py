"""The arguments every N-body verb shares, checked one way: ``theta``, masses, renamed names.

* ``theta`` (:func:`check_theta`): a real number (an int, a float, a NumPy
  scalar or a 0-d array), finite and ``>= 0``; ``0`` is the exact sum (the
  tree opens every node, the FMM pairs every leaf directly).  The FMM also
  needs ``theta < 1``: it translates a cell's expansion to another cell's
  centre, which converges only while their radii sum to less than their
  distance.  The tree's walk also requires the target group to lie beyond
  a node's largest radius, so any ``theta`` keeps its multipoles convergent.
* Masses (:func:`check_masses`): finite and ``>= 0`` for the tree and the
  FMM.  A cell stands for its bodies through their mass placed at their
  centre of mass; with masses of both signs the total may be near 0 and the
  centre anywhere (far outside the cell), so the opening test and the error
  bounds mean nothing.  The direct sum is exact for any sign:
  :func:`propopt.direct_gravity` (``method="direct"``) takes negative masses.
* Renamed arguments (:func:`renamed`): the old keyword is still taken, with
  a ``DeprecationWarning`` naming the new one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from propopt.arrays import PLACES, array_kind, per_point, plain, real

__all__ = ["DIRECT_HINT", "THETA_BOUND", "check_masses", "check_theta"]

DIRECT_HINT = "use method='direct' (propopt.direct_gravity) for masses of both signs"


THETA_BOUND: dict[str, tuple[float, str]] = {
    "tree": (math.inf, "must be finite and >= 0 for method='tree' (0 opens every node: the "
             "exact sum)"),
    "fmm": (1.0, "must be in [0, 1) for method='fmm' (two cells' expansions converge only "
            "while their radii sum to less than their distance; 0 sums every pair directly)"),
}  # fmt: skip
"""The one ``theta`` rule, ``0 <= theta < bound``: each method's bound, and why."""


def check_theta(theta: Any, method: str = "tree") -> float:
    """``theta`` as a float in ``[0, bound)`` for ``method`` (:data:`THETA_BOUND`).

    One line naming the value, the rule and what ``0`` means, e.g.
    ``theta=1.5: the opening angle must be in [0, 1) for method='fmm' ...``.
    """
    t = real("theta", theta)  # a NumPy scalar or 0-d array too; not '0.5' or True
    bound, rule = THETA_BOUND[method]
    if not (math.isfinite(t) and 0 <= t < bound):
        raise ValueError(f"theta={t!r}: the opening angle {rule}")
    return t


def check_masses(name: str, v: Any, n: int) -> np.ndarray:
    """``(n,)`` float64 masses for the tree and the FMM: finite and ``>= 0`` (1 each for None).

    A negative mass is refused with the reason and the way out
    (``method='direct'``); a non-finite one names the body to fix or drop.
    """
    a = plain(name, v) if v is not None else None
    if a is not None and a.dtype.kind in "fiub" and (a.ndim == 0 or a.shape == (n,)):
        f = a.astype(np.float64)
        if not np.isfinite(f).all():
            if a.ndim == 0:
                raise ValueError(f"{name}={f.item()!r}: masses must be finite and >= 0")
            i = int(np.argmax(~np.isfinite(f)))
            raise ValueError(
                f"{name}[{i}] = {f[i]}: masses must be finite and >= 0 (fix or drop body {i})"
            )
        if (f < 0).any():
            where = f"{name}={f.item()!r}" if a.ndim == 0 else None
            if where is None:
                i = int(np.argmax(f < 0))
                where = f"{name}[{i}] = {f[i]}"
            raise ValueError(
                f"{where}: the tree and the FMM take masses >= 0 only (a cell acts through "
                f"its centre of mass, which masses of both signs put anywhere); {DIRECT_HINT}"
            )
    return per_point(name, v, n, 1.0, "masses")


def result_dtype(pos: np.ndarray, mass: Any) -> np.dtype:
    """The dtype of the field of checked positions ``pos`` and the user's ``mass``.

    float32 when both are float32 (or narrower: float16, bfloat16 of NumPy
    or torch), float64 otherwise.
    """
    m = pos.dtype if mass is None else plain("mass", mass).dtype
    return np.dtype(np.float32 if np.result_type(pos.dtype, m) == np.float32 else np.float64)


def place(x: Any) -> str:
    """Where ``device='auto'`` runs the tree for the array ``x``: ``'cuda'`` for an array on
    a CUDA device, ``'cpu'`` for anything else."""
    return "cuda" if PLACES.get(array_kind(x) or "") == "cuda" else "cpu"
