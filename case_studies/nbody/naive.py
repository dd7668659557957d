"""The chapter's baseline: the all-pairs double loop, as printed (``O(N^2)``).

Kept verbatim (a Python loop, ``+ 1e-10`` in the denominator instead of a
softening) so that the review can show where the speed-ups start; only the
inputs are checked and cast first (integer positions or lists would otherwise
meet the float accumulator, or ``list - list``).  It is only
usable for a few hundred bodies; :func:`propopt.direct_gravity` is
the same sum done properly (Newton's third law, threads, CUDA).

Around the listing, the function keeps the contract of every N-body verb of
:mod:`propopt_case_studies.nbody`: ``(pos, mass)`` in, ``(acc, pot or None)`` out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from propopt.arrays import flag, points, renamed
from propopt.symmetry.gravity import check_masses

__all__ = ["nbody_naive"]


@renamed(positions="pos", masses="mass")
def nbody_naive(
    pos: Any, mass: Any = None, *, potential: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """O(N^2) all-pairs force calculation (the chapter's listing, 36.11.1).

    Returns ``(acc, pot)``: ``acc = sum_{j != i} m_j (x_j - x_i) / (|x_j -
    x_i|^3 + 1e-10)``, the acceleration of each body (G = 1; the listing
    calls it ``forces``), and with ``potential=True`` ``pot = -sum_{j != i}
    m_j / (|x_j - x_i| + 1e-10)`` (the listing has none; the same guard),
    else None.  ``pos`` (n, 3) and ``mass`` (n,) may be lists or integers:
    they are computed in float64 (float32 positions stay float32).  Masses
    are ``>= 0``, as in every gravity verb.

    The listing's names ``positions=`` and ``masses=`` are still taken as
    keywords, with a ``DeprecationWarning``; until this release the function
    returned the bare ``forces`` array (now ``acc, _ = nbody_naive(...)``).

    Examples
    --------
    >>> import numpy as np
    >>> from propopt_case_studies.nbody.naive import nbody_naive
    >>> acc, pot = nbody_naive(np.array([[0.0, 0, 0], [2.0, 0, 0]]), np.array([1.0, 3.0]))
    >>> acc.round(6).tolist(), pot
    ([[0.75, 0.0, 0.0], [-0.25, 0.0, 0.0]], None)
    """
    potential = flag("potential", potential)
    positions = points("pos", pos, 3)  # (n, 3) floats: ints and lists as float64
    masses = check_masses(mass, len(positions))
    # ---- the chapter's listing
    N = len(positions)
    forces = np.zeros_like(positions)
    for i in range(N):
        for j in range(N):
            if i != j:
                r = positions[j] - positions[i]
                dist = np.linalg.norm(r)
                forces[i] += masses[j] * r / (dist**3 + 1e-10)
    # ---- end of the listing
    if not potential:
        return forces, None
    pot = np.zeros(N, dtype=positions.dtype)
    for i in range(N):
        for j in range(N):
            if i != j:
                pot[i] -= masses[j] / (np.linalg.norm(positions[j] - positions[i]) + 1e-10)
    return forces, pot
