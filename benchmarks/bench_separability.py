"""low_rank against scipy.linalg.svd; multipole evaluation against the direct sum.

Targets on the 2-core development machine, float64:
* ``low_rank`` of a 4000 x 4000 matrix (the large suite; 200 and 1000 here)
  of rank 50 plus 1e-6 relative noise:
  at least 10x faster than ``scipy.linalg.svd`` at matched accuracy of the
  rank-50 part.  Matched accuracy: both results truncated to rank 50,
  ``err = ||M50 - A50||_F / ||M50||_F`` with ``M50`` the noise-free rank-50
  matrix; ``low_rank``'s error must be within 1.1x of the dense SVD's (which
  is the optimal rank-50 truncation of the noisy matrix).
* a multipole (octupole) evaluation of a cluster's field at far targets
  against the direct sum over its points: the speedup grows as the cluster's
  size, at a relative error ``O((R/r)^4)`` that is tracked.
"""

from __future__ import annotations

import numpy as np

import propopt as pp
from propopt.separability import NMOM, evaluate_rows, moments_segments

from .common import Benchmark, ratio

NOISE = 1e-6
NT = 10_000
RANK = 50


def _rank50_plus_noise(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(M50 + E, M50)``: singular values 1..1e-2 (geometric) and ``||E||_F = 1e-6 ||M50||_F``."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.normal(size=(n, RANK)))[0]
    V = np.linalg.qr(rng.normal(size=(n, RANK)))[0]
    m50 = (U * np.geomspace(1.0, 1e-2, RANK)) @ V.T
    noise = rng.normal(size=(n, n))
    noise *= NOISE * np.linalg.norm(m50) / np.linalg.norm(noise)
    return m50 + noise, m50


def _svd50(a: np.ndarray) -> np.ndarray:
    import scipy.linalg

    u, s, vt = scipy.linalg.svd(a, full_matrices=False)
    return (u[:, :RANK] * s[:RANK]) @ vt[:RANK]


class LowRank(Benchmark):
    """Rank-50 factorization of an n x n float64 matrix of rank 50 plus noise."""

    params = [200, 1000]  # 4000: the large suite (benchmarks/large)
    param_names = ["n"]
    repeat = (2, 5, 120.0)

    def setup(self, n):
        try:
            import scipy.linalg  # noqa: F401
        except ImportError as e:  # scipy lives in the bench extra
            raise NotImplementedError("scipy is not installed") from e
        self.a, self.m50 = _rank50_plus_noise(n)
        pp.low_rank(self.a[:100, :100], rank=10)  # nothing to compile; warms BLAS threads
        self.repeats = 3 if n > 1000 else 7

    def time_scipy_svd(self, n):
        _svd50(self.a)

    def time_low_rank(self, n):
        pp.low_rank(self.a, rank=RANK)

    def track_speedup_vs_scipy_svd(self, n):
        return ratio(lambda: _svd50(self.a), lambda: pp.low_rank(self.a, rank=RANK), self.repeats)

    track_speedup_vs_scipy_svd.unit = "x"

    def _err(self, approx):
        return float(np.linalg.norm(approx - self.m50) / np.linalg.norm(self.m50))

    def track_rel_error_low_rank(self, n):
        return self._err(pp.low_rank(self.a, rank=RANK).to_dense())

    track_rel_error_low_rank.unit = "relative F-norm error"

    def track_rel_error_scipy_svd(self, n):
        return self._err(_svd50(self.a))

    track_rel_error_scipy_svd.unit = "relative F-norm error"

    def track_error_over_svd(self, n):
        """Matched accuracy: low_rank's error over the dense SVD's (target <= 1.1)."""
        return self._err(pp.low_rank(self.a, rank=RANK).to_dense()) / self._err(_svd50(self.a))

    track_error_over_svd.unit = "x"


class MultipoleField(Benchmark):
    """Field of n points in the unit ball at 10^4 targets 8-16 radii away, float64.

    The ball is cut into the 4 x 4 x 4 grid cells (<= 64 leaves, as a tree
    code's nodes two levels down); the multipole side computes the leaves'
    moments with ``moments_segments`` and sums their fields with
    ``evaluate_rows``; the direct side sums over every point (``propopt.direct_gravity``).
    Both run on numba threads.
    """

    params = [[100, 10_000], [2, 3]]
    param_names = ["n", "order"]

    def setup(self, n, order):
        rng = np.random.default_rng(0)
        g = rng.normal(size=(n, 3))
        x = g / np.linalg.norm(g, axis=1, keepdims=True) * rng.uniform(0, 1, (n, 1)) ** (1 / 3)
        cell = np.minimum(((x + 1.0) * 2.0).astype(np.int64), 3) @ np.array([16, 4, 1])
        order_ = np.argsort(cell, kind="stable")
        self.x, self.cell = np.ascontiguousarray(x[order_]), cell[order_]
        self.m = rng.uniform(0.5, 1.5, n)
        self.offsets = np.concatenate([[0], np.cumsum(np.bincount(self.cell, minlength=64))])
        self.rows = np.empty((64, NMOM))
        t = rng.normal(size=(NT, 3))
        self.t = t / np.linalg.norm(t, axis=1, keepdims=True) * rng.uniform(8, 16, (NT, 1))
        self.acc, self.pot = np.empty((NT, 3)), np.empty(NT)
        self.order = order
        self._moments()
        self._direct()
        self._multipole()

    def _moments(self):
        moments_segments(self.x, self.m, self.offsets, self.rows)

    def _direct(self):
        return pp.direct_gravity(self.x, self.m, targets=self.t)[0]

    def _multipole(self):
        evaluate_rows(self.rows, self.t, self.order, 0.0, self.acc, self.pot)
        return self.acc

    def time_direct_sum(self, n, order):
        self._direct()

    def time_multipole_eval(self, n, order):
        self._multipole()

    def time_leaf_moments(self, n, order):
        self._moments()

    def track_speedup_eval_vs_direct(self, n, order):
        return ratio(self._direct, self._multipole)

    track_speedup_eval_vs_direct.unit = "x"

    def track_speedup_moments_and_eval_vs_direct(self, n, order):
        def both():
            self._moments()
            self._multipole()

        return ratio(self._direct, both)

    track_speedup_moments_and_eval_vs_direct.unit = "x"

    def track_rel_error(self, n, order):
        """Largest ``|a - a_direct| / |a_direct|`` over the targets."""
        ref = self._direct().copy()
        approx = self._multipole()
        err = np.linalg.norm(approx - ref, axis=1) / np.linalg.norm(ref, axis=1)
        return float(err.max())

    track_rel_error.unit = "relative"
