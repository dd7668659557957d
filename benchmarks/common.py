"""Shared pieces of the asv suites.

``time_*`` methods are timed by asv itself; ``track_*`` methods measure a
ratio (or an error) inside one run, with both sides timed back to back by
:func:`median_seconds`, so that the ratio does not depend on which machine
or which moment asv ran the two timings on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np


def median_seconds(fn: Callable[[], object], repeats: int = 7) -> float:
    """Median wall time of ``fn()`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def ratio(slow: Callable[[], object], fast: Callable[[], object], repeats: int = 7) -> float:
    """``median(slow) / median(fast)``, the two interleaved in one run."""
    slow()
    fast()
    ts, tf = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        slow()
        ts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fast()
        tf.append(time.perf_counter() - t0)
    return float(np.median(ts) / np.median(tf))


class Benchmark:
    """Base class: asv settings shared by the suites."""

    timeout = 600
    warmup_time = 0.0
    repeat = (3, 7, 60.0)
    number = 1
