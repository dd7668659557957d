"""capstone.measure: interleaved rounds, best torch threads, spread, load flag."""

import math
import time

import pytest

from propopt_case_studies.capstone import measure


def _sleeper(seconds, log=None, name=None):
    def f():
        if log is not None:
            log.append(name)
        time.sleep(seconds)

    return f


def test_rounds_alternate_and_the_ratio_is_the_median_of_rounds():
    log = []
    c = measure.compare(_sleeper(0.004, log, "b"), _sleeper(0.002, log, "o"), rounds=4)
    # the warm-up (WARM_CALLS calls each, well within WARM_S), then b o / o b / b o / o b
    warm = measure.WARM_CALLS
    assert log == ["b"] * warm + ["o"] * warm + ["b", "o", "o", "b", "b", "o", "o", "b"]
    assert c.rounds == 4 and c.baseline_threads is None
    assert 1.5 < c.ratio < 2.5 and c.ratio_lo <= c.ratio <= c.ratio_hi
    assert c.baseline_ms > c.optimized_ms > 1.5
    d = c.to_dict()
    assert d["busy"] == c.busy and d["rounds"] == 4


def test_the_warm_up_stops_after_its_time():
    log = []
    measure._warm(_sleeper(0.2, log, "x"), lambda: None)
    assert log == ["x", "x"]  # at least two calls (the first may compile), 0.4 s > WARM_S
    long = []
    measure._warm(_sleeper(measure.WARM_LONG_S, long, "z"), lambda: None)
    assert long == ["z"]  # one long call is warm-up enough
    fast = []
    measure._warm(_sleeper(0.0, fast, "y"), lambda: None)
    assert fast == ["y"] * measure.WARM_CALLS


def test_budget_stops_after_three_rounds_and_ticks_each_round():
    ticks = []
    c = measure.compare(
        _sleeper(0.01), _sleeper(0.01), rounds=50, budget_s=0.001, tick=lambda: ticks.append(1)
    )
    assert c.rounds == 3 and len(ticks) == 3
    with pytest.raises(ValueError, match="rounds=0: must be >= 1"):
        measure.compare(_sleeper(0), _sleeper(0), rounds=0)


def test_a_torch_baseline_runs_at_its_faster_thread_count(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(measure, "usable_cpus", lambda: 2)
    before = torch.get_num_threads()

    def slow_with_two():  # a loop of small ops: one thread is faster
        time.sleep(0.006 if torch.get_num_threads() > 1 else 0.001)

    assert measure.best_torch_threads(slow_with_two) == 1
    c = measure.compare(slow_with_two, _sleeper(0.001), rounds=3, torch_baseline=True)
    assert c.baseline_threads == 1 and c.baseline_ms < 4
    assert torch.get_num_threads() == before  # restored


def test_a_thread_count_that_has_lost_makes_no_second_call(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(measure, "usable_cpus", lambda: 2)
    calls = []

    def slow_with_two():
        calls.append(torch.get_num_threads())
        time.sleep(0.05 if torch.get_num_threads() > 1 else 0.005)

    assert measure.best_torch_threads(slow_with_two, calls=2) == 1
    assert calls == [1, 1, 2]  # 0.05 s > LOST_BY x 0.005 s: the second call of two is skipped
    calls.clear()

    def close():
        calls.append(torch.get_num_threads())
        time.sleep(0.005)

    measure.best_torch_threads(close, calls=2)
    assert calls == [1, 1, 2, 2]  # within LOST_BY: both settings make all their calls


def test_load_of_other_processes_flags_a_busy_comparison(monkeypatch):
    class Meter:
        cores = 1.2

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(measure, "LoadMeter", Meter)
    c = measure.compare(_sleeper(0), _sleeper(0), rounds=1)
    assert c.load == 1.2 and c.busy
    assert not measure.Comparison(1, 1, 1, 1, 1, 1, measure.BUSY_CORES / 2).busy


def test_a_sampled_baseline_scales_its_times_and_ratios():
    c = measure.Comparison(2.0, 1.0, 2.0, 1.5, 2.5, 3, 0.0)
    s = c.baseline_scaled(10.0)
    assert (s.baseline_ms, s.optimized_ms, s.ratio, s.ratio_lo, s.ratio_hi) == (20, 1, 20, 15, 25)


def test_compile_only_calls_the_optimized_side_once_and_times_nothing():
    calls: list[str] = []
    with measure.compile_only():
        assert measure.compiling_only()
        c = measure.compare(lambda: calls.append("b"), lambda: calls.append("o"), rounds=5)
        measure.compare(
            lambda: calls.append("numba b"),
            lambda: calls.append("o"),
            rounds=5,
            baseline_compiles=True,
        )
        t = measure.median_seconds(lambda: calls.append("f"), repeats=5)
    assert not measure.compiling_only()
    assert calls == ["o", "numba b", "o", "f"]
    assert math.isnan(c.ratio) and math.isnan(t) and c.rounds == 0
