"""Plummer sphere initial conditions (Aarseth, Henon and Wielen 1974).

Density ``rho(r) = 3 M / (4 pi a^3) (1 + r^2 / a^2)^(-5/2)`` in N-body units
(``G = M = 1``), sampled by inverting the cumulative mass
``M(r) / M = r^3 / (r^2 + a^2)^(3/2)`` and, for velocities, by von Neumann
rejection from the isotropic distribution function
``f(q) ~ q^2 (1 - q^2)^(7/2)`` of ``q = v / v_esc(r)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from propopt.arrays import generator, real, shown

__all__ = ["plummer_potential_energy", "plummer_sphere"]


def plummer_sphere(
    n: int,
    *,
    a: float = 1.0,
    seed: int | np.random.Generator | None = 0,
    rmax: float = 100.0,
    dtype: Any = np.float64,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions, velocities and masses of an ``n``-body Plummer sphere in equilibrium.

    Parameters
    ----------
    n : int
        Number of bodies, ``>= 0``.
    a : float
        Plummer scale radius (half-mass radius ``~1.305 a``).
    seed : int, None or numpy Generator
        Seed of ``numpy.random.default_rng`` (a Generator is used as is).
    rmax : float
        Radii are truncated at ``rmax * a`` (a fraction ``~1.5 / rmax^2`` of the
        mass lies beyond; the default drops a handful of bodies at N = 10^6).
    dtype : float32 or float64
        Of the returned arrays (other dtypes are refused: integers would
        truncate the positions).

    Returns
    -------
    pos : ndarray (n, 3)
    vel : ndarray (n, 3)
    mass : ndarray (n,)
        Equal masses ``1 / n`` (total mass 1), centred on the centre of mass
        with zero total momentum.

    Examples
    --------
    >>> from propopt_case_studies.nbody.plummer import plummer_sphere
    >>> pos, vel, m = plummer_sphere(1000, seed=1)
    >>> pos.shape, round(float(m.sum()), 12)
    ((1000, 3), 1.0)
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n={shown(n)}: must be an int >= 0")
    a, rmax = real("a", a), real("rmax", rmax)  # not '1', True or 1j
    if not (math.isfinite(a) and a > 0):
        raise ValueError(f"a={a!r}: the scale radius must be finite and > 0")
    if not (math.isfinite(rmax) and rmax > 0):
        raise ValueError(f"rmax={rmax!r}: must be finite and > 0")
    dtype = _float_dtype(dtype)
    rng = generator("seed", seed)
    n = int(n)
    # Inverse of M(r): r = a / sqrt(X^(-2/3) - 1), X ~ U(0, Xmax)
    xmax = (rmax**2 / (1.0 + rmax**2)) ** 1.5
    X = rng.uniform(0.0, xmax, n)
    X = np.maximum(X, 1e-300)
    r = a / np.sqrt(X ** (-2.0 / 3.0) - 1.0)
    pos = r[:, None] * _isotropic(rng, n)
    # Speeds: q = v / v_esc from g(q) = q^2 (1 - q^2)^3.5 (max < 0.1) by rejection
    q = np.empty(n)
    todo = np.arange(n)
    while todo.size:
        x = rng.uniform(0.0, 1.0, todo.size)
        y = rng.uniform(0.0, 0.1, todo.size)
        ok = y < x * x * (1.0 - x * x) ** 3.5
        q[todo[ok]] = x[ok]
        todo = todo[~ok]
    vesc = np.sqrt(2.0 / a) * (1.0 + (r / a) ** 2) ** -0.25
    vel = (q * vesc)[:, None] * _isotropic(rng, n)
    mass = np.full(n, 1.0 / n) if n else np.zeros(0)
    if n:
        pos -= pos.mean(axis=0)
        vel -= vel.mean(axis=0)
    return pos.astype(dtype), vel.astype(dtype), mass.astype(dtype)


def _float_dtype(dtype: Any) -> np.dtype:
    """float32 or float64: an integer dtype would truncate the positions to whole units."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(
            f"dtype={dtype!r} is not a NumPy dtype: pass np.float32 or np.float64"
        ) from None
    if dt not in (np.float32, np.float64):
        raise TypeError(
            f"dtype={dt.name}: must be np.float32 or np.float64 (an integer dtype would "
            "truncate the positions and velocities)"
        )
    return dt


def _isotropic(rng: np.random.Generator, n: int) -> np.ndarray:
    z = rng.uniform(-1.0, 1.0, n)
    phi = rng.uniform(0.0, 2.0 * np.pi, n)
    s = np.sqrt(1.0 - z * z)
    return np.stack([s * np.cos(phi), s * np.sin(phi), z], axis=1)


def plummer_potential_energy(a: float = 1.0) -> float:
    """Potential energy ``W = -3 pi G M^2 / (32 a)`` of the untruncated Plummer sphere."""
    return -3.0 * np.pi / (32.0 * a)
