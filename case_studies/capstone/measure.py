"""Timing that holds on a busy machine: interleaved rounds, each side at its best thread count.

Shared by the capstone's reviews and the asv suites in ``benchmarks/``.  Three
rules, each learnt from a figure that did not hold:

* **Interleave.**  Baseline and optimized calls alternate, round by round
  (``b o``, then ``o b``), and the figure is the median of the per-round
  ratios.  A stall of the machine then hits both sides of a round, instead
  of a whole block of one side: measured as blocks, the linear-recurrence
  row read 0.09x, 0.4x, 0.7x and 1.6x in four runs with one core busy.
* **Best thread count for each side.**  A torch baseline is timed with one
  thread and with all usable cores, and runs the rounds with the faster
  setting (a loop of small ops, like the chapter's Mamba loop, is fastest on
  one thread and, with two, slowed from 51 ms to 3,162 ms when one core was
  busy).  propopt sizes its own threads per call (:mod:`propopt.threads`).
* **Say when the machine was busy.**  Other processes' CPU use during the
  rounds is measured (:class:`propopt.threads.LoadMeter`); a row measured
  while they kept half a core or more busy is flagged.

The spread reported with a ratio is the range of the middle half of the
per-round ratios (25th to 75th percentile).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from numba import njit, prange

from propopt.threads import LoadMeter, torch_threads, usable_cpus

#: Other processes' average load (cores) from which a comparison is flagged busy.
BUSY_CORES = 0.5

#: Rounds of a comparison by default (each round: one call of each side).
ROUNDS = 7


@dataclass
class Comparison:
    """Baseline and optimized timed in interleaved rounds."""

    baseline_ms: float
    optimized_ms: float
    ratio: float
    ratio_lo: float
    ratio_hi: float
    rounds: int
    load: float
    baseline_threads: int | None = None

    @property
    def busy(self) -> bool:
        """Did other processes keep :data:`BUSY_CORES` or more busy during the rounds?"""
        return bool(self.load >= BUSY_CORES)

    def baseline_scaled(self, factor: float) -> Comparison:
        """The same rounds with the baseline's times multiplied by ``factor``.

        For a baseline timed on a sample of its work whose cost is exactly
        proportional to the work (the exact N-body sum at a subset of targets).
        """
        return replace(
            self,
            baseline_ms=self.baseline_ms * factor,
            ratio=self.ratio * factor,
            ratio_lo=self.ratio_lo * factor,
            ratio_hi=self.ratio_hi * factor,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["busy"] = self.busy
        return d


def _nop() -> None:
    return None


_compile_only = False


@contextmanager
def compile_only() -> Iterator[None]:
    """Inside the block :func:`compare` and :func:`median_seconds` time nothing.

    They call the optimized side once (``median_seconds`` its function once)
    and return NaN times, so that running a review compiles, and caches on
    disk, every kernel its timed run calls, without running its baselines.
    """
    global _compile_only
    before, _compile_only = _compile_only, True
    try:
        yield
    finally:
        _compile_only = before


def compiling_only() -> bool:
    """Is this inside :func:`compile_only`?"""
    return _compile_only


def _time_once(fn: Callable[[], Any], sync: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


#: Warm-up: calls of each side before the timed rounds, at least :data:`WARM_MIN_CALLS`
#: (the first compiles or loads the kernel, the second runs it warm; one, if that one
#: took :data:`WARM_LONG_S` or more) and at most :data:`WARM_CALLS`, until :data:`WARM_S`
#: seconds have passed.  The process's first pages, which once needed more calls (on a
#: 2-core Xeon, a VM, the first 2-5 writes of a fresh 64 MiB NumPy array by two threads
#: took 40-110 ms against 6 ms after), are paid once by :func:`warm_pages` before any
#: comparison; 0.3 s a side spent 2.0 s of the default scan review's 7.4 s on warm-ups.
WARM_MIN_CALLS = 2
WARM_CALLS = 8
WARM_S = 0.1
WARM_LONG_S = 0.5


def _warm(fn: Callable[[], Any], sync: Callable[[], Any]) -> None:
    """Call ``fn`` until :data:`WARM_S` have passed, at least :data:`WARM_MIN_CALLS`
    times (once, for a call of :data:`WARM_LONG_S` or more), at most :data:`WARM_CALLS`."""
    t0 = time.perf_counter()
    for i in range(WARM_CALLS):
        _time_once(fn, sync)
        elapsed = time.perf_counter() - t0
        if elapsed > WARM_S and (i + 1 >= WARM_MIN_CALLS or elapsed >= WARM_LONG_S):
            break


@njit(parallel=True, cache=True)
def _fill(a: np.ndarray) -> None:  # pragma: no cover - numba
    for i in prange(a.shape[0]):
        a[i] = 1.0


#: Fresh 64 MiB arrays :func:`warm_pages` writes on all of numba's threads.
WARM_PAGES = 8


def warm_pages() -> None:
    """Write :data:`WARM_PAGES` fresh 64 MiB arrays on numba's threads, once, before timing.

    The process's first such writes are slow on some machines, whichever code does them:
    on the development machine (a VM; NumPy asks for huge pages), a plain numba fill of a
    fresh 64 MiB array on two threads took, in three fresh processes, 29, 96, 100, 92,
    22, 11 ms / 6, 46, 68, 11, 6 ms / 6, 6 ms for its first calls, and 5.5-6 ms from the
    first call after this warm-up (24-189 ms).  Without it that phase fell into the first
    timed rows (the prefix sum's ratio to ``np.cumsum`` from 0.8x to 3.5x).
    """
    if _compile_only:
        return
    for _ in range(WARM_PAGES):
        _fill(np.empty(1 << 24, np.float32))


#: A thread count whose call takes this many times the best so far has lost: its
#: further calls are skipped (:func:`best_torch_threads`).
LOST_BY = 3.0


def best_torch_threads(
    fn: Callable[[], Any], sync: Callable[[], Any] = _nop, calls: int = 2
) -> int:
    """1 or all usable cores: whichever runs ``fn`` faster (best of ``calls`` each).

    A setting whose call already takes :data:`LOST_BY` times the best so far
    makes no more calls: with one core busy, the Mamba loops of small torch ops
    on two threads took seconds a call against 0.3 s on one, and choosing
    took 40 s of the 52 s Mamba review, a third of it in second calls of a
    choice already made.
    """
    options = sorted({1, usable_cpus()})
    best, best_t = options[0], math.inf
    for n in options:
        t = math.inf
        with torch_threads(n):
            for _ in range(calls):
                t = min(t, _time_once(fn, sync))
                if t > LOST_BY * best_t:
                    break
        if t < best_t:
            best, best_t = n, t
    return best


def compare(
    baseline: Callable[[], Any],
    optimized: Callable[[], Any],
    *,
    rounds: int = ROUNDS,
    sync: Callable[[], Any] = _nop,
    torch_baseline: bool = False,
    budget_s: float | None = None,
    tick: Callable[[], Any] = _nop,
    baseline_compiles: bool = False,
) -> Comparison:
    """Time ``baseline`` and ``optimized`` in interleaved rounds.

    Parameters
    ----------
    baseline, optimized : callable
        Called with no arguments; what they return is ignored.
    rounds : int
        Rounds to run (each calls both once, alternating which goes first).
    sync : callable
        Called after every timed call (``torch.cuda.synchronize`` for GPU work).
    torch_baseline : bool
        The baseline runs torch ops: choose its thread count with
        :func:`best_torch_threads` first, and report it.
    budget_s : float, optional
        Stop after the round that exceeds this many seconds (at least 3 rounds).
    tick : callable
        Called after each round (progress bars).
    baseline_compiles : bool
        The baseline is a numba kernel too (propopt's exact sum, a numba
        loop): :func:`compile_only` calls it as well.

    Returns
    -------
    Comparison
        Medians of each side, the median per-round ratio ``baseline /
        optimized`` with its interquartile range, the rounds run, the load
        of other processes and the baseline's torch thread count.
    """
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: must be >= 1")
    if _compile_only:
        if baseline_compiles:
            baseline()
        optimized()
        sync()
        nan = math.nan
        return Comparison(nan, nan, nan, nan, nan, 0, nan)
    # warm-up: compilation, caches, the allocator's first pages (_warm)
    threads = best_torch_threads(baseline, sync) if torch_baseline else None
    with torch_threads(threads):
        _warm(baseline, sync)
    _warm(optimized, sync)
    tb: list[float] = []
    to: list[float] = []
    t_start = time.perf_counter()
    with LoadMeter() as meter, torch_threads(threads):
        for r in range(rounds):
            if r % 2 == 0:
                tb.append(_time_once(baseline, sync))
                to.append(_time_once(optimized, sync))
            else:
                to.append(_time_once(optimized, sync))
                tb.append(_time_once(baseline, sync))
            tick()
            if budget_s is not None and r >= 2 and time.perf_counter() - t_start > budget_s:
                break
    ratios = np.array(tb) / np.array(to)
    lo, mid, hi = np.percentile(ratios, [25, 50, 75])
    return Comparison(
        baseline_ms=1e3 * float(np.median(tb)),
        optimized_ms=1e3 * float(np.median(to)),
        ratio=float(mid),
        ratio_lo=float(lo),
        ratio_hi=float(hi),
        rounds=len(tb),
        load=float(meter.cores),
        baseline_threads=threads,
    )


def median_seconds(
    fn: Callable[[], Any], repeats: int = 5, sync: Callable[[], Any] = _nop
) -> float:
    """Median wall time of ``fn`` over ``repeats`` calls, after a warm-up (:func:`_warm`)."""
    if _compile_only:
        fn()
        sync()
        return math.nan
    _warm(fn, sync)
    return float(np.median([_time_once(fn, sync) for _ in range(repeats)]))
