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
