"""The chapter's baseline: the all-pairs double loop, as printed (``O(N^2)``).

Kept verbatim (a Python loop, ``+ 1e-10`` in the denominator instead of a
softening) so that the review can show where the speed-ups start; only the
inputs are checked and cast first (integer positions or lists would otherwise
meet the float accumulator, or ``list - list``).  It is only
usable for a few hundred bodies; :func:`propopt.direct_gravity` is
the same sum done properly (Newton's third law, threads, CUDA).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from propopt.arrays import per_point, points

__all__ = ["nbody_naive"]


def nbody_naive(positions: Any, masses: Any) -> np.ndarray:
    """O(N^2) all-pairs force calculation (the chapter's listing, 36.11.1).

    Returns ``sum_{j != i} m_j (x_j - x_i) / (|x_j - x_i|^3 + 1e-10)``: the
    acceleration of each body (G = 1), despite the name ``forces``.
    ``positions`` (n, 3) and ``masses`` (n,) may be lists or integers: they
    are computed in float64 (float32 positions stay float32).

    Examples
    --------
    >>> import numpy as np
    >>> from case_studies.nbody.naive import nbody_naive
    >>> nbody_naive(np.array([[0.0, 0, 0], [2.0, 0, 0]]), np.array([1.0, 3.0])).round(6).tolist()
    [[0.75, 0.0, 0.0], [-0.25, 0.0, 0.0]]
    """
    positions = points("positions", positions, 3)  # (n, 3) floats: ints and lists as float64
    masses = per_point("masses", masses, len(positions), 1.0, "masses", nonnegative=False)
    N = len(positions)
    forces = np.zeros_like(positions)
    for i in range(N):
        for j in range(N):
            if i != j:
                r = positions[j] - positions[i]
                dist = np.linalg.norm(r)
                forces[i] += masses[j] * r / (dist**3 + 1e-10)
    return forces
