"""Symmetry: compute half.  Each unordered pair once, credited to both ends.

:func:`pairwise_sum`
    ``out_i = sum_{j != i} w_j f(x_i, x_j)`` for a pair kernel with
    ``f(x_j, x_i) = +/- f(x_i, x_j)``; numba threads with per-thread
    accumulators over a tiled triangle, CUDA with shared-memory tiles, a
    plain double loop as the reference; separate targets (no halving).
:func:`direct_gravity`
    Accelerations and potentials of point masses (Plummer softening, ``G``),
    at the bodies or at separate targets; :func:`plummer` is its pair kernel.
"""

from .gravity import (
    GRAVITY_SYMMETRY,
    SOFTENINGS,
    check_masses,
    direct_gravity,
    plummer,
    spline_kernel,
)
from .pairs import DEVICES, METHODS, SYMMETRIES, TILE, pairwise_sum

__all__ = [
    "DEVICES",
    "GRAVITY_SYMMETRY",
    "METHODS",
    "SOFTENINGS",
    "SYMMETRIES",
    "TILE",
    "check_masses",
    "direct_gravity",
    "pairwise_sum",
    "plummer",
    "spline_kernel",
]
