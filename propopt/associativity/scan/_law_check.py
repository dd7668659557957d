"""The law check :func:`propopt.associative_scan` runs before a scan (``check=``).

``check=True`` samples 200 triples of elements and tests
``fn(a, fn(b, c)) == fn(fn(a, b), c)`` beyond rounding
(:func:`propopt.audit.check_associative`) before every call.  ``check=None``
(the default) does it on :data:`AUTO_CHECK_TRIALS` triples the first time a
plain callable is scanned, and remembers the callables that passed, for the
life of the process:

* the callable itself, weakly (it is forgotten when it is collected);
* for a function without a closure, also its code object (at most 4096 of
  them), so that a lambda written in a loop, a new object on every pass, is
  checked once.

A :class:`~propopt.Monoid` is trusted (its author states the law), and dask
arrays are not sampled (that would compute them before the scan is built).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

AUTO_CHECK_TRIALS = 32
"""Triples the automatic check (``check=None``) samples on a callable's first use."""

_passed: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
_passed_code: dict[int, Any] = {}  # id -> code object of callables without closures


def before_scan(fn: Any, elems: Any, axis: int, check: bool | None, *, monoid: bool,
                dask: bool) -> None:  # fmt: skip
    """Raise :class:`propopt.audit.AssociativityError` when the law check ``check`` asks
    for fails on samples of ``elems``; remember a callable that passed the automatic one."""
    automatic = check is None and not monoid and not dask
    if not (check or (automatic and _unchecked(fn))):
        return
    from ..laws import AssociativityError, check_associative

    report = check_associative(fn, elems, axis=axis, trials=200 if check else AUTO_CHECK_TRIALS)
    if not report.ok:
        raise AssociativityError(report, automatic=check is None)
    if check is None:
        _checked_ok(fn)


def _unchecked(fn: Callable[..., Any]) -> bool:
    """Has ``fn`` (or a closure-free function with the same code) not been checked yet?"""
    try:
        if fn in _passed:
            return False
    except TypeError:  # not weak-referenceable (a bound method of a slotted class...)
        pass
    code = getattr(fn, "__code__", None)
    return not (code is not None and _passed_code.get(id(code)) is code)


def _checked_ok(fn: Callable[..., Any]) -> None:
    with contextlib.suppress(TypeError):
        _passed[fn] = True
    code = getattr(fn, "__code__", None)
    if code is not None and not getattr(fn, "__closure__", None) and len(_passed_code) < 4096:
        # a lambda written in a loop is a new object each time, with the same code
        _passed_code[id(code)] = code
