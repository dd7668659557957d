"""A row of the review table: one optimized tool beside one named peer, measured in one run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from .measure import Comparison

SIZES = ("small", "default", "large")

#: What the error column holds, per kind (one metric per column; see docs/capstone.md).
ERROR_KINDS = {
    "max rel": "largest |propopt - exact| over the largest |exact|, float64 reference",
    "median rel": "median over targets of |a - a_exact| / |a_exact| (accelerations)",
    "ids": "number of returned ids that differ from the exact answer (0: identical, ties too)",
    "F rel": "||approximation - exact low-rank part||_F / ||exact low-rank part||_F",
}


@dataclass
class Row:
    """One line of the review table.

    ``speedup`` is the median of the per-round ratios ``peer / propopt``;
    ``spread`` their interquartile range.  ``floor`` names the physical
    floor timed in the same run (a copy of the inputs, one read pass, the
    exps alone) and ``floor_ratio`` is propopt's time over it: ``floor_x``
    where propopt and the floor were timed in interleaved rounds of their
    own (the median of the per-round ratios), else ``propopt_ms / floor_ms``.
    """

    problem: str
    size: str
    bottleneck: str
    key_property: str
    technique: str
    peer: str
    peer_ms: float
    propopt_ms: float
    speedup: float
    spread_lo: float
    spread_hi: float
    rounds: int
    error: float
    error_kind: str
    device: str
    load: float
    busy: bool
    floor: str = ""
    floor_ms: float | None = None
    floor_x: float | None = None
    flops: float | None = None
    bytes: float | None = None

    @property
    def floor_ratio(self) -> float | None:
        if self.floor_x is not None:
            return self.floor_x
        return None if not self.floor_ms else self.propopt_ms / self.floor_ms

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Row:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def row(
    problem: str,
    size: str,
    bottleneck: str,
    key_property: str,
    technique: str,
    peer: str,
    c: Comparison,
    error: float,
    error_kind: str,
    device: str,
    **extra: Any,
) -> Row:
    """A row from a :class:`~capstone.measure.Comparison`; the peer's torch threads are named."""
    if error_kind not in ERROR_KINDS:
        raise ValueError(f"error_kind={error_kind!r} is not one of {', '.join(ERROR_KINDS)}")
    if c.baseline_threads is not None:
        peer = f"{peer}, {c.baseline_threads} torch thread{'s' if c.baseline_threads > 1 else ''}"
    return Row(
        problem, size, bottleneck, key_property, technique, peer, c.baseline_ms, c.optimized_ms,
        c.ratio, c.ratio_lo, c.ratio_hi, c.rounds, float(error), error_kind, device, c.load,
        c.busy, **extra,
    )  # fmt: skip


def _ms(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def _x(v: float) -> str:
    return f"{v:.0f}x" if v >= 100 else f"{v:.1f}x"


def _error(r: Row) -> str:
    """One metric, named: its kinds are listed in :data:`ERROR_KINDS` and docs/capstone.md."""
    return f"{int(r.error)} ids" if r.error_kind == "ids" else f"{r.error:.1e} {r.error_kind}"


def cells(r: Row) -> list[str]:
    """The table's cells of one row, as text."""
    floor = "" if r.floor_ratio is None else f"{r.floor_ratio:.1f}x {r.floor}"
    note = f" (busy: {r.load:.1f} cores)" if r.busy else ""
    return [
        r.problem,
        r.key_property,
        r.technique,
        r.peer,
        _ms(r.peer_ms),
        _ms(r.propopt_ms),
        f"{_x(r.speedup)} ({r.spread_lo:.1f}-{r.spread_hi:.1f})",
        floor,
        _error(r),
        r.device + note,
    ]


HEAD = [
    "problem",
    "property",
    "technique",
    "peer",
    "peer ms",
    "propopt ms",
    "speedup (IQR)",
    "vs floor",
    "error",
    "device",
]


#: The default table's columns: what a reader compares, in a terminal's width.
SHORT_HEAD = ["problem", "peer", "speedup (IQR)", "floor", "error"]

#: The default table's widest and narrowest widths (columns).
MAX_WIDTH = 120
MIN_WIDTH = 72


#: Marks a busy row's speedup in the default table (:attr:`Row.busy`).
BUSY_MARK = "*"

#: Columns the problem and peer names keep at least, together, before the floor
#: and error cells go onto two lines (value, then kind).
NAMES_WIDTH = 40


def short_cells(r: Row, split: bool = False) -> list[str]:
    """The default table's cells of one row: a busy row's speedup is marked :data:`BUSY_MARK`;
    ``split`` puts the floor's and the error's kind under their value."""
    full = cells(r)
    speedup = full[6] + (f" {BUSY_MARK}" if r.busy else "")
    floor, error = full[7], full[8]
    if split:
        floor, error = floor.replace(" ", "\n", 1), error.replace(" ", "\n", 1)
    return [r.problem, r.peer, speedup, floor, error]


def width_here() -> int:
    """The terminal's width (``$COLUMNS`` first; 120 off a terminal), within
    :data:`MIN_WIDTH` and :data:`MAX_WIDTH`."""
    import shutil

    columns = shutil.get_terminal_size((MAX_WIDTH, 24)).columns
    return max(MIN_WIDTH, min(MAX_WIDTH, columns))


def short_table(rows: list[Row], width: int | None = None) -> str:
    """The default table: :data:`SHORT_HEAD`, at most ``width`` columns (:func:`width_here`).

    rich lays it out: it shares the width left by the numbers among the
    problem and peer names and wraps them onto more lines of their row, where
    hand-made padding would overflow.  It also draws the progress bar
    (:mod:`~propopt_case_studies.capstone.progress`), so the capstone needs
    one library for both.
    """
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    width = width_here() if width is None else max(MIN_WIDTH, min(MAX_WIDTH, width))
    gaps = 2 * (len(SHORT_HEAD) - 1)
    numbers = sum(
        max([len(h), *(len(c[i]) for c in map(short_cells, rows))])
        for i, h in enumerate(SHORT_HEAD)
        if i >= 2
    )
    split = width - numbers - gaps < NAMES_WIDTH
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False)
    for name in SHORT_HEAD:
        names = name in ("problem", "peer")  # these take the width left, and wrap
        t.add_column(name, no_wrap=not names, overflow="fold", ratio=1 if names else None)
    for r in rows:
        t.add_row(*(Text(c) for c in short_cells(r, split)))
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    console.print(t)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def table(rows: list[Row]) -> str:
    """The full review table as aligned text (``--wide``): every column of :data:`HEAD`."""
    body = [cells(r) for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(HEAD, *body)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [HEAD, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(rows: list[Row]) -> str:
    """The review table as a markdown table."""
    out = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    out += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    return "\n".join(out)
