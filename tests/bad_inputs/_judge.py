"""The judge of the bad-input cases: expectations, classes, and one verdict per case.

Each case is a name, a callable that makes the call, and an expectation:

* ``Value(ref, ...)``: a result equal to ``ref()`` within a stated tolerance,
  where ``ref`` is a slow, obvious float64 (or exact) computation
  (``tests/oracles.py``), never the library's own reference functions;
* ``Check(pred)``: a result for which ``pred(result)`` holds, for summaries
  whose answer is a bound (low-rank factors, Misra-Gries);
* ``Error(*names)``: only an error makes sense; a clear one names one of
  ``names`` (the argument);
* ``Either(ref, *names)``: a correct value, or a clear error naming the argument.

Classes, of which the first two pass and the last two fail the test:

* **correct**: a result that agrees with the reference (``Value``, ``Check``,
  or the value of an ``Either``);
* **clear error**: an error (expected by ``Error`` or allowed by ``Either``)
  in one line that names the argument;
* **unclear error**: several lines, no argument named, an exception raised
  inside numpy/numba/torch, a leaked ``AttributeError`` / ``IndexError`` /
  ``KeyError``, or any error where only a value makes sense (``Value``);
* **silent wrong**: a result that disagrees with the reference, or a result
  where only an error makes sense.

"Clear" is a heuristic (one line, names the argument, raised by propopt's
own code, not a leaked lookup error); a few cases carry a ``reading=`` that
overrides it, with the reason shown: ``(class, why)``, or ``(class, why,
pattern)`` to override only a result whose detail matches the regular
expression ``pattern`` (a known bad message, judged by the heuristic alone
once it is gone).  The summary table per area and class is printed by
``conftest.py``.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import propopt
import propopt_case_studies

try:
    import torch
except ImportError:  # the torch cases are left out
    torch = None

CORRECT, CLEAR, UNCLEAR, SILENT = "correct", "clear error", "unclear error", "silent wrong"
CLASSES = (CORRECT, CLEAR, UNCLEAR, SILENT)
PROPERTY = "bad_input"  # the user property that carries (area, class) to the summary
LEAKS = (AttributeError, IndexError, KeyError, NameError, UnboundLocalError, AssertionError)
OWN = tuple(os.path.dirname(p.__file__) + os.sep for p in (propopt, propopt_case_studies))


# ------------------------------------------------------------- expectations
@dataclass
class Value:
    """A result equal to ``ref()``: leaves compared with ``rtol * max|ref| + atol``."""

    ref: Any
    rtol: float = 1e-12
    atol: float = 0.0
    dtype: Any = None  # expected dtype of the first array leaf (str or np.dtype)


@dataclass
class Check:
    """A result for which ``pred(result)`` returns ``(ok, message)``."""

    pred: Callable[[Any], tuple[bool, str]]


@dataclass
class Error:
    """Only an error makes sense; a clear one names one of ``names``."""

    names: tuple[str, ...]

    def __init__(self, *names: str) -> None:
        self.names = names


@dataclass
class Either:
    """A correct value (``Value`` or ``Check``), or a clear error naming one of ``names``."""

    value: Value | Check
    names: tuple[str, ...]

    def __init__(self, value: Value | Check, *names: str) -> None:
        self.value, self.names = value, names


@dataclass
class Case:
    area: str
    name: str
    call: Callable[[], Any]
    expect: Value | Check | Error | Either
    # (class, why) or (class, why, pattern): overrides the heuristic (see the docstring)
    reading: tuple[str, ...] | None = None


class Table:
    """The cases of one area: ``build(table)`` adds each by ``table(name, call, expect)``."""

    def __init__(self, area: str, build: Callable[[Table], None]) -> None:
        self.area, self.cases = area, []
        build(self)

    def __call__(
        self, name: str, call: Callable[[], Any], expect: Any, reading: Any = None
    ) -> None:
        self.cases.append(Case(self.area, name, call, expect, reading))

    def params(self) -> list[Any]:
        """One ``pytest.param`` per case, its id the case's name."""
        seen = [c.name for c in self.cases]
        twice = {n for n in seen if seen.count(n) > 1}
        if twice:
            raise ValueError(f"{self.area}: case names {sorted(twice)} repeat, make them unique")
        return [pytest.param(c, id=c.name) for c in self.cases]


