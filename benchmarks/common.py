"""Shared pieces of the asv suites: the capstone's timing, asv's base class.

``time_*`` methods are timed by asv itself; ``track_*`` methods measure a
ratio (or an error) inside one run with :func:`propopt_case_studies.capstone.measure.compare`:
both sides interleaved round by round, the median of the per-round ratios,
so that the ratio holds whichever machine or moment asv ran on.
"""

from __future__ import annotations

from collections.abc import Callable

from propopt_case_studies.capstone.measure import compare, median_seconds

__all__ = ["Benchmark", "median_seconds", "ratio"]


def ratio(slow: Callable[[], object], fast: Callable[[], object], repeats: int = 7) -> float:
    """``slow / fast``: the median over ``repeats`` interleaved rounds (``capstone.measure``)."""
    return compare(slow, fast, rounds=repeats).ratio


class Benchmark:
    """Base class: asv settings shared by the suites."""

    timeout = 600
    warmup_time = 0.0
    repeat = (3, 7, 60.0)
    number = 1
