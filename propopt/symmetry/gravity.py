"""The direct gravitational sum, built on :func:`pairwise_sum`.

With Plummer softening ``eps`` the field of mass ``m_j`` at ``x_j`` on ``x_i`` is

.. math:: a_i = G \\sum_{j \\ne i} m_j \\frac{x_j - x_i}{(|x_j - x_i|^2 + \\epsilon^2)^{3/2}},
          \\qquad
          \\phi_i = -G \\sum_{j \\ne i} \\frac{m_j}{(|x_j - x_i|^2 + \\epsilon^2)^{1/2}}.

The pair function ``(x_j - x_i)/s^3`` is antisymmetric and ``-1/s`` is
symmetric (Newton's third law), so :func:`pairwise_sum` with the masses as
weights evaluates each unordered pair once.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _dispatch, threads
from .pairs import METHODS, Symmetry, _check_method, pairwise_sum, points

GRAVITY_SYMMETRY: tuple[Symmetry, ...] = (
    "antisymmetric",
    "antisymmetric",
    "antisymmetric",
    "symmetric",
)
"""Laws of the outputs of :func:`plummer`: field antisymmetric, potential symmetric."""


def plummer(xi: Any, xj: Any, eps2: float) -> tuple[float, float, float, float]:
    """Softened pair field: ``((x_j - x_i)/s^3, -1/s)`` with ``s^2 = r^2 + eps^2``.

    A coincident pair with ``eps = 0`` contributes 0 (it has no direction).
    This is the kernel :func:`direct_gravity` hands to :func:`pairwise_sum`.
    """
    dx = xj[0] - xi[0]
    dy = xj[1] - xi[1]
    dz = xj[2] - xi[2]
    s2 = dx * dx + dy * dy + dz * dz + eps2
    if s2 == 0.0:
        return 0.0, 0.0, 0.0, 0.0
    inv = 1.0 / math.sqrt(s2)
    inv3 = inv * inv * inv
    return dx * inv3, dy * inv3, dz * inv3, -inv


@threads.parallel
def direct_gravity(
    pos: Any,
    mass: Any = None,
    *,
    eps: float = 0.0,
    G: float = 1.0,
    targets: Any = None,
    method: str = "auto",
    tile: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Accelerations and potentials of point masses by the direct ``O(n^2)`` sum.

    .. math:: a_i = G \\sum_{j \\ne i} m_j (x_j - x_i) / (r_{ij}^2 + \\epsilon^2)^{3/2},
              \\quad \\phi_i = -G \\sum_{j \\ne i} m_j / (r_{ij}^2 + \\epsilon^2)^{1/2}

    Newton's third law (the pair field is antisymmetric, the pair potential
    symmetric) halves the work: each unordered pair is visited once.

    Parameters
    ----------
    pos : array (n, 3)
        Source positions, float32 or float64.
    mass : array (n,) or scalar, optional
        Masses (1 by default).
    eps : float
        Plummer softening length, ``>= 0``.  With ``eps = 0`` a coincident
        pair contributes nothing.
    G : float
        Gravitational constant (1 by default: N-body units).
    targets : array (m, 3), optional
        Evaluate the field of all sources at these points instead (e.g. to
        measure a tree code's error at sample targets).  Every source counts,
        also one at the very position of a target (it adds ``-G m/eps`` to
        the potential and nothing to the acceleration).  No halving is
        possible for separate targets: ``m * n`` kernel calls.
    method : {'auto', 'halved', 'full', 'untiled', 'reference', 'cuda'}
        As in :func:`pairwise_sum`.
    tile : int, optional
        Points per block.

    Returns
    -------
    acc : ndarray (n, 3) or (m, 3)
    pot : ndarray (n,) or (m,)
        In the dtype of ``pos`` (float64 accumulation).

    Notes
    -----
    ``n(n-1)/2`` pair evaluations (about 20 flops each) on numba threads;
    with targets ``m n``.  The total momentum ``sum_i m_i a_i`` vanishes up
    to rounding (the tests check it).

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import direct_gravity
    >>> acc, pot = direct_gravity(np.array([[0.0, 0, 0], [2.0, 0, 0]]), np.array([1.0, 3.0]))
    >>> acc.tolist(), pot.tolist()
    ([[0.75, 0.0, 0.0], [-0.25, 0.0, 0.0]], [-1.5, -0.5])
    """
    _check_method(method)
    if method == "auto" and _dispatch.array_kind(pos) in (_dispatch.CUDA, _dispatch.TORCH_CUDA):
        method = "cuda"
    X = points("pos", _maybe_host(pos), 3)
    if not (isinstance(eps, (int, float, np.floating, np.integer)) and math.isfinite(eps)):
        raise ValueError(f"eps={eps!r}: the softening length must be a finite number >= 0")
    if eps < 0:
        raise ValueError(f"eps={eps!r}: the softening length must be >= 0")
    if not (isinstance(G, (int, float, np.floating, np.integer)) and math.isfinite(G)):
        raise ValueError(f"G={G!r}: must be a finite number")
    if mass is not None and np.ndim(mass) == 1 and len(mass) != X.shape[0]:
        raise ValueError(f"mass has shape {np.shape(mass)}: must be ({X.shape[0]},), one per body")
    T = None if targets is None else points("targets", _maybe_host(targets), 3)
    res = pairwise_sum(
        plummer,
        X,
        mass,
        symmetry=GRAVITY_SYMMETRY,
        args=(float(eps) ** 2,),
        targets=T,
        method=method,
        tile=tile,
    )
    acc = np.ascontiguousarray(res[:, :3])
    pot = np.ascontiguousarray(res[:, 3])
    if G != 1.0:
        acc *= G
        pot *= G
    return acc, pot


def _maybe_host(x: Any) -> Any:
    from .pairs import _host

    return _host(x)


__all__ = ["GRAVITY_SYMMETRY", "METHODS", "direct_gravity", "plummer"]
