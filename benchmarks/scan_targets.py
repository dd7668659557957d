"""The scan against its floors on the machine in hand, side by side in one run.

``python -m benchmarks.scan_targets`` times, at 2^24 float32 (medians of 15
calls, two rounds):

* ``associative_scan(add, x)`` against ``np.copy(x)`` (which allocates its
  output as the scan does), and against a plain sequential numba loop on one
  thread;
* ``associative_scan(linear_recurrence, (a, b))`` against a copy of ``a``
  and ``b``, and against the sequential loop ``h = a h + b`` on one thread.

It prints the CPU (``lscpu`` model, llvmlite's host CPU name) with the ratios.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

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


def main() -> None:
    import llvmlite.binding as llvm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    n = 1 << args.log2n
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
