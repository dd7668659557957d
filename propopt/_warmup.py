"""``python -m propopt warmup``: compile the common kernels ahead, with a progress bar.

numba compiles a kernel on its first call and caches it on disk, so a fresh
install pays seconds per kernel on first use (the compile notice says so).
This command pays them up front: each task calls one verb on a small input
of a common dtype, which compiles every kernel that verb's paths use (its
serial and its parallel path).  Tasks run in ``jobs`` worker processes at
once: numba compiles under one lock per process, so processes, not threads,
use more cores.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TextIO

import numpy as np

DTYPES = ("float32", "float64")


def _all_threads() -> Any:
    import numba

    import propopt as pp

    # every parallel path, whatever the load on the machine right now
    return pp.set_num_threads(int(numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]


def _scan(monoid: str, dtype: str) -> None:
    import propopt as pp

    m = getattr(pp, monoid)
    rng = np.random.default_rng(0)
    with _all_threads():
        for n in (100, 1 << 21):  # the serial kernel, then the threads' super-blocks
            leaves = [rng.uniform(0.5, 1.0, n).astype(dtype) for _ in range(m.arity)]
            for shape in ((n,), (n // 4, 4)):  # a 1-D scan and one of rows of 4
                elems = [x.reshape(shape) for x in leaves]
                pp.associative_scan(m, elems[0] if m.arity == 1 else tuple(elems))


def _topk(dtype: str) -> None:
    import propopt as pp

    x = np.random.default_rng(0).normal(size=1 << 21).astype(dtype)
    with _all_threads():
        pp.topk(x[:1000], 10)
        pp.topk(x, 10)
        pp.topk(x.reshape(64, -1), 5)
        s = pp.TopK.empty(10, x.dtype).update(x[:5000])
        s.update(x[5000:10000])


def _locality() -> None:
    import propopt as pp

    p = np.random.default_rng(0).uniform(size=(5000, 3))
    with _all_threads():
        pp.morton_order(p)
        pp.morton_order(p[:, :2])


def _gravity() -> None:
    import propopt as pp

    p = np.random.default_rng(0).uniform(size=(3000, 3))
    with _all_threads():
        pp.direct_gravity(p, np.ones(3000), eps=1e-2)
        pp.direct_gravity(p, np.ones(3000), eps=1e-2, targets=p[:100])


def _moments() -> None:
    import propopt as pp

    p = np.random.default_rng(0).uniform(size=(500, 3))
    pp.moments(p).field(p[:10] + 5.0)


def tasks(dtypes: Sequence[str] = DTYPES) -> list[tuple[str, Callable[..., None], tuple]]:
    """The warm-up tasks: ``(label, function, args)``."""
    out: list[tuple[str, Callable[..., None], tuple]] = []
    for dt in dtypes:
        for m in ("add", "linear_recurrence", "maximum", "minimum", "mul", "logaddexp"):
            out.append((f"associative_scan({m}, {dt})", _scan, (m, dt)))
        out.append((f"topk({dt})", _topk, (dt,)))
    out += [
        ("morton_order", _locality, ()),
        ("direct_gravity", _gravity, ()),
        ("moments", _moments, ()),
    ]
    return out


def _run_one(fn: Callable[..., None], args: tuple) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def run(jobs: int, dtypes: Sequence[str] = DTYPES, stream: TextIO | None = None) -> int:
    """Run every task in ``jobs`` processes; report each as it finishes.  Returns the failures."""
    out = sys.stderr if stream is None else stream
    todo = tasks(dtypes)
    t0 = time.perf_counter()
    failures = 0
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_run_one, fn, args): label for label, fn, args in todo}
        for done, fut in enumerate(as_completed(futures), 1):
            label = futures[fut]
            try:
                took = f"{fut.result():.1f} s"
            except Exception as e:  # reported, the others go on
                failures += 1
                took = f"FAILED ({type(e).__name__}: {e})"
            elapsed = time.perf_counter() - t0
            eta = elapsed / done * (len(todo) - done)
            width = 24
            bar = "#" * (width * done // len(todo))
            out.write(
                f"[{bar:<{width}}] {done}/{len(todo)} {elapsed:4.0f}s, about {eta:3.0f}s left  "
                f"{label}: {took}\n"
            )
            out.flush()
    return failures
