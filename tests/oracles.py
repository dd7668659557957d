"""Slow, obviously correct float64 NumPy references that share no code with propopt."""

from __future__ import annotations

import numpy as np


def gravity(
    pos: np.ndarray,
    mass: np.ndarray,
    e2: np.ndarray,
    targets: np.ndarray | None = None,
    te2: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact softened gravity (G = 1), pair softening ``(eps_i^2 + eps_j^2) / 2``.

    With ``targets=None`` the bodies are the targets and ``j = i`` is left out;
    a pair at zero distance and zero softening contributes nothing.
    """
    pos = np.asarray(pos, np.float64)
    mass = np.asarray(mass, np.float64)
    e2 = np.broadcast_to(np.asarray(e2, np.float64), mass.shape)
    self_ = targets is None
    T = pos if self_ else np.asarray(targets, np.float64)
    t2 = e2 if self_ else np.broadcast_to(np.asarray(te2, np.float64), (T.shape[0],))
    acc = np.zeros((T.shape[0], 3))
    pot = np.zeros(T.shape[0])
    for i0 in range(0, T.shape[0], 256):
        sl = slice(i0, i0 + 256)
        d = pos[None, :, :] - T[sl, None, :]
        s2 = (d * d).sum(-1) + 0.5 * (t2[sl, None] + e2[None, :])
        with np.errstate(divide="ignore"):
            inv = np.where(s2 > 0, 1.0 / np.sqrt(np.where(s2 > 0, s2, 1.0)), 0.0)
        if self_:
            idx = np.arange(i0, min(i0 + 256, T.shape[0]))
            inv[idx - i0, idx] = 0.0
        w = mass[None, :] * inv
        acc[sl] = np.einsum("tj,tjk->tk", w * inv * inv, d)
        pot[sl] = -w.sum(1)
    return acc, pot


def unsoftened_pull(pos, m, targets=None):
    """Plain float64 sum ``sum_j m_j d / |d|^3`` (eps = 0; identical positions skipped)."""
    pos = np.asarray(pos, np.float64)
    T = pos if targets is None else np.asarray(targets, np.float64)
    acc = np.zeros((len(T), 3))
    for i, t in enumerate(T):
        d = pos - t
        r2 = (d * d).sum(1)
        ok = r2 > 0
        acc[i] = (m[ok, None] * d[ok] / r2[ok, None] ** 1.5).sum(0)
    return acc
