"""Locality: source tiles in pair sums, the matmul rungs, Morton order, the roofline.

Reported (no target) at N = 20,000: tiled vs untiled full pair sum.  Matrix
product (float32): naive triple loop, tiled numba, BLAS.  Morton order of
10^6 3-D points against keys plus ``np.argsort(kind="stable")``.
"""

from __future__ import annotations

import numpy as np

import propopt as pp
from propopt.locality import morton_keys, roofline, tiled_matmul, tiled_pairwise
from propopt.symmetry import plummer

from .common import Benchmark, ratio


class TiledPairwise(Benchmark):
    """Full gravitational pair sum with and without L1 source tiles (same kernel)."""

    params = [200, 20_000]
    param_names = ["n"]

    def setup(self, n):
        rng = np.random.default_rng(0)
        self.x, self.m = rng.normal(size=(n, 3)), rng.uniform(0.5, 1.5, n)
        self.tiled()
        self.untiled()

    def tiled(self):
        return tiled_pairwise(plummer, self.x, self.m, args=(1e-4,), tile=128)

    def untiled(self):
        return tiled_pairwise(plummer, self.x, self.m, args=(1e-4,), tile=None)

    def time_tiled(self, n):
        self.tiled()

    def time_untiled(self, n):
        self.untiled()

    def track_speedup_tiled_vs_untiled(self, n):
        return ratio(self.untiled, self.tiled, repeats=3)

    track_speedup_tiled_vs_untiled.unit = "x"


class Matmul(Benchmark):
    """float32 n x n product: naive triple loop, tiled numba, BLAS."""

    params = [64, 512]
    param_names = ["n"]

    def setup(self, n):
        rng = np.random.default_rng(0)
        self.A = rng.normal(size=(n, n)).astype(np.float32)
        self.B = rng.normal(size=(n, n)).astype(np.float32)
        for method in ("naive", "tiled"):
            tiled_matmul(self.A[:8, :8], self.B[:8, :8], method=method)

    def _mm(self, method):
        return lambda: tiled_matmul(self.A, self.B, method=method)

    def time_naive(self, n):
        self._mm("naive")()

    def time_tiled(self, n):
        self._mm("tiled")()

    def time_blas(self, n):
        self._mm("blas")()

    def track_speedup_tiled_vs_naive(self, n):
        return ratio(self._mm("naive"), self._mm("tiled"), repeats=3)

    track_speedup_tiled_vs_naive.unit = "x"

    def track_speedup_blas_vs_tiled(self, n):
        return ratio(self._mm("tiled"), self._mm("blas"), repeats=3)

    track_speedup_blas_vs_tiled.unit = "x"


class MortonOrder(Benchmark):
    """Permutation sorting 3-D float64 points by Morton key."""

    params = [1_000, 1_000_000]
    param_names = ["n"]

    def setup(self, n):
        self.p = np.random.default_rng(0).uniform(size=(n, 3))
        pp.morton_order(self.p)
        morton_keys(self.p)

    def _stable_argsort(self):
        return np.argsort(morton_keys(self.p), kind="stable")

    def time_morton_order(self, n):
        pp.morton_order(self.p)

    def time_keys(self, n):
        morton_keys(self.p)

    def time_keys_and_stable_argsort(self, n):
        self._stable_argsort()

    def track_speedup_vs_stable_argsort(self, n):
        return ratio(self._stable_argsort, lambda: pp.morton_order(self.p))

    track_speedup_vs_stable_argsort.unit = "x"


class Roofline(Benchmark):
    """Measured roofs and the fusion gain (float32)."""

    params = [1 << 12, 1 << 20]
    param_names = ["n"]

    def setup(self, n):
        self.rep = roofline(n=n, matmul_n=64 if n < 1 << 20 else 1024, repeats=3)

    def track_compute_roof(self, n):
        return self.rep.peak_gflops

    track_compute_roof.unit = "GFLOP/s"

    def track_memory_roof(self, n):
        return self.rep.peak_gbs

    track_memory_roof.unit = "GB/s"

    def track_speedup_fused_vs_numpy_poly8(self, n):
        return self.rep["poly8 numpy"].seconds / self.rep["poly8 fused"].seconds

    track_speedup_fused_vs_numpy_poly8.unit = "x"

    def track_speedup_fused_vs_numpy_axpy(self, n):
        return self.rep["axpy numpy"].seconds / self.rep["axpy fused"].seconds

    track_speedup_fused_vs_numpy_axpy.unit = "x"