# ---------------------------------------------------------------- comparing
def to_np(x: Any) -> Any:
    """An array leaf as a float64/complex/int numpy array (torch, bf16, masked included)."""
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype in (torch.bfloat16, torch.float16):
            x = x.float()
        return x.numpy()
    if isinstance(x, np.ma.MaskedArray):
        return x
    a = np.asarray(x)
    if a.dtype.kind == "V" or (a.dtype.kind == "f" and a.dtype.itemsize < 4):
        a = a.astype(np.float64)
    return a


def leaves(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [v for k in sorted(x) for v in leaves(x[k])]
    if isinstance(x, (tuple, list)) and not (x and isinstance(x[0], (int, float, complex))):
        return [v for e in x for v in leaves(e)]
    return [x]


def dtype_str(x: Any) -> str:
    return str(getattr(x, "dtype", type(x).__name__))


def compare_leaf(i: int, g: Any, w: Any, v: Value) -> str | None:
    """Why leaf ``i`` of the result, ``g``, differs from the reference's ``w`` (or None)."""
    if isinstance(w, np.ma.MaskedArray):
        if not isinstance(g, np.ma.MaskedArray) or not np.array_equal(
            np.ma.getmaskarray(g), np.ma.getmaskarray(w)
        ):
            return f"leaf {i}: mask differs (got {type(g).__name__})"
        g, w = g.filled(0), w.filled(0)
    g, w = to_np(g), np.asarray(w)
    if g.shape != w.shape:
        return f"leaf {i} has shape {g.shape}, expected {w.shape}"
    if g.size == 0:
        return None
    if w.dtype.kind == "O" or (w.dtype.kind in "iub" and g.dtype.kind in "iub"):
        gv, wv = g.ravel().tolist(), w.ravel().tolist()
        if any(not (a == b) for a, b in zip(gv, wv)):  # exact, across int and float
            return f"leaf {i}: {gv[:6]} != {wv[:6]} (exact)"
        return None
    gc, wc = g.astype(np.complex128), w.astype(np.complex128)
    nan_g, nan_w = np.isnan(gc), np.isnan(wc)
    if not np.array_equal(nan_g, nan_w):
        return f"leaf {i}: NaN at {np.argwhere(nan_g != nan_w)[0].tolist()} differs"
    inf_g, inf_w = np.isinf(gc), np.isinf(wc)
    if not np.array_equal(inf_g, inf_w) or not np.array_equal(gc[inf_g], wc[inf_w]):
        got, want = g.ravel()[:6].tolist(), w.ravel()[:6].tolist()
        return f"leaf {i}: infinities differ ({got} vs {want})"
    fin = ~(nan_w | inf_w)
    if not fin.any():
        return None
    scale = float(np.abs(wc[fin]).max())
    err = float(np.abs(gc[fin] - wc[fin]).max())
    tol = v.rtol * scale + v.atol
    if not err <= tol:
        got, want = g.ravel()[:4].tolist(), w.ravel()[:4].tolist()
        return f"leaf {i}: max |error| {err:.3g} > tolerance {tol:.3g} (got {got}, want {want})"
    return None


def compare(got: Any, v: Value) -> tuple[bool, str]:
    want = v.ref() if callable(v.ref) else v.ref
    gl, wl = leaves(got), leaves(want)
    if len(gl) != len(wl):
        return False, f"{len(gl)} leaves returned, {len(wl)} expected"
    for i, (g, w) in enumerate(zip(gl, wl)):
        if i == 0 and v.dtype is not None:
            want_dtype = v.dtype if isinstance(v.dtype, str) else str(np.dtype(v.dtype))
            if dtype_str(g) != want_dtype:
                return False, f"leaf {i} has dtype {dtype_str(g)}, expected {v.dtype}"
        why = compare_leaf(i, g, w, v)
        if why is not None:
            return False, why
    return True, "matches the reference"


# ------------------------------------------------------------------ errors
def mentions(msg: str, names: tuple[str, ...]) -> bool:
    for n in names:
        if re.search(r"(?<![A-Za-z0-9_])" + re.escape(n) + r"(?![A-Za-z0-9_])", msg):
            return True
    return False


def raised_in_own_code(exc: BaseException) -> bool:
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and last.startswith(OWN)


def judge_error(exc: BaseException, names: tuple[str, ...]) -> tuple[bool, str]:
    msg = str(exc).strip()
    why = []
    if "\n" in msg:
        why.append("several lines")
    if isinstance(exc, LEAKS):
        why.append(f"leaked {type(exc).__name__}")
    if type(exc).__module__.split(".")[0] in ("numba", "torch", "llvmlite"):
        why.append(f"{type(exc).__module__} exception")
    if not raised_in_own_code(exc):
        why.append("raised outside propopt")
    if not mentions(msg, names):
        why.append(f"names none of {', '.join(names)}")
    return not why, "; ".join(why)


# ----------------------------------------------------------------- verdicts
def run_case(c: Case) -> tuple[str, str]:
    """The case's class and a one-line detail (the reason, when it is not correct)."""
    exp = c.expect
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = c.call()
        exc = None
    except Exception as e:  # every exception is judged
        exc, got, caught = e, None, []
    warn = f" [warned: {str(caught[0].message).splitlines()[0][:60]}]" if caught else ""
    if exc is not None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        text = f"{type(exc).__name__}: {first[:160]}"
        names = exp.names if isinstance(exp, (Error, Either)) else ()
        clear, why = judge_error(exc, names) if names else (False, "a value was expected")
        # a valid input that raises is not a refusal of a bad one: unclear
        result, detail = (CLEAR, text) if clear else (UNCLEAR, f"{text}  <- {why}")
    else:
        value = exp.value if isinstance(exp, Either) else exp
        if isinstance(value, Error):
            result = SILENT
            detail = f"returned {short(got)} where only an error makes sense{warn}"
        else:
            try:
                ok, msg = value.pred(got) if isinstance(value, Check) else compare(got, value)
            except Exception as e:  # a result of the wrong kind
                ok, msg = False, f"result could not be checked ({type(e).__name__}: {e})"
            result, detail = (CORRECT if ok else SILENT), msg + warn
    if c.reading is not None:
        cls, why = c.reading[:2]
        applies = len(c.reading) < 3 or re.search(c.reading[2], detail) is not None
        if applies and cls != result:
            detail += f"  [reading: {why}]"
            result = cls
    return result, detail


def judge(c: Case, request: pytest.FixtureRequest) -> None:
    """Run the case; fail the test, with the one-line reason, when unclear or silently wrong."""
    t0 = time.perf_counter()
    result, detail = run_case(c)
    seconds = time.perf_counter() - t0
    request.node.user_properties.append((PROPERTY, (c.area, result, detail, seconds)))
    if result in (UNCLEAR, SILENT):
        pytest.fail(f"[{result}] {c.area}: {c.name} -- {detail}", pytrace=False)


# ------------------------------------------------------------------ helpers
def short(x: Any) -> str:
    s = repr(x).replace("\n", " ")
    s = re.sub(r"\s+", " ", s)
    return s[:90] + ("..." if len(s) > 90 else "")


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def tensor(x: Any, **kw: Any) -> Any:
    return torch.tensor(np.asarray(x), **kw)
