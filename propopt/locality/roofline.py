"""The roofline of this machine, measured: how fast can a kernel of given intensity run?

A kernel doing ``F`` flops while moving at least ``Q`` bytes to and from
memory has arithmetic intensity ``I = F / Q``; it cannot run faster than

.. math:: P(I) = \\min(P_{peak}, \\; I \\cdot B_{peak})

where ``P_peak`` is the compute roof (GFLOP/s) and ``B_peak`` the memory
roof (GB/s).  Below the ridge ``I* = P_peak / B_peak`` a kernel is memory
bound: only moving fewer bytes (fusion, tiling) speeds it up.

:func:`roofline` times a few kernels on this machine and returns a
:class:`RooflineReport` (``str()`` is a table); :func:`plot_roofline` draws
it.  Kernels (float32 by default):

* ``copy``: ``y = x`` (0 flops; sets the memory roof with the streams below);
* ``axpy numpy`` / ``axpy fused``: ``y = a x + y`` as NumPy (a temporary for
  ``a x``) and as one numba pass;
* ``poly8 numpy`` / ``poly8 fused``: a degree-4 polynomial by Horner (8
  flops per element), as NumPy temporaries and as one numba pass;
* ``matmul tiled`` / ``matmul blas``: :func:`~propopt.locality.tiled_matmul`
  and ``np.matmul`` (the compute roof).

Bytes are the minimum traffic (inputs read once, output written once); the
NumPy versions move more (their temporaries), which is exactly what fusion
saves, and shows as a lower GFLOP/s at the same intensity.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit, prange

from ..files import atomic_write
from .tiling import tiled_matmul

__all__ = ["KernelPoint", "RooflineReport", "plot_roofline", "roofline"]


@njit(parallel=True, cache=True)
def _copy(x: Any, y: Any) -> None:
    for i in prange(x.shape[0]):
        y[i] = x[i]


@njit(parallel=True, cache=True)
def _axpy(a: Any, x: Any, y: Any) -> None:
    for i in prange(x.shape[0]):
        y[i] = a * x[i] + y[i]


@njit(parallel=True, cache=True)
def _poly8(x: Any, y: Any, c0: Any, c1: Any, c2: Any, c3: Any, c4: Any) -> None:
    for i in prange(x.shape[0]):
        v = x[i]
        y[i] = (((c4 * v + c3) * v + c2) * v + c1) * v + c0


@dataclass(frozen=True)
class KernelPoint:
    """One measured kernel: a point on the roofline chart."""

    name: str
    flops: float
    bytes: float
    seconds: float

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9

    @property
    def gbs(self) -> float:
        """Minimum traffic over time, GB/s."""
        return self.bytes / self.seconds / 1e9

    @property
    def intensity(self) -> float:
        """Flops per byte of minimum traffic (0 for a copy)."""
        return self.flops / self.bytes


@dataclass(frozen=True)
class RooflineReport:
    """Measured roofs and kernels (:func:`roofline`).

    Attributes
    ----------
    peak_gflops : float
        Compute roof: the best GFLOP/s measured (the BLAS matrix product).
    peak_gbs : float
        Memory roof: the best GB/s among the streaming kernels.
    kernels : list of KernelPoint
    dtype : str
    n, matmul_n : int
        Element count of the streaming kernels and matrix edge.
    """

    peak_gflops: float
    peak_gbs: float
    kernels: list[KernelPoint] = field(repr=False)
    dtype: str
    n: int
    matmul_n: int

    @property
    def ridge(self) -> float:
        """Intensity (flop/byte) where the memory roof meets the compute roof."""
        return self.peak_gflops / self.peak_gbs

    def attainable(self, intensity: float) -> float:
        """``min(peak_gflops, intensity * peak_gbs)``."""
        return min(self.peak_gflops, intensity * self.peak_gbs)

    def __getitem__(self, name: str) -> KernelPoint:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r}; measured: {', '.join(k.name for k in self.kernels)}")

    def __str__(self) -> str:
        head = (
            f"roofline ({self.dtype}, n={self.n}, matmul {self.matmul_n}^2): "
            f"compute roof {self.peak_gflops:.1f} GFLOP/s, memory roof {self.peak_gbs:.1f} GB/s, "
            f"ridge at {self.ridge:.2f} flop/byte"
        )
        rows = [
            f"{'kernel':<14} {'flop/byte':>9} {'GFLOP/s':>9} {'GB/s':>7} {'ms':>9} "
            f"{'bound':>8} {'of roof':>7}"
        ]
        for k in self.kernels:
            if k.flops == 0:
                bound, frac = "memory", k.gbs / self.peak_gbs
            else:
                bound = "memory" if k.intensity < self.ridge else "compute"
                frac = k.gflops / self.attainable(k.intensity)
            rows.append(
                f"{k.name:<14} {k.intensity:9.3g} {k.gflops:9.2f} {k.gbs:7.2f} "
                f"{k.seconds * 1e3:9.3f} {bound:>8} {frac:7.0%}"
            )
        return head + "\n" + "\n".join(rows)


def _best(fn: Callable[[], object], repeats: int) -> float:
    """Shortest of ``repeats`` timed runs after a warm-up: a roof is what the machine
    can do, and on a shared machine other jobs only ever add time (as STREAM reports
    its best run)."""
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(min(ts))


def roofline(
    n: int = 1 << 24,
    matmul_n: int = 1024,
    *,
    dtype: Any = np.float32,
    repeats: int = 5,
) -> RooflineReport:
    """Measure this machine's roofs and place a few kernels under them.

    Parameters
    ----------
    n : int
        Elements of the streaming kernels (default ``2^24``: 64 MiB of
        float32, far beyond the caches, so they measure DRAM).
    matmul_n : int
        Matrix edge of the products (``2 n^3`` flops).
    dtype : float32 or float64
    repeats : int
        Timed runs per kernel; the shortest counts (after one warm-up run).

    Returns
    -------
    RooflineReport
        ``str()`` is a table: intensity, GFLOP/s, GB/s, bound, share of the roof.

    Notes
    -----
    Takes about a second at the defaults on 2 cores (the BLAS product
    dominates).  Results vary with machine load: run it on a quiet machine.

    Examples
    --------
    >>> from propopt.locality import roofline
    >>> rep = roofline(n=1 << 12, matmul_n=32, repeats=1)
    >>> rep["poly8 fused"].intensity   # 8 flops per (4 + 4) bytes
    1.0
    >>> rep.peak_gflops > 0 and rep.peak_gbs > 0
    True
    """
    for nm, v, lo in (("n", n, 1), ("matmul_n", matmul_n, 1), ("repeats", repeats, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{nm}={v!r}: must be an int >= {lo}")
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype={dtype!r}: must be float32 or float64")
    s = dt.itemsize
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, n).astype(dt)
    y = rng.uniform(-1, 1, n).astype(dt)
    out = np.empty_like(x)
    a = dt.type(1.0001)
    c = [dt.type(v) for v in (0.5, -0.25, 0.125, 0.0625, -0.03125)]
    A = rng.uniform(-1, 1, (matmul_n, matmul_n)).astype(dt)
    B = rng.uniform(-1, 1, (matmul_n, matmul_n)).astype(dt)

    def poly_numpy() -> object:
        return (((c[4] * x + c[3]) * x + c[2]) * x + c[1]) * x + c[0]

    mm = 2.0 * matmul_n**3
    mb = 3.0 * matmul_n**2 * s
    specs: list[tuple[str, float, float, Callable[[], object]]] = [
        ("copy", 0.0, 2.0 * n * s, lambda: _copy(x, out)),
        ("axpy numpy", 2.0 * n, 3.0 * n * s, lambda: np.add(a * x, y, out=out)),
        ("axpy fused", 2.0 * n, 3.0 * n * s, lambda: _axpy(a, x, y)),
        ("poly8 numpy", 8.0 * n, 2.0 * n * s, poly_numpy),
        ("poly8 fused", 8.0 * n, 2.0 * n * s, lambda: _poly8(x, out, *c)),
        ("matmul tiled", mm, mb, lambda: tiled_matmul(A, B)),
        ("matmul blas", mm, mb, lambda: np.matmul(A, B)),
    ]
    points = [KernelPoint(name, f, q, _best(fn, repeats)) for name, f, q, fn in specs]
    peak_f = max(p.gflops for p in points if p.flops > 0)
    peak_b = max(p.gbs for p in points if p.intensity < 1.0 or p.flops == 0)
    return RooflineReport(peak_f, peak_b, points, dt.name, int(n), int(matmul_n))


def plot_roofline(report: RooflineReport, path: str | os.PathLike[str]) -> Path:
    """Draw ``report`` as a log-log roofline chart into a PNG file at ``path``.

    Needs matplotlib (``pip install 'propopt[plot]'``).  Returns the path.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from propopt.locality import plot_roofline, roofline
    >>> rep = roofline(n=1 << 12, matmul_n=32, repeats=1)
    >>> with tempfile.TemporaryDirectory() as d:  # doctest: +SKIP
    ...     plot_roofline(rep, pathlib.Path(d) / "roofline.png").exists()
    True
    """
    if not isinstance(report, RooflineReport):
        raise TypeError(f"report must be a RooflineReport from roofline(), got {type(report)}")
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            "plot_roofline needs matplotlib: pip install 'propopt[plot]' (or matplotlib)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [k for k in report.kernels if k.flops > 0]
    lo = min([k.intensity for k in pts] + [report.ridge]) / 4
    hi = max([k.intensity for k in pts] + [report.ridge]) * 4
    xs = np.geomspace(lo, hi, 200)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(xs, [report.attainable(v) for v in xs], "k-", lw=2, label="roofline (measured)")
    ax.axvline(report.ridge, color="grey", ls=":", lw=0.8)
    for k in pts:
        ax.plot(k.intensity, k.gflops, "o")
        ax.annotate(k.name, (k.intensity, k.gflops), textcoords="offset points", xytext=(5, 4))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flop / byte of minimum traffic)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(
        f"roofline ({report.dtype}): {report.peak_gflops:.0f} GFLOP/s, {report.peak_gbs:.1f} GB/s"
    )
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    out = Path(path)
    with atomic_write(out) as f:
        fig.savefig(f, dpi=120, format=out.suffix[1:] or None)
    plt.close(fig)
    return out
