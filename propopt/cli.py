"""``python -m propopt``: the capstone's measurements, run on this machine.

``capstone`` times each optimized primitive beside its baseline and prints
the review table of the chapter (problem, bottleneck, property, technique,
times, speedup, error against the exact answer).  It grows with the case
studies; today it covers the associativity primitives.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

SIZES = {"small": 1 << 18, "default": 1 << 22, "large": 1 << 24}


@dataclass
class Row:
    problem: str
    bottleneck: str
    key_property: str
    technique: str
    baseline: str
    baseline_ms: float
    optimized_ms: float
    speedup: float
    rel_error: float
    device: str


def _median_ms(fn: Callable[[], Any], repeats: int = 5) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts))


def _rel_error(got: np.ndarray, exact: np.ndarray) -> float:
    scale = float(np.max(np.abs(exact))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - exact)) / scale)


def capstone_rows(n: int, log: Callable[[str], None]) -> list[Row]:
    """Measure the associativity rows at length ``n`` (float32)."""
    import numba

    import propopt as pp
    from propopt.associativity._reference import linear_recurrence_loop

    rng = np.random.default_rng(0)
    device = f"cpu ({numba.get_num_threads()} threads)"
    x = rng.normal(size=n).astype(np.float32)
    a = rng.uniform(0.9, 1.0, n).astype(np.float32)
    rows = []

    log(f"cumulative sum, n = {n:,} ...")
    exact = np.cumsum(x.astype(np.float64))
    got = pp.associative_scan(pp.add, x)
    base = _median_ms(lambda: np.cumsum(x))
    fast = _median_ms(lambda: pp.associative_scan(pp.add, x))
    rows.append(Row("prefix sum", "one dependency chain", "associativity",
                    "3-phase parallel scan (lanes, threads)", "np.cumsum", base, fast,
                    base / fast, _rel_error(got, exact), device))  # fmt: skip

    log(f"linear recurrence h = a*h + b, n = {n:,} ...")
    loop = linear_recurrence_loop()
    exact = loop(a.astype(np.float64), x.astype(np.float64))
    got = pp.associative_scan(pp.linear_recurrence, (a, x))[1]
    base = _median_ms(lambda: loop(a, x))
    fast = _median_ms(lambda: pp.associative_scan(pp.linear_recurrence, (a, x)))
    rows.append(Row("linear recurrence (Mamba's core)", "sequential loop over time",
                    "associativity", "scan of affine maps (a, b)", "sequential numba loop",
                    base, fast, base / fast, _rel_error(got, exact), device))  # fmt: skip
    return rows


def _table(rows: Sequence[Row]) -> str:
    head = ["problem", "bottleneck", "property", "technique", "baseline", "base ms", "opt ms",
            "speedup", "rel err", "device"]  # fmt: skip
    body = [[r.problem, r.bottleneck, r.key_property, r.technique, r.baseline,
             f"{r.baseline_ms:.1f}", f"{r.optimized_ms:.1f}", f"{r.speedup:.1f}x",
             f"{r.rel_error:.1e}", r.device] for r in rows]  # fmt: skip
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m propopt", description=__doc__)
    sub = p.add_subparsers(dest="command", metavar="{capstone}")
    cap = sub.add_parser("capstone", help="measure the capstone's primitives on this machine")
    cap.add_argument("--size", choices=sorted(SIZES), default="default",
                     help="problem size: small (seconds), default, large")  # fmt: skip
    cap.add_argument("--json", action="store_true", help="print machine-readable JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return 2
    log = (lambda s: print(s, file=sys.stderr)) if args.json else print
    rows = capstone_rows(SIZES[args.size], log)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        print()
        print(_table(rows))
    return 0
