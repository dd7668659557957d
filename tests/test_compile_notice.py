"""The one-line notice while a kernel of propopt's compiles for more than a second."""

import io
import time
import types

import numba

from propopt import _jit


class _Event:
    def __init__(self, dispatcher):
        self.data = {"dispatcher": dispatcher}


def _dispatcher(module, name="kern", cached=True):
    py = types.FunctionType((lambda: None).__code__, {}, name)
    py.__module__ = module
    py.__qualname__ = name
    cache = type("FunctionCache" if cached else "NullCache", (), {})()
    return types.SimpleNamespace(py_func=py, _cache=cache)


def _notice(monkeypatch, after=0.05):
    monkeypatch.setattr(_jit, "NOTICE_AFTER_S", after)
    out = io.StringIO()
    return _jit._CompileNotice(out), out


def test_a_long_compile_is_announced_once_in_one_line(monkeypatch):
    notice, out = _notice(monkeypatch)
    d = _dispatcher("propopt.associativity.topk._cpu", "topk_one")
    inner = _dispatcher("propopt.associativity.topk._cpu", "_unit")
    notice.on_start(_Event(d))
    notice.on_start(_Event(inner))  # nested: part of the outer compilation
    time.sleep(0.2)
    notice.on_end(_Event(inner))
    notice.on_end(_Event(d))
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("propopt: compiling topk_one (propopt.associativity.topk._cpu)")
    assert "cached on disk afterwards" in lines[0]


def test_quick_compiles_and_other_code_stay_silent(monkeypatch):
    notice, out = _notice(monkeypatch, after=0.3)
    d = _dispatcher("propopt.locality.morton")
    notice.on_start(_Event(d))
    notice.on_end(_Event(d))  # done before the notice is due
    user = _dispatcher("my_package.kernels")
    notice.on_start(_Event(user))
    time.sleep(0.4)
    notice.on_end(_Event(user))
    assert out.getvalue() == ""


def test_generated_uncached_kernels_say_they_are_not_cached(monkeypatch):
    notice, out = _notice(monkeypatch)
    d = _dispatcher("_propopt_gen_cpu_mine_float64_0123456789abcdef0123", "scan_one", cached=False)
    notice.on_start(_Event(d))
    time.sleep(0.2)
    notice.on_end(_Event(d))
    assert "scan_one (generated cpu_mine_float64)" in out.getvalue()
    assert "not cached" in out.getvalue()


def test_the_notice_listens_to_numba():
    assert _jit._notice is not None
    assert _jit._notice in numba.core.event._registered["numba:compile"]
