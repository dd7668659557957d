"""Each verb's worst input distribution, as one row of asv history (``perf_fuzz.py``).

``track_worst_over_best`` is the verb's worst distribution's time over its
floor, divided by its best distribution's: 1 when no input is slower than
another for the work it does, and a step up in the history when a change
opens a cliff on some input.  ``track_worst_over_floor`` is the worst
distribution's time over its floor itself.  Small sizes, so that the suite
runs in about a minute.
"""

from __future__ import annotations

from . import perf_fuzz
from .common import Benchmark


class PerfFuzz(Benchmark):
    """Every verb of ``perf_fuzz.verbs()`` over its table of inputs."""

    params = [v.name for v in perf_fuzz.verbs()]
    param_names = ["verb"]
    number = 1
    repeat = 1

    def setup(self, verb):
        self.rows = perf_fuzz.measure("small", only=[verb], repeats=5)
        self.rows = [r for r in self.rows if r.verb == verb]

    def track_worst_over_best(self, verb):
        return perf_fuzz.worst_over_best(self.rows, verb)

    track_worst_over_best.unit = "worst / best distribution (time over floor)"

    def track_worst_over_floor(self, verb):
        return max(r.over_floor for r in self.rows)

    track_worst_over_floor.unit = "time / floor"
