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
    """``median(slow) / median(fast)``, measured one after the other in one run.

    Each side runs as a block after its own warm-up rather than alternating
    call by call: on a 2-core machine the thread pool of one library (XLA's,
    say) still spinning after its call slows the other's threads down, which
    would charge one library for the other's idle threads.
    """
    return median_seconds(slow, repeats) / median_seconds(fast, repeats)


class Benchmark:
    """Base class: asv settings shared by the suites."""

    timeout = 600
    warmup_time = 0.0
    repeat = (3, 7, 60.0)
    number = 1
