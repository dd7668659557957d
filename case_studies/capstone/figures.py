"""One source for every published figure: a JSON file, and the tables generated from it.

``python -m propopt capstone --figures docs/figures.json`` measures every
problem (the chapter's and the extra primitives) and writes the JSON: the
machine record and every row.  ``python -m propopt_case_studies.capstone.figures`` then rewrites
each block of README.md and docs/*.md fenced by

    <!-- figures:NAME -->
    ...
    <!-- /figures:NAME -->

from that JSON, and ``python -m propopt_case_studies.capstone.figures --check`` (run by the tests)
fails when a committed block differs from what the committed JSON gives, so
no two pages can disagree and no page can drift from the measurement.

The README's charts (``docs/img/speedup.png`` and ``roofline.png``) are
drawn from the same JSON (with matplotlib) and stamped with its digest
(:func:`propopt_case_studies.capstone.plots.digest`); ``--check`` also fails when a chart was
drawn from another run, or carries no stamp.

Blocks: ``machine`` (the CPU and its roofs), ``review`` (the whole table),
``compare`` (one line per comparison, for the README) and one per problem
(``scan``, ``mamba``, ``topk``, ``nbody``, ``lowrank``, ``hf``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from propopt.files import write_text

from . import plots
from .rows import Row, markdown

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "docs" / "figures.json"
IMG = "docs/img"
PAGES = ("README.md", "docs/*.md")
BLOCK = re.compile(r"(<!-- figures:([a-z]+) -->\n)(.*?)(<!-- /figures:\2 -->)", re.S)

#: Row problem prefixes of each per-problem block.
FAMILIES = {
    "scan": ("prefix sum", "linear recurrence"),
    "mamba": ("Mamba",),
    "topk": ("top-", "streaming top-"),
    "nbody": ("N-body",),
    "lowrank": ("rank-",),
    "hf": ("Hugging Face",),
}


def write_json(doc: dict[str, Any], path: str | Path) -> None:
    """The measurement as stable, diff-friendly JSON."""
    write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _rows(doc: dict[str, Any], size: str = "default") -> list[Row]:
    return [Row.from_dict(r) for r in doc["rows"] if r["size"] == size]


def machine_line(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    return (
        f"Measured on {m['cpu']} ({m['cores']} cores; sgemm {m['sgemm_gflops']} GFLOP/s, "
        f"copy {m['copy_gbs']} GB/s), propopt {m['propopt']}, numba {m['numba']}: every "
        "ratio is the median of interleaved rounds in one run, with its interquartile range."
    )


def _compare(rows: list[Row]) -> str:
    out = ["| workload | peer | propopt is | propopt over its floor |", "|---|---|---|---|"]
    for r in rows:
        floor = "" if r.floor_ratio is None else f"{r.floor_ratio:.1f}x the {r.floor}"
        speed = f"{r.speedup:.1f}x faster ({r.spread_lo:.1f}-{r.spread_hi:.1f})"
        if r.speedup < 1:
            speed = f"{1 / r.speedup:.1f}x slower ({r.spread_lo:.2f}-{r.spread_hi:.2f}x)"
        out.append(f"| {r.problem} | {r.peer} | {speed} | {floor} |")
    return "\n".join(out)


def render(doc: dict[str, Any]) -> dict[str, str]:
    """Every block's markdown, from the JSON document."""
    rows = _rows(doc)
    blocks = {
        "machine": machine_line(doc),
        "review": machine_line(doc) + "\n\n" + markdown(rows),
        "compare": machine_line(doc) + "\n\n" + _compare(rows),
    }
    for name, prefixes in FAMILIES.items():
        mine = [r for r in rows if r.problem.startswith(prefixes) and r.device.startswith("cpu")]
        if mine:
            blocks[name] = machine_line(doc) + "\n\n" + markdown(mine)
    return blocks


def _pages(root: Path) -> list[Path]:
    out: list[Path] = []
    for pattern in PAGES:
        out += sorted(root.glob(pattern))
    return out


def update(doc: dict[str, Any], root: Path = ROOT, check: bool = False) -> list[str]:
    """Rewrite (or, with ``check``, compare) every fenced block; returns the stale ones."""
    blocks = render(doc)
    stale: list[str] = []
    for page in _pages(root):
        text = page.read_text()

        def fill(m: re.Match[str], page: Path = page) -> str:
            name = m.group(2)
            if name not in blocks:
                raise KeyError(f"{page.name}: no figures block named {name!r} in the JSON")
            body = blocks[name] + "\n"
            if m.group(3) != body:
                stale.append(f"{page.relative_to(root)}:{name}")
            return m.group(1) + body + m.group(4)

        new = BLOCK.sub(fill, text)
        if new != text and not check:
            write_text(page, new)
    return stale


def stale_charts(doc: dict[str, Any], root: Path = ROOT) -> list[str]:
    """The charts under ``docs/img`` not stamped with ``doc``'s digest."""
    run = plots.digest(doc)
    return [f"{IMG}/{name}" for name in plots.CHARTS
            if plots.stamp_of(root / IMG / name) != run]  # fmt: skip


def draw(doc: dict[str, Any], root: Path = ROOT) -> list[Path]:
    """Redraw the charts under ``docs/img`` from ``doc`` (the default size's rows)."""
    return plots.write_plots(doc, root / IMG, rows=_rows(doc))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m propopt_case_studies.capstone.figures",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", default=str(JSON), help="the measurement (default docs/figures.json)")
    p.add_argument("--check", action="store_true", help="only report blocks that differ")
    args = p.parse_args(argv)
    doc = json.loads(Path(args.json).read_text())
    stale = update(doc, check=args.check)
    if args.check:
        stale += stale_charts(doc)
        if stale:
            print(f"figures differ from {args.json}: {', '.join(stale)}; run "
                  "python -m propopt_case_studies.capstone.figures", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    print(f"rewrote {len(stale)} block(s) from {args.json}", file=sys.stderr)
    for path in draw(doc):
        print(f"drew {path.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
