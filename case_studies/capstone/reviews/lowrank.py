"""Separability as a primitive: rank-50 factors of a dense matrix, against sklearn and ARPACK."""

from __future__ import annotations

import numpy as np

import propopt as pp

from ..measure import compare, median_seconds
from ..progress import Progress
from ..rows import Row, row
from .common import cpu_device

SIZES = {"small": 500, "default": 2000, "large": 4000}
"""n of the n x n float64 matrix: rank 50 (singular values 1 .. 1e-2) plus 1e-6 noise."""
RANK = 50
NOISE = 1e-6
ROUNDS = {"small": 7, "default": 5, "large": 3}
PLAN_S = {"small": 2.0, "default": 10.0, "large": 40.0}
TICKS = {size: 2 * r for size, r in ROUNDS.items()}

WHAT = ("an O(n^3) dense SVD", "separability")
TECHNIQUE = "randomized range finder, 2 power iterations, SVD of the small projection"


def matrix(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(M50 + E, M50)``: the rank-50 part and noise with ``||E||_F = 1e-6 ||M50||_F``."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.normal(size=(n, RANK)))[0]
    V = np.linalg.qr(rng.normal(size=(n, RANK)))[0]
    m50 = (U * np.geomspace(1.0, 1e-2, RANK)) @ V.T
    noise = rng.normal(size=(n, n))
    noise *= NOISE * np.linalg.norm(m50) / np.linalg.norm(noise)
    return m50 + noise, m50


def review(size: str, progress: Progress) -> list[Row]:
    """``low_rank`` against ``randomized_svd`` and ``svds(k=50)``, the matrix formed untimed."""
    from scipy.sparse.linalg import svds
    from sklearn.utils.extmath import randomized_svd

    n, rounds = SIZES[size], ROUNDS[size]
    a, m50 = matrix(n)

    def err(u: np.ndarray, s: np.ndarray, vt: np.ndarray) -> float:
        return float(np.linalg.norm((u * s) @ vt - m50) / np.linalg.norm(m50))

    def ours() -> pp.LowRank:
        return pp.low_rank(a, rank=RANK)

    def sk() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # the same oversampling and power iterations as low_rank's defaults
        return randomized_svd(a, RANK, n_oversamples=10, n_iter=2, random_state=0)

    def arpack() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return svds(a, k=RANK, random_state=0)

    # the floor: the products with the matrix that any randomized range
    # finder with 2 power iterations does, n x n times n x (rank + 10), six
    # of them (sketch, 2 x 2 in the iterations, the projection), as BLAS runs
    # them here; low_rank adds its error bound's 10 columns
    omega = np.random.default_rng(1).normal(size=(n, RANK + 10))
    floor_ms = 1e3 * median_seconds(lambda: [a @ omega for _ in range(6)], repeats=3)
    floor = dict(floor=f"6 GEMMs {n}x{n}x{RANK + 10}", floor_ms=floor_ms)
    f = ours()
    e_ours, e_sk, e_arpack = err(f.U, f.s, f.Vt), err(*sk()), err(*arpack())
    problem = f"rank-{RANK} factors of a {n} x {n} float64 matrix"
    dev = cpu_device()
    note = lambda e: f" (its error {e / e_ours:.2f}x ours)"  # noqa: E731
    return [
        row(problem, size, *WHAT, TECHNIQUE,
            "sklearn randomized_svd, same samples and iterations" + note(e_sk),
            compare(sk, ours, rounds=rounds, tick=progress.tick), e_ours, "F rel", dev, **floor),
        row(problem, size, *WHAT, TECHNIQUE, "scipy svds(k=50), ARPACK" + note(e_arpack),
            compare(arpack, ours, rounds=rounds, tick=progress.tick), e_ours, "F rel", dev,
            **floor),
    ]  # fmt: skip
