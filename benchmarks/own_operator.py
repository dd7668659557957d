"""A user's own combine, written four ways, against the built-in: what each call costs.

``python -m benchmarks.own_operator`` runs, at 2^20 float32 (``--log2n``),
the affine combine ``(a1, b1, a2, b2) -> (a1 a2, a2 b1 + b2)`` as a
:class:`propopt.Monoid` written

* in an importable module,
* at the top of a script (``__main__``, as in a notebook cell),
* as a closure defined inside the function that calls the scan, afresh on
  every call (as in a training step),
* as a lambda,

beside the built-in :data:`propopt.linear_recurrence`.  Each row is a child
process against a fresh, empty kernel cache (first call: the compile), then
a second child against the same cache (first call: the load), each timing
its first call, the next nine calls (the closure made afresh for each) and
the steady call (the median of 15 more).  A third child against that cache
first calls a trivial cached numba function, which times numba's own
start-up (its typing and lowering registries; propopt keeps SciPy's
``scipy.linalg`` out of it), paid once per process by the first compiled
function of any library; the rest of that child's first call is the load of
the kernels.  The grad table (``benchmarks.scan_grad``) follows with ``--grad``.  It prints the CPU
(``lscpu`` model, llvmlite's host CPU name) with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from propopt import files

MODULE = """
import numba

def affine(a1, b1, a2, b2):
    return a1 * a2, a2 * b1 + b2

@numba.njit(cache=True)
def touch(v):  # the first numba function a process loads: numba's own start-up
    return v + 1.0
"""

_HEAD = """
import json, statistics, sys, time
import numpy as np
import propopt as pp
n = 1 << int(sys.argv[1])
rng = np.random.default_rng(0)
x = (rng.uniform(0.5, 1.0, n).astype(np.float32), rng.random(n, dtype=np.float32))
if sys.argv[2] == "1":
    from own_affine import touch
    t0 = time.perf_counter()
    touch(1.0)
    START = time.perf_counter() - t0
else:
    START = 0.0
"""

#: How each way makes the monoid; ``make()`` is called before every scan.
_WAYS = {
    "built-in linear_recurrence": "def make():\n    return pp.linear_recurrence\n",
    "importable module": (
        "from own_affine import affine\n"
        "def make():\n    return pp.Monoid(affine, identity=(1.0, 0.0))\n"
    ),
    "__main__": (
        "def affine(a1, b1, a2, b2):\n    return a1 * a2, a2 * b1 + b2\n"
        "M = pp.Monoid(affine, identity=(1.0, 0.0))\n"
        "def make():\n    return M\n"
    ),
    "closure, made afresh each call": (
        "def make():\n"
        "    def affine(a1, b1, a2, b2):\n"
        "        return a1 * a2, a2 * b1 + b2\n"
        "    return pp.Monoid(affine, identity=(1.0, 0.0))\n"
    ),
    "lambda": (
        "def make():\n"
        "    return pp.Monoid(lambda a1, b1, a2, b2: (a1 * a2, a2 * b1 + b2), (1.0, 0.0))\n"
    ),
}

_TAIL = """
def call():
    t = time.perf_counter()
    pp.associative_scan(make(), x)
    return time.perf_counter() - t
first = call()
nexts = [call() for _ in range(9)]
steady = statistics.median(call() for _ in range(15))
print(json.dumps({"first": first, "next_max": max(nexts), "steady": steady, "start": START}))
"""


def run_child(folder: Path, way: str, cache: Path, log2n: int, start: bool) -> dict[str, float]:
    script = folder / "child.py"
    files.write_text(script, textwrap.dedent(_HEAD) + _WAYS[way] + textwrap.dedent(_TAIL))
    env = dict(os.environ, PROPOPT_CACHE_DIR=str(cache / "gen"), NUMBA_CACHE_DIR=str(cache / "nb"))
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    env.update(PROPOPT_COMPILE_NOTICE="0", PYTHONPATH=path)
    argv = [sys.executable, str(script), str(log2n), str(int(start))]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=folder)
    if out.returncode:
        raise RuntimeError(f"the child for {way!r} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def caching_table(log2n: int) -> list[dict[str, object]]:
    """One row per way: the cold first call, the next calls, the steady call, the second process."""
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files.write_text(folder / "own_affine.py", MODULE)
        for i, way in enumerate(_WAYS):
            cache = folder / f"cache{i}"
            cold = run_child(folder, way, cache, log2n, False)
            warm = run_child(folder, way, cache, log2n, False)
            apart = run_child(folder, way, cache, log2n, True)  # numba's start-up timed apart
            rows.append({"way": way, "cold": cold, "second process": warm, "apart": apart})
    return rows


def _print_caching(rows: list[dict[str, object]], log2n: int) -> None:
    print(f"\nA user's combine at 2^{log2n} float32 (each process against a fresh cache first):")
    head = ("way", "first call, cold", "next 9 (max)", "steady", "first call, 2nd process",
            "of which numba's start-up")  # fmt: skip
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        cold, warm, apart = r["cold"], r["second process"], r["apart"]
        assert isinstance(cold, dict) and isinstance(warm, dict) and isinstance(apart, dict)
        cells = [
            f"{cold['first']:.3f} s",
            f"{1e3 * cold['next_max']:.2f} ms",
            f"{1e3 * cold['steady']:.2f} ms",
            f"{warm['first']:.3f} s",
            f"{apart['start']:.3f} s (then {apart['first']:.3f} s)",
        ]
        print(f"| {r['way']} | " + " | ".join(cells) + " |")


def main() -> None:
    import llvmlite.binding as llvm

    from propopt_case_studies.capstone.machine import cpu_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=20)
    ap.add_argument("--grad", action="store_true", help="also the gradient table")
    args = ap.parse_args()
    print(f"{cpu_model()}; llvmlite host CPU {llvm.get_host_cpu_name()}")
    _print_caching(caching_table(args.log2n), args.log2n)
    if args.grad:
        from benchmarks import scan_grad

        scan_grad.main([])


if __name__ == "__main__":
    main()
