"""The arguments every N-body verb shares, checked one way: ``theta``, masses, renamed names.

* ``theta`` (:func:`check_theta`): a real number (an int, a float, a NumPy
  scalar or a 0-d array), finite and ``>= 0``; ``0`` is the exact sum (the
  tree opens every node, the FMM pairs every leaf directly).  The FMM also
  needs ``theta < 1``: it translates a cell's expansion to another cell's
  centre, which converges only while their radii sum to less than their
  distance.  The tree's walk also requires the target group to lie beyond
  a node's largest radius, so any ``theta`` keeps its multipoles convergent.
* Masses (:func:`propopt.symmetry.gravity.check_masses`): finite and ``>= 0``
  in every verb, the exact sum too.  A cell stands for its bodies through
  their mass placed at their centre of mass; with masses of both signs the
  total may be near 0 and the centre anywhere (far outside the cell), so the
  opening test and the error bounds mean nothing.  One rule for every
  method lets code move between them; sources of both signs are
  :func:`propopt.pairwise_sum`'s (signed ``weights``).
* Renamed arguments (:func:`renamed`): the old keyword is still taken, with
  a ``DeprecationWarning`` naming the new one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from propopt.arrays import PLACES, array_kind, plain, real

__all__ = ["THETA_BOUND", "check_theta", "place", "result_dtype"]


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
