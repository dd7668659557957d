"""Every asv benchmark runs at its smallest parameters, so a broken one fails CI."""

import importlib
import inspect
import pkgutil

import pytest

import benchmarks

MODULES = [m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_")]


def _cases():
    for name in MODULES:
        module = importlib.import_module(f"benchmarks.{name}")
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or not hasattr(cls, "params"):
                continue
            for meth in sorted(m for m in dir(cls) if m.startswith(("time_", "track_"))):
                yield pytest.param(cls, meth, id=f"{name}.{cls_name}.{meth}")


def test_there_are_benchmarks():
    assert MODULES


@pytest.mark.slow
@pytest.mark.parametrize("cls, meth", list(_cases()))
def test_benchmark_runs_at_smallest_size(cls, meth):
    params = cls.params if isinstance(cls.params[0], list) else [cls.params]
    args = [min(p) for p in params]
    bench = cls()
    try:
        bench.setup(*args)
        result = getattr(bench, meth)(*args)
    except NotImplementedError:
        return  # e.g. GPU benchmarks on a machine without a GPU
    if meth.startswith("track_"):
        assert result > 0


def test_large_suite_holds_only_larger_sizes_of_the_quick_suites():
    """``benchmarks/large`` repeats quick suites at sizes the quick ones leave out."""
    import json
    from pathlib import Path

    import benchmarks.large.bench_large as large

    classes = [
        c for _, c in inspect.getmembers(large, inspect.isclass) if c.__module__ == large.__name__
    ]
    assert classes
    for cls in classes:
        base = cls.__mro__[1]
        assert base.__module__.startswith("benchmarks.bench_"), cls
        assert base.__name__ == cls.__name__
        flat = lambda p: {tuple(x) for x in p} if isinstance(p[0], list) else {(x,) for x in p}  # noqa: E731
        assert not flat(cls.params) <= flat(base.params), f"{cls.__name__} adds no size"
    root = Path(__file__).resolve().parents[1]
    conf = json.loads((root / "asv.large.conf.json").read_text())
    assert conf["benchmark_dir"] == "benchmarks/large"
    assert conf["results_dir"] != json.loads((root / "asv.conf.json").read_text())["results_dir"]
