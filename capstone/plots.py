"""PNG charts for ``python -m propopt capstone --plot DIR``, from the review rows.

``speedup.png``
    Speedup over the baseline against problem size, one line per problem and
    device.
``roofline.png``
    This machine's roofline (measured peak GFLOP/s and GB/s, from
    :func:`propopt.locality.roofline`) with its measured kernels on it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from propopt.locality import KernelPoint, plot_roofline, roofline

from .rows import SIZES, Row


def check_plotting(directory: str | os.PathLike[str]) -> Path:
    """Fail early, before minutes of measuring, if the charts cannot be written."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError("the charts need matplotlib: pip install 'propopt[plot]'") from None
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    if not os.access(path, os.W_OK):
        raise OSError(f"directory {str(path)!r} is not writable")
    return path


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_speedups(rows: Sequence[Row], path: str | os.PathLike[str]) -> Path:
    """Speedup against problem size, one line per (problem, device)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in rows:
        # "N-body, Plummer sphere, N=50,000": one line across sizes, not one per N
        problem = r.problem.split(",")[0]
        key = (f"{problem} vs {r.peer}", r.device)
        lines.setdefault(key, []).append((SIZES.index(r.size), r.speedup))
    for (problem, device), pts in lines.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{problem} [{device}]")
    used = sorted({SIZES.index(r.size) for r in rows})
    ax.set_xticks(used, [SIZES[i] for i in used])
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("problem size")
    ax.set_ylabel("speedup over the peer (median of interleaved rounds)")
    ax.set_title("propopt capstone: speedup vs problem size")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def write_plots(rows: Sequence[Row], directory: str | os.PathLike[str]) -> list[Path]:
    """Write every chart into ``directory``; returns their paths."""
    out = check_plotting(directory)
    paths = [plot_speedups(rows, out / "speedup.png")]
    report = roofline()
    last = max(SIZES.index(r.size) for r in rows) if rows else 0
    for r in rows:
        if r.flops and r.bytes and SIZES.index(r.size) == last:
            label = f"{r.problem} [{r.device.split(' (')[0]}]"
            report.kernels.append(KernelPoint(label, r.flops, r.bytes, r.propopt_ms / 1e3))
    paths.append(Path(plot_roofline(report, out / "roofline.png")))
    return paths
