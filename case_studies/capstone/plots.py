"""PNG charts of one capstone run, from its review rows and machine record.

``speedup.png``
    Speedup over each peer, one bar per comparison labelled with the peer
    (one size), or one line per comparison against problem size (several).
``roofline.png``
    The run's roofline (its measured sgemm GFLOP/s and copy GB/s) with its
    measured kernels on it.

``python -m propopt capstone --plot DIR`` draws them from the run it has
just measured; ``python -m propopt_case_studies.capstone.figures`` redraws the committed ones
from ``docs/figures.json``.  Each PNG carries the digest of the run it was
drawn from (:func:`digest`, in a ``tEXt`` chunk), so ``python -m
propopt_case_studies.capstone.figures --check`` can tell a chart from another run.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from propopt.files import atomic_write, write_bytes
from propopt.locality import KernelPoint, RooflineReport, plot_roofline

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


def plot_speedups(rows: Sequence[Row], path: str | os.PathLike[str], where: str = "") -> Path:
    """Speedup over each peer: bars (one size) or lines against problem size (several).

    ``where``: the machine, for the title.
    """
    plt = _pyplot()
    sizes = sorted({SIZES.index(r.size) for r in rows})
    title = "propopt capstone" + (f" on {where}" if where else "")
    if len(sizes) <= 1:
        return _bars(plt, rows, path, title + (f", size {rows[0].size}" if rows else ""))
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
    ax.set_xticks(sizes, [SIZES[i] for i in sizes])
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("problem size")
    ax.set_ylabel("speedup over the peer (median of interleaved rounds)")
    ax.set_title(title + ": speedup vs problem size")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _savefig(fig, path)
    plt.close(fig)
    return Path(path)


def _savefig(fig: Any, path: str | os.PathLike[str]) -> None:
    with atomic_write(path) as f:
        fig.savefig(f, dpi=120, format=Path(path).suffix[1:] or None)


def _bars(plt: Any, rows: Sequence[Row], path: str | os.PathLike[str], title: str) -> Path:
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.4))
    labels = [f"{r.problem}\nvs {r.peer} [{r.device}]" for r in rows]
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [r.speedup for r in rows], color="tab:blue")
    ax.errorbar([r.speedup for r in rows], y, fmt="none", ecolor="black", lw=0.8,
                xerr=[[r.speedup - r.spread_lo for r in rows],
                      [r.spread_hi - r.speedup for r in rows]])  # fmt: skip
    for yi, r in zip(y, rows):
        ax.annotate(f"{r.speedup:.1f}x", (r.spread_hi, yi), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=7)  # fmt: skip
    ax.set_yticks(y, labels, fontsize=6)
    ax.set_xscale("log")
    if rows:  # room for the labels right of the longest bar's IQR
        ax.set_xlim(right=max(r.spread_hi for r in rows) * 3)
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("speedup over the peer on the left (median of rounds, IQR)")
    ax.set_title(title, loc="right", fontsize=9)  # the labels take the left: end at the right edge
    fig.tight_layout()
    _savefig(fig, path)
    plt.close(fig)
    return Path(path)


def roofline_of(machine: Mapping[str, Any], rows: Sequence[Row]) -> RooflineReport:
    """The run's roofline: its machine record's roofs, its largest size's kernels."""
    last = max(SIZES.index(r.size) for r in rows) if rows else 0
    kernels: dict[str, KernelPoint] = {}  # one point per kernel, not per peer it was timed against
    for r in rows:
        if r.flops and r.bytes and SIZES.index(r.size) == last:
            name = f"{r.problem} [{r.device.split(' (')[0]}]"
            kernels.setdefault(name, KernelPoint(name, r.flops, r.bytes, r.propopt_ms / 1e3))
    return RooflineReport(float(machine["sgemm_gflops"]), float(machine["copy_gbs"]),
                          list(kernels.values()), "float32", 0, 0)  # fmt: skip


def digest(doc: Mapping[str, Any]) -> str:
    """A short digest of one run's machine record and rows (what the charts show)."""
    text = json.dumps({"machine": doc["machine"], "rows": doc["rows"]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


STAMP = b"propopt-figures"
_PNG = b"\x89PNG\r\n\x1a\n"


def stamp(path: str | os.PathLike[str], run: str) -> None:
    """Write ``run`` into the PNG at ``path`` as a ``tEXt`` chunk before ``IEND``."""
    data = Path(path).read_bytes()
    end = data.rindex(b"IEND") - 4
    body = b"tEXt" + STAMP + b"\0" + run.encode("ascii")
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))
    write_bytes(path, data[:end] + chunk + data[end:])


def stamp_of(path: str | os.PathLike[str]) -> str | None:
    """The run a PNG was drawn from (:func:`stamp`), or None (no such chunk, or no PNG)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    if not data.startswith(_PNG):
        return None
    at = len(_PNG)
    while at + 8 <= len(data):
        (n,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + n]
        if kind == b"tEXt" and body.startswith(STAMP + b"\0"):
            return body[len(STAMP) + 1 :].decode("ascii", "replace")
        at += 12 + n
    return None


CHARTS = ("speedup.png", "roofline.png")


def write_plots(doc: Mapping[str, Any], directory: str | os.PathLike[str],
                rows: Sequence[Row] | None = None) -> list[Path]:  # fmt: skip
    """Draw every chart of the run ``doc`` (its machine record and rows) into ``directory``.

    ``rows``: the rows to draw (default: all of ``doc``'s).  Each PNG is
    stamped with :func:`digest` of ``doc``.  Returns the paths.
    """
    out = check_plotting(directory)
    if rows is None:
        rows = [Row.from_dict(r) for r in doc["rows"]]
    m = doc["machine"]
    speed = plot_speedups(rows, out / CHARTS[0], f"{m['cpu']} ({m['cores']} cores)")
    roof = Path(plot_roofline(roofline_of(doc["machine"], rows), out / CHARTS[1]))
    run = digest(doc)
    for path in (speed, roof):
        stamp(path, run)
    return [speed, roof]
