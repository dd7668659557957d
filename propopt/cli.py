"""``python -m propopt``: the capstone's method, run on this machine.

``capstone``
    Times each optimized tool of the capstone chapter beside its baseline and
    prints the chapter's review table (problem, bottleneck, key property,
    technique, baseline and optimized times, speedup, error against the
    exact answer, device).
``audit``
    Runs the property audit on a binary operator, a pair function or a
    radial kernel given by import path (``module:function``) and prints the
    six-property table with the evidence and the primitive that exploits
    each property that holds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import NoReturn

from . import _capstone, _optional


class UserError(Exception):
    """A mistake in the command line: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m propopt",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", metavar="{capstone,audit,warmup}", parser_class=_Parser)
    cap = sub.add_parser("capstone", help="measure the capstone's three problems on this machine")
    cap.add_argument(
        "--size",
        choices=_capstone.SIZES,
        default="default",
        help="problem size: small (seconds), default (minutes), large",
    )
    cap.add_argument(
        "--only",
        action="append",
        choices=sorted(_capstone.PROBLEMS),
        help="run only this problem (repeatable); default: all",
    )
    cap.add_argument("--json", action="store_true", help="print the rows as JSON on stdout")
    cap.add_argument(
        "--plot", metavar="DIR", help="also measure the smaller sizes and write PNG charts to DIR"
    )
    aud = sub.add_parser("audit", help="audit the properties of an operator or pair function")
    aud.add_argument("target", help="import path of the function, as module:function")
    aud.add_argument(
        "--kind",
        choices=("auto", "operator", "pair", "kernel"),
        default="auto",
        help="operator: fn(a, b) combining elements; pair: f(x_i, x_j) over "
        "points (n, d); kernel: k(r) of distance; auto: guess",
    )
    aud.add_argument("--dim", type=int, default=3, help="point dimension for pair functions")
    aud.add_argument("--json", action="store_true", help="print the table as JSON")
    warm = sub.add_parser("warmup", help="compile the common kernels now (cached on disk)")
    warm.add_argument(
        "--jobs", type=int, default=None, help="processes compiling at once (default: all CPUs)"
    )
    warm.add_argument(
        "--dtype",
        action="append",
        choices=("float32", "float64"),
        help="dtypes to compile for (repeatable; default: both)",
    )
    return p


def _capstone_cmd(args: argparse.Namespace) -> int:
    problems = [p for p in _capstone.PROBLEMS if args.only is None or p in args.only]
    last = _capstone.SIZES.index(args.size)
    sizes = list(_capstone.SIZES[: last + 1]) if args.plot else [args.size]
    if args.plot:
        from ._plots import check_plotting

        try:
            check_plotting(args.plot)
        except (ImportError, OSError) as e:
            raise UserError(f"--plot {args.plot}: {e}") from None
    gpu = _capstone.gpu_name()
    where = f"GPU {gpu} and CPU" if gpu else "CPU only (no CUDA GPU found)"
    print(f"propopt capstone: {', '.join(problems)} at size {args.size}; {where}", file=sys.stderr)
    progress = _capstone.Progress(len(problems) * len(sizes))
    rows = _capstone.run(problems, sizes, progress)
    progress.close()
    shown = [r for r in rows if r.size == args.size]
    if args.json:
        print(json.dumps([asdict(r) for r in shown], indent=2))
    else:
        print(_capstone.table(shown))
    if args.plot:
        from ._plots import write_plots

        for path in write_plots(rows, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _audit_cmd(args: argparse.Namespace) -> int:
    from .audit import audit_table

    if ":" not in args.target:
        raise UserError(f"target={args.target!r}: give an import path as module:function")
    try:
        fn = _capstone.resolve(args.target)
    except (ImportError, AttributeError) as e:
        raise UserError(f"cannot import {args.target!r}: {type(e).__name__}: {e}") from None
    if not callable(fn):
        raise UserError(f"{args.target!r} is a {type(fn).__name__}, not a callable")
    try:
        report = audit_table(fn, kind=args.kind, dim=args.dim)
    except (TypeError, ValueError) as e:
        raise UserError(f"cannot audit {args.target!r}: {e}") from None
    print(json.dumps(report.to_dict(), indent=2) if args.json else str(report))
    return 0


def _warmup_cmd(args: argparse.Namespace) -> int:
    from . import _warmup
    from .threads import usable_cpus

    jobs = usable_cpus() if args.jobs is None else args.jobs
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: must be >= 1")
    dtypes = args.dtype or list(_warmup.DTYPES)
    todo = len(_warmup.tasks(dtypes))
    print(f"propopt warmup: {todo} tasks in {jobs} processes", file=sys.stderr)
    return 1 if _warmup.run(jobs, dtypes) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
        if args.command is None:
            _parser().print_help()
            return 2
        if args.command == "capstone":
            try:
                return _capstone_cmd(args)
            except ModuleNotFoundError as e:
                raise UserError(_optional.hint(e, "the capstone")) from None
        if args.command == "warmup":
            return _warmup_cmd(args)
        return _audit_cmd(args)
    except UserError as e:
        print(f"python -m propopt: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into `head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("python -m propopt: interrupted", file=sys.stderr)
        return 130
