"""The review table: ``python -m propopt capstone`` (or ``-m propopt_case_studies.capstone``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from . import machine
from .progress import Progress
from .reviews import ALL, PROBLEMS
from .rows import BUSY_MARK, SIZES, Row, short_table, table


class UserError(Exception):
    """A mistake in the command line: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(message)


def parser(prog: str = "python -m propopt capstone") -> argparse.ArgumentParser:
    p = _Parser(
        prog=prog,
        description="Time each tool of the capstone chapter beside its strongest fair peers, "
        "in interleaved rounds, and print the review table.",
    )
    p.add_argument(
        "--size",
        choices=SIZES,
        default="default",
        help="small (seconds), default (about a minute), large",
    )
    p.add_argument(
        "--only",
        action="append",
        choices=list(ALL),
        help=f"run only this problem (repeatable); default: {', '.join(PROBLEMS)}",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="print every column (property, technique, both sides' ms, device), "
        "however wide; default: problem, peer, speedup, floor and error in the terminal's width",
    )
    p.add_argument("--json", action="store_true", help="print the machine and rows as JSON")
    p.add_argument(
        "--plot", metavar="DIR", help="also measure the smaller sizes and write PNG charts to DIR"
    )
    p.add_argument(
        "--figures", metavar="FILE", help="also write the JSON the docs' figures come from to FILE"
    )
    return p


def run(
    problems: Sequence[str],
    sizes: Sequence[str],
    progress: Progress,
    skipped: dict[str, str] | None = None,
    phases: dict[str, float] | None = None,
) -> list[Row]:
    """Each problem at each size, largest first; rows ordered by size, then problem.

    Their kernels are compiled ahead on every core first
    (:mod:`propopt_case_studies.capstone.ahead`).
    A problem that cannot run here (:class:`~propopt_case_studies.capstone.reviews.common.Skipped`)
    has no rows; its reason goes into ``skipped`` under its name.
    ``phases`` receives each step's seconds: compiling ahead, the first
    pages, each problem at each size.

    torch is imported before anything is timed: importing it after numba's
    threads have started makes the next parallel regions slow for a moment.
    """
    took: dict[str, float] = {} if phases is None else phases
    t = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal t
        now = time.perf_counter()
        took[step] = round(now - t, 2)
        t = now

    import torch  # noqa: F401

    from .ahead import compile_ahead
    from .measure import warm_pages
    from .reviews.common import Skipped

    t = time.perf_counter()
    compile_ahead(problems, sizes, progress)
    lap("compile ahead")
    warm_pages()
    lap("warm pages")
    found: dict[tuple[str, str], list[Row]] = {}
    for name in problems:
        module = ALL[name]
        for size in reversed(sizes):
            lap("between")
            progress.start(f"{name} ({size})", module.PLAN_S[size], module.TICKS[size])
            try:
                found[name, size] = module.review(size, progress)
            except Skipped as e:
                found[name, size] = []
                if skipped is not None:
                    skipped[name] = str(e)
            progress.finish()
            lap(f"{name} ({size})")
    took.pop("between", None)
    return [r for size in sizes for name in problems for r in found[name, size]]


def plan_seconds(problems: Sequence[str], sizes: Sequence[str]) -> float:
    from . import ahead

    return ahead.plan_seconds(problems) + sum(ALL[p].PLAN_S[s] for p in problems for s in sizes)


def main(argv: Sequence[str] | None = None, prog: str = "python -m propopt capstone") -> int:
    """Entry point; returns the exit status."""
    try:
        args = parser(prog).parse_args(argv)
        return _run(args)
    except UserError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        from propopt.cli import hint_for_missing

        print(f"{prog}: error: {hint_for_missing(e, 'the capstone')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    import torch  # noqa: F401  (a missing torch is reported before any work)

    everything = ALL if args.figures else PROBLEMS
    problems = [p for p in ALL if (p in everything if args.only is None else p in args.only)]
    last = SIZES.index(args.size)
    sizes = list(SIZES[: last + 1]) if args.plot else [args.size]
    if args.plot:
        from .plots import check_plotting

        try:
            check_plotting(args.plot)
        except (ImportError, OSError) as e:
            raise UserError(f"--plot {args.plot}: {e}") from None
    from .reviews.common import gpu_name

    gpu = gpu_name()
    where = f"GPU {gpu} and CPU" if gpu else "CPU only (no CUDA GPU found)"
    print(f"capstone: {', '.join(problems)} at size {', '.join(sizes)}; {where}", file=sys.stderr)
    t0 = time.perf_counter()
    record = machine.record()
    phases = {"machine record": round(time.perf_counter() - t0, 2)}
    progress = Progress(plan_seconds(problems, sizes))
    skipped: dict[str, str] = {}
    rows = run(problems, sizes, progress, skipped, phases)
    progress.close()
    elapsed = time.perf_counter() - t0
    shown = [r for r in rows if r.size == args.size]
    doc: dict[str, Any] = {
        "machine": record,
        "seconds": round(elapsed, 1),
        "phases": phases,
        "rows": [r.to_dict() for r in rows],
    }
    if skipped:
        doc["skipped"] = skipped
    if args.json:
        print(json.dumps({**doc, "rows": [r.to_dict() for r in shown]}, indent=2))
    else:
        print(
            f"{record['cpu']}, {record['cores']} cores: sgemm {record['sgemm_gflops']} GFLOP/s, "
            f"copy {record['copy_gbs']} GB/s; {elapsed:.0f} s"
        )
        print(table(shown) if args.wide else short_table(shown))
        if any(r.busy for r in shown):
            mark = "busy" if args.wide else f"{BUSY_MARK} busy"
            print(
                f"{mark}: other processes kept cores busy during that row; its ratio may not hold"
            )
    for name, reason in skipped.items():
        print(f"capstone: {name} skipped: {reason}", file=sys.stderr)
    if args.figures:
        from .figures import write_json

        write_json(doc, args.figures)
        print(f"wrote {args.figures}", file=sys.stderr)
    if args.plot:
        from .plots import write_plots

        for path in write_plots(doc, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    return 0
