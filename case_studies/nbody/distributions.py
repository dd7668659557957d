"""Test distributions of the N-body accuracy tables: a Plummer sphere, clusters and a disc, a cube.

Each returns ``(pos (n, 3), mass (n,))`` with total mass 1, float64,
reproducible from ``seed``; ``DISTRIBUTIONS`` maps their names to them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from propopt.arrays import generator, shown

from .plummer import plummer_sphere

__all__ = ["DISTRIBUTIONS", "clusters_and_disc", "plummer_bodies", "uniform_cube"]


def _check(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n={shown(n)}: must be an int >= 0")
    return int(n)


def plummer_bodies(n: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A Plummer sphere of scale radius 1 (:func:`~.plummer.plummer_sphere`)."""
    pos, _, m = plummer_sphere(_check(n), seed=seed)
    return pos, m


def clusters_and_disc(n: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two dense Plummer clusters (scale 0.05, 4 apart) and a thin exponential disc.

    A third of the bodies in each: clusters centred at ``(+-2, 0, 0.5)``,
    the disc in the plane ``z = 0`` with scale length 1 and scale height
    0.005 (200x thinner than wide), so the tree holds dense spheres, a
    sheet and empty space between.
    """
    n = _check(n)
    rng = generator("seed", seed)
    if not isinstance(seed, (int, np.integer)):  # the clusters' seeds are seed + 1, seed + 2
        raise TypeError(f"seed={seed!r}: must be an int >= 0")
    k1, k2 = n // 3, n // 3
    k3 = n - k1 - k2
    c1, _, _ = plummer_sphere(k1, a=0.05, seed=seed + 1)
    c2, _, _ = plummer_sphere(k2, a=0.05, seed=seed + 2)
    c1 += np.array([2.0, 0.0, 0.5])
    c2 += np.array([-2.0, 0.0, 0.5])
    r = rng.gamma(2.0, 1.0, k3)  # surface density ~ exp(-r): r ~ Gamma(2, 1)
    phi = rng.uniform(0, 2 * np.pi, k3)
    z = rng.laplace(0.0, 0.005, k3)
    disc = np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)
    pos = np.concatenate([c1, c2, disc])
    return pos, np.full(n, 1.0 / n) if n else np.zeros(0)


def uniform_cube(n: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Bodies uniform in the unit cube ``[0, 1)^3``."""
    n = _check(n)
    pos = generator("seed", seed).uniform(0.0, 1.0, (n, 3))
    return pos, np.full(n, 1.0 / n) if n else np.zeros(0)


DISTRIBUTIONS: dict[str, Callable[..., tuple[np.ndarray, np.ndarray]]] = {
    "plummer": plummer_bodies,
    "clusters+disc": clusters_and_disc,
    "cube": uniform_cube,
}
"""Name -> sampler ``(n, *, seed) -> (pos, mass)``."""
