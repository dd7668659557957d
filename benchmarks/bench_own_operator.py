"""A user's own combine against the built-in: the steady call, the call that makes it afresh,
and the first call of a second process (``benchmarks.own_operator`` prints the whole table).

Targets at 2^20 float32: a combine made afresh on every call (a closure, a
lambda) costs at most 2x the steady call; the first call in a second
process loads the kernels numba cached (tracked apart from numba's own
start-up, which any library's first compiled function pays).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

import propopt as pp
from propopt import files

from . import own_operator
from .common import Benchmark, median_seconds


def _closure() -> pp.Monoid:
    def affine(a1, b1, a2, b2):
        return a1 * a2, a2 * b1 + b2

    return pp.Monoid(affine, identity=(1.0, 0.0))


def _lambda() -> pp.Monoid:
    return pp.Monoid(lambda a1, b1, a2, b2: (a1 * a2, a2 * b1 + b2), (1.0, 0.0))


_MAKE = {"built-in": lambda: pp.linear_recurrence, "closure": _closure, "lambda": _lambda}


class OwnOperator(Benchmark):
    """``associative_scan(Monoid(affine), (a, b))``, the monoid made afresh on every call."""

    params = [["built-in", "closure", "lambda"], [2**16, 2**20]]
    param_names = ["way", "n"]

    def setup(self, way, n):
        rng = np.random.default_rng(0)
        self.x = (rng.uniform(0.5, 1.0, n).astype(np.float32), rng.random(n, dtype=np.float32))
        self.make = _MAKE[way]
        self.fixed = self.make()
        pp.associative_scan(self.make(), self.x)  # compile

    def time_made_afresh(self, way, n):
        pp.associative_scan(self.make(), self.x)

    def time_steady(self, way, n):
        pp.associative_scan(self.fixed, self.x)

    def track_made_afresh_over_steady(self, way, n):
        afresh = median_seconds(lambda: pp.associative_scan(self.make(), self.x), repeats=15)
        steady = median_seconds(lambda: pp.associative_scan(self.fixed, self.x), repeats=15)
        return afresh / steady

    track_made_afresh_over_steady.unit = "ratio"  # type: ignore[attr-defined]


class OwnOperatorSecondProcess(Benchmark):
    """The first call of a second process against the cache a first process filled."""

    params = [["built-in linear_recurrence", "__main__", "closure, made afresh each call"]]
    param_names = ["way"]
    timeout = 900

    def setup(self, way):
        self.tmp = tempfile.TemporaryDirectory()
        self.folder = Path(self.tmp.name)
        files.write_text(self.folder / "own_affine.py", own_operator.MODULE)
        own_operator.run_child(self.folder, way, self.folder / "cache", 20, False)  # compile

    def teardown(self, way):
        self.tmp.cleanup()

    def track_first_call_seconds(self, way):
        return own_operator.run_child(self.folder, way, self.folder / "cache", 20, False)["first"]

    def track_first_call_after_numba_startup_seconds(self, way):
        return own_operator.run_child(self.folder, way, self.folder / "cache", 20, True)["first"]

    track_first_call_seconds.unit = "seconds"  # type: ignore[attr-defined]
    track_first_call_after_numba_startup_seconds.unit = "seconds"  # type: ignore[attr-defined]
