"""Slow, obviously-correct float64 references for the tests: brute-force moments, dense SVD."""

from __future__ import annotations

import numpy as np


def brute_moments(pos, mass):
    """``(M, c, S2, S3)`` with numpy outer products (c = 0 when M = 0)."""
    M = float(mass.sum())
    c = (mass[:, None] * pos).sum(axis=0) / M if M else np.zeros(3)
    y = pos - c
    S2 = np.einsum("j,ji,jk->ik", mass, y, y)
    S3 = np.einsum("j,ji,jk,jl->ikl", mass, y, y, y)
    return M, c, S2, S3


def best_rank_k(M, k):
    """The optimal rank-k approximation (Eckart-Young) by a dense SVD."""
    U, s, Vt = np.linalg.svd(M, full_matrices=False)
    return (U[:, :k] * s[:k]) @ Vt[:k]
