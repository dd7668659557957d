"""The scan against its floors on the machine in hand, side by side in one run.

``python -m benchmarks.scan_targets`` times, at 2^24 float32 (medians of 15
calls, two rounds):

* ``associative_scan(add, x)`` against ``np.copy(x)`` (which allocates its
  output as the scan does), and against a plain sequential numba loop on one
  thread;
* ``associative_scan(linear_recurrence, (a, b))`` against a copy of ``a``
  and ``b``, and against the sequential loop ``h = a h + b`` on one thread.

It prints the CPU (``lscpu`` model, llvmlite's host CPU name) with the ratios.

``--logsum`` times ``logaddexp`` at 2^22 against ``np.copy``, float32 and
float64, per input (U(0.5, 1), N(0, 1), sorted, mostly ``-inf``, half
``+inf``, 1e30 N(0, 1)), and 256 rows of 1000 against ``torch.logcumsumexp``.

``--table`` times instead, at 2^22 (``--log2n``), each round interleaved:

* for each decay distribution (U(0, 1), U(0.5, 1), U(0.9, 1), U(0.999, 1),
  ones, N(0, 1), the constants 0.9 and 0.99; ``b`` in U(0, 1)): the
  recurrence on two threads and on one against the sequential loop, against
  a copy of ``a`` and ``b``, and ``propopt.recurrence`` (``h`` only) against
  that copy;
* each built-in monoid, float32 and float64, against a copy of its inputs
  (``matmul2x2`` at a quarter of the length, four arrays).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial

import numba
import numpy as np

import propopt as pp
from propopt_case_studies.capstone.machine import cpu_model
from propopt_case_studies.capstone.measure import median_seconds
from propopt_case_studies.capstone.peers import sequential_recurrence


@numba.njit(cache=True)
def _sequential_sum(x: np.ndarray) -> np.ndarray:  # pragma: no cover - numba
    out = np.empty_like(x)
    s = x.dtype.type(0)
    for i in range(x.shape[0]):
        s += x[i]
        out[i] = s
    return out


def _median_ms(fn: Callable[[], object], calls: int = 15) -> float:
    return 1e3 * median_seconds(fn, repeats=calls)


DECAYS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "U(0,1)": lambda g, n: g.uniform(0.0, 1.0, n),
    "U(0.5,1)": lambda g, n: g.uniform(0.5, 1.0, n),
    "U(0.9,1)": lambda g, n: g.uniform(0.9, 1.0, n),
    "U(0.999,1)": lambda g, n: g.uniform(0.999, 1.0, n),
    "ones": lambda g, n: np.ones(n),
    "N(0,1)": lambda g, n: g.standard_normal(n),
    "0.9": lambda g, n: np.full(n, 0.9),
    "0.99": lambda g, n: np.full(n, 0.99),
}


def _copies(*xs: np.ndarray) -> Callable[[], object]:
    return lambda: [np.copy(x) for x in xs]


def _decay_row(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    def lr() -> object:
        return pp.associative_scan(pp.linear_recurrence, (a, b))

    t = {
        "copy": _median_ms(_copies(a, b)),
        "loop": _median_ms(lambda: sequential_recurrence(a, b)),
        "scan": _median_ms(lr),
        "h": _median_ms(lambda: pp.recurrence(a, b)),
    }
    with pp.set_num_threads(1):
        t["one"] = _median_ms(lr)
    return t


def _builtin_ratio(m: pp.Monoid, xs: list[np.ndarray]) -> float:
    leaves = xs if m.arity > 1 else xs[0]
    return _median_ms(lambda: pp.associative_scan(m, leaves)) / _median_ms(_copies(*xs))


def table(n: int, rounds: int) -> None:
    """The recurrence per decay distribution and each built-in against its floors."""
    rng = np.random.default_rng(0)
    b = rng.random(n, dtype=np.float32)
    for r in range(rounds):
        print(f"round {r + 1}: decay: scan/loop, scan/copy, 1 thread/loop, h only/copy")
        for name, draw in DECAYS.items():
            t = _decay_row(draw(rng, n).astype(np.float32), b)
            print(
                f"  {name}: {t['scan'] / t['loop']:.2f} {t['scan'] / t['copy']:.2f} "
                f"{t['one'] / t['loop']:.2f} {t['h'] / t['copy']:.2f}  "
                + ", ".join(f"{k} {v:.2f} ms" for k, v in t.items())
            )
        line = []
        for dt in (np.float32, np.float64):
            for m in (pp.add, pp.mul, pp.maximum, pp.minimum, pp.logaddexp,
                      pp.linear_recurrence, pp.matmul2x2):  # fmt: skip
                size = n // 4 if m.arity == 4 else n
                xs = [rng.uniform(0.5, 1.0, size).astype(dt) for _ in range(m.arity)]
                line.append(f"{m.name} {np.dtype(dt).name} {_builtin_ratio(m, xs):.2f}")
        print("  built-ins / copy: " + ", ".join(line))


LOGSUM_INPUTS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "U(0.5,1)": lambda g, n: g.uniform(0.5, 1.0, n),
    "N(0,1)": lambda g, n: g.standard_normal(n),
    "sorted": lambda g, n: np.sort(g.standard_normal(n)),
    "mostly -inf": lambda g, n: np.where(g.random(n) < 0.01, g.standard_normal(n), -np.inf),
    "half +inf": lambda g, n: np.where(g.random(n) < 0.5, np.inf, g.standard_normal(n)),
    "1e30 N(0,1)": lambda g, n: 1e30 * g.standard_normal(n),
}


def logsum(n: int, rounds: int) -> None:
    """``logaddexp`` against ``np.copy`` per input and dtype (forward; reverse for
    N(0, 1)), and on rows of 1000 against ``torch.logcumsumexp`` where torch is
    installed (imported last, so that it shares no earlier measurement's process)."""
    rng = np.random.default_rng(0)
    for r in range(rounds):
        for dt in (np.float32, np.float64):
            line = []
            for name, draw in LOGSUM_INPUTS.items():
                x = draw(rng, n).astype(dt)
                copy = _median_ms(_copies(x))
                scan = _median_ms(partial(pp.associative_scan, pp.logaddexp, x))
                line.append(f"{name} {scan / copy:.2f} ({scan:.2f} ms)")
                if name == "N(0,1)":
                    rev = _median_ms(partial(pp.associative_scan, pp.logaddexp, x, reverse=True))
                    line.append(f"reverse {rev / copy:.2f}")
            print(f"round {r + 1}, {np.dtype(dt).name}, logaddexp / copy: " + ", ".join(line))
    try:
        import torch
    except ImportError:
        return
    rows = rng.standard_normal((256, 1000)).astype(np.float32)
    tr = torch.from_numpy(rows)
    for r in range(rounds):
        ours = _median_ms(lambda: pp.associative_scan(pp.logaddexp, rows, axis=1), 51)
        theirs = _median_ms(lambda: torch.logcumsumexp(tr, dim=1), 51)
        print(
            f"round {r + 1}, 256 rows of 1000 float32: logaddexp {ours:.3f} ms, "
            f"torch.logcumsumexp {theirs:.3f} ms ({ours / theirs:.2f}x)"
        )


def main() -> None:
    import llvmlite.binding as llvm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=None, help="24, or 22 with --table")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--table", action="store_true", help="the per-decay and per-monoid table")
    ap.add_argument("--logsum", action="store_true", help="logaddexp per input, and rows")
    args = ap.parse_args()
    args.log2n = args.log2n or (22 if args.table or args.logsum else 24)
    n = 1 << args.log2n
    if args.table or args.logsum:
        print(f"{cpu_model()}; llvmlite host CPU {llvm.get_host_cpu_name()}; n = 2^{args.log2n}")
        (table if args.table else logsum)(n, args.rounds)
        return
    rng = np.random.default_rng(0)
    x = rng.random(n, dtype=np.float32)
    a = rng.uniform(0.9, 1.0, n).astype(np.float32)
    b = rng.random(n, dtype=np.float32)
    print(f"{cpu_model()}; llvmlite host CPU {llvm.get_host_cpu_name()}; n = 2^{args.log2n}")
    for r in range(args.rounds):
        t = {
            "copy": _median_ms(lambda: np.copy(x)),
            "copy a, b": _median_ms(lambda: (np.copy(a), np.copy(b))),
            "scan": _median_ms(lambda: pp.associative_scan(pp.add, x)),
            "recurrence": _median_ms(lambda: pp.associative_scan(pp.linear_recurrence, (a, b))),
            "sequential sum": _median_ms(lambda: _sequential_sum(x)),
            "sequential recurrence": _median_ms(lambda: sequential_recurrence(a, b)),
        }
        with pp.set_num_threads(1):
            t["scan, 1 thread"] = _median_ms(lambda: pp.associative_scan(pp.add, x))
            t["recurrence, 1 thread"] = _median_ms(
                lambda: pp.associative_scan(pp.linear_recurrence, (a, b))
            )
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in t.items()))
        print(
            f"  scan {t['scan'] / t['copy']:.2f}x a copy; recurrence "
            f"{t['recurrence'] / t['copy a, b']:.2f}x a copy of a and b; on one thread the "
            f"scan is {t['scan, 1 thread'] / t['sequential sum']:.2f}x and the recurrence "
            f"{t['recurrence, 1 thread'] / t['sequential recurrence']:.2f}x the sequential loop"
        )


if __name__ == "__main__":
    main()
