"""``python -m propopt``: the capstone's method, run on this machine.

``capstone``
    Times each optimized tool of the capstone chapter beside its strongest
    fair peers and prints the review table (the ``capstone`` package, found
    by entry point).
``audit``
    Runs the property audit on a binary operator, a pair function or a
    radial kernel given by import path (``module:function``) and prints the
    six-property table with the evidence and the primitive that exploits
    each property that holds.
``warmup``
    Compiles the common kernels now, in parallel processes, so that first
    calls later start at once.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import _optional


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
    sub.add_parser(
        "capstone", help="measure the capstone's problems on this machine (--help: its options)"
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
    aud.add_argument(
        "--ndim", "--dim", type=int, default=3, help="point dimension for pair functions"
    )
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


def hint_for_missing(err: ModuleNotFoundError, what: str) -> str:
    """One line for a missing optional dependency: what needs it and the extra that installs it."""
    return _optional.hint(err, what)


def command(name: str) -> Any:
    """The entry point ``name`` of the ``propopt.commands`` group, or None.

    The capstone lives in its own package above the library (it imports the
    case studies); the library finds it here, by entry point, and never
    imports it by name.
    """
    for ep in importlib.metadata.entry_points(group="propopt.commands"):
        if ep.name == name:
            try:
                return ep.load()
            except ImportError as e:  # an install older than its checkout (a renamed package)
                raise UserError(
                    f"the {name} entry point {ep.value!r} does not import ({e}); reinstall "
                    "propopt (pip install -e . in a checkout)"
                ) from None
    return None


def _capstone_cmd(argv: list[str]) -> int:
    main = command("capstone")
    if main is None:
        raise UserError(
            "the capstone is not installed with this propopt (it ships in the same "
            "distribution: pip install -e . from a checkout, or run "
            "python -m propopt_case_studies.capstone there)"
        )
    return int(main(argv, prog="python -m propopt capstone"))


def _resolve(path: str) -> Any:
    """Import ``module:attribute``."""
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _audit_cmd(args: argparse.Namespace) -> int:
    from .audit import audit_table

    if ":" not in args.target:
        raise UserError(f"target={args.target!r}: give an import path as module:function")
    try:
        fn = _resolve(args.target)
    except (ImportError, AttributeError) as e:
        raise UserError(f"cannot import {args.target!r}: {type(e).__name__}: {e}") from None
    if not callable(fn):
        raise UserError(f"{args.target!r} is a {type(fn).__name__}, not a callable")
    try:
        report = audit_table(fn, kind=args.kind, ndim=args.ndim)
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
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["capstone"]:  # its own options: the capstone parses them
            return _capstone_cmd(argv[1:])
        args = _parser().parse_args(argv)
        if args.command is None:
            _parser().print_help()
            return 2
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
