"""The exact sum: :func:`propopt.direct_gravity` (each pair once on CPU threads; CUDA tiles)."""

from __future__ import annotations

from typing import Any

import numpy as np

from propopt import direct_gravity

__all__ = ["direct"]


def direct(
    pos: Any,
    mass: Any = None,
    *,
    eps: float = 0.0,
    targets: Any = None,
    method: str = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Accelerations and potentials by the direct ``O(n^2)`` sum (G = 1).

    A thin front of :func:`propopt.direct_gravity` (Newton's third law halves
    the work; ``method="cuda"`` runs the shared-memory tiled kernel), and the
    yardstick of every accuracy figure of this case study.

    Examples
    --------
    >>> import numpy as np
    >>> from case_studies.nbody.direct import direct
    >>> acc, pot = direct(np.array([[0.0, 0, 0], [2.0, 0, 0]]), np.array([1.0, 3.0]))
    >>> acc[:, 0].tolist(), pot.tolist()
    ([0.75, -0.25], [-1.5, -0.5])
    """
    return direct_gravity(pos, mass, eps=eps, targets=targets, method=method)
