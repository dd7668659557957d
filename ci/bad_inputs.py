"""Bad-input pass: adversarial calls of propopt's public API, each judged against an expectation.

Run ``python ci/bad_inputs.py`` (``--only AREA`` to run one area, ``--strict``
to exit 1 when a case is unclear or silently wrong).  It prints one line per
case and a summary table.

Each case is a name, a callable that makes the call, and an expectation:

* ``Value(ref, ...)``: a result equal to ``ref()`` within a stated tolerance,
  where ``ref`` is a slow, obvious float64 (or exact) computation written
  here, never the library's own reference functions;
* ``Check(pred)``: a result for which ``pred(result)`` (written here) holds,
  for summaries whose answer is a bound (low-rank factors, Misra-Gries);
* ``Error(*names)``: only an error makes sense; a clear one names one of
  ``names`` (the argument);
* ``Either(ref, *names)``: a correct value, or a clear error naming the argument.

Classes:

* **correct**: a result that agrees with the reference (``Value``, ``Check``,
  or the value of an ``Either``);
* **clear error**: an error (expected by ``Error`` or allowed by ``Either``)
  in one line that names the argument;
* **unclear error**: several lines, no argument named, an exception raised
  inside numpy/numba/torch, a leaked ``AttributeError`` / ``IndexError`` /
  ``KeyError``, or any error where only a value makes sense (``Value``);
* **silent wrong**: a result that disagrees with the reference, or a result
  where only an error makes sense.

"Clear" is the heuristic (one line, names the argument, raised by propopt's
own code, not a leaked lookup error); a few cases carry a ``reading=`` that
overrides it, with the reason printed: ``(class, why)``, or ``(class, why,
pattern)`` to override only a result whose detail matches the regular
expression ``pattern`` (a known bad message, judged by the heuristic alone
once it is gone).

Sizes are small: the pass takes about 20 s on 2 cores with the kernels cached
on disk (the first run compiles them, a minute or two more).
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

os.environ.setdefault("PROPOPT_COMPILE_NOTICE", "0")

import propopt as pp  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover - the pass skips torch cases
    torch = None
try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None
try:
    import pandas as pd
except ImportError:  # pragma: no cover
    pd = None
try:
    import dask.array as da
except ImportError:  # pragma: no cover
    da = None

CORRECT, CLEAR, UNCLEAR, SILENT = "correct", "clear error", "unclear error", "silent wrong"
CLASSES = (CORRECT, CLEAR, UNCLEAR, SILENT)
LEAKS = (AttributeError, IndexError, KeyError, NameError, UnboundLocalError, AssertionError)
OWN = (os.path.join(ROOT, "propopt") + os.sep, os.path.join(ROOT, "case_studies") + os.sep)


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
    result: str = ""
    detail: str = ""
    seconds: float = 0.0


CASES: list[Case] = []
AREA = "?"


def area(name: str) -> None:
    global AREA
    AREA = name


def case(name: str, call: Callable[[], Any], expect: Any, reading: Any = None) -> None:
    CASES.append(Case(AREA, name, call, expect, reading))


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


def compare(got: Any, v: Value) -> tuple[bool, str]:
    want = v.ref() if callable(v.ref) else v.ref
    gl, wl = leaves(got), leaves(want)
    if len(gl) != len(wl):
        return False, f"{len(gl)} leaves returned, {len(wl)} expected"
    for i, (g, w) in enumerate(zip(gl, wl)):
        if (
            i == 0
            and v.dtype is not None
            and dtype_str(g) != str(np.dtype(v.dtype) if not isinstance(v.dtype, str) else v.dtype)
        ):
            return False, f"leaf {i} has dtype {dtype_str(g)}, expected {v.dtype}"
        if isinstance(w, np.ma.MaskedArray):
            if not isinstance(g, np.ma.MaskedArray) or not np.array_equal(
                np.ma.getmaskarray(g), np.ma.getmaskarray(w)
            ):
                return False, f"leaf {i}: mask differs (got {type(g).__name__})"
            g, w = g.filled(0), w.filled(0)
        g, w = to_np(g), np.asarray(w)
        if g.shape != w.shape:
            return False, f"leaf {i} has shape {g.shape}, expected {w.shape}"
        if g.size == 0:
            continue
        if w.dtype.kind == "O" or (w.dtype.kind in "iub" and g.dtype.kind in "iub"):
            gv, wv = g.ravel().tolist(), w.ravel().tolist()
            if any(not (a == b) for a, b in zip(gv, wv)):  # exact, across int and float
                return False, f"leaf {i}: {gv[:6]} != {wv[:6]} (exact)"
            continue
        gc, wc = g.astype(np.complex128), w.astype(np.complex128)
        nan_g, nan_w = np.isnan(gc), np.isnan(wc)
        if not np.array_equal(nan_g, nan_w):
            return False, f"leaf {i}: NaN at {np.argwhere(nan_g != nan_w)[0].tolist()} differs"
        inf_g, inf_w = np.isinf(gc), np.isinf(wc)
        if not np.array_equal(inf_g, inf_w) or not np.array_equal(gc[inf_g], wc[inf_w]):
            return (
                False,
                f"leaf {i}: infinities differ ({g.ravel()[:6].tolist()} vs "
                f"{w.ravel()[:6].tolist()})",
            )
        fin = ~(nan_w | inf_w)
        if not fin.any():
            continue
        scale = float(np.abs(wc[fin]).max())
        err = float(np.abs(gc[fin] - wc[fin]).max())
        tol = v.rtol * scale + v.atol
        if not err <= tol:
            return (
                False,
                f"leaf {i}: max |error| {err:.3g} > tolerance {tol:.3g} (got "
                f"{g.ravel()[:4].tolist()}, want {w.ravel()[:4].tolist()})",
            )
    return True, "matches the reference"


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


def run_case(c: Case) -> None:
    exp = c.expect
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = c.call()
        exc = None
    except Exception as e:  # every exception is judged
        exc, got, caught = e, None, []
    c.seconds = time.perf_counter() - t0
    warn = f" [warned: {str(caught[0].message).splitlines()[0][:60]}]" if caught else ""
    if exc is not None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        text = f"{type(exc).__name__}: {first[:160]}"
        names = exp.names if isinstance(exp, (Error, Either)) else ()
        clear, why = judge_error(exc, names) if names else (False, "a value was expected")
        # a valid input that raises is not a refusal of a bad one: unclear
        c.result = CLEAR if clear else UNCLEAR
        c.detail = text + ("" if clear else f"  <- {why}")
    else:
        value = exp.value if isinstance(exp, Either) else exp
        if isinstance(value, Error):
            c.result, c.detail = (
                SILENT,
                f"returned {short(got)} where only an error makes sense{warn}",
            )
        else:
            try:
                ok, msg = value.pred(got) if isinstance(value, Check) else compare(got, value)
            except Exception as e:  # a result of the wrong kind
                ok, msg = False, f"result could not be checked ({type(e).__name__}: {e})"
            c.result = CORRECT if ok else SILENT
            c.detail = msg + warn
    if c.reading is not None:
        cls, why = c.reading[:2]
        applies = len(c.reading) < 3 or re.search(c.reading[2], c.detail) is not None
        if applies and cls != c.result:
            c.detail += f"  [reading: {why}]"
            c.result = cls


def short(x: Any) -> str:
    s = repr(x).replace("\n", " ")
    s = re.sub(r"\s+", " ", s)
    return s[:90] + ("..." if len(s) > 90 else "")


# -------------------------------------------------------- slow references
def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def fold(op: Callable[[Any, Any], Any], xs: list[Any]) -> list[Any]:
    """Inclusive left fold, one Python step per element."""
    out, acc = [], None
    for i, x in enumerate(xs):
        acc = x if i == 0 else op(acc, x)
        out.append(acc)
    return out


def cumsum64(x: Any) -> np.ndarray:
    return np.array(fold(lambda a, b: a + b, [float(v) for v in np.ravel(x)]))


def wrap(v: int, bits: int, signed: bool) -> int:
    v %= 1 << bits
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def cumsum_int(xs: list[int], bits: int, signed: bool) -> np.ndarray:
    acc, out = 0, []
    for v in xs:
        acc = wrap(acc + int(v), bits, signed)
        out.append(acc)
    return np.array(out, dtype=object)


def linrec64(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    pa, h, A, H = 1.0, 0.0, [], []
    for ai, bi in zip(np.ravel(a), np.ravel(b)):
        pa, h = pa * float(ai), float(ai) * h + float(bi)
        A.append(pa)
        H.append(h)
    return np.array(A), np.array(H)


def topk_ref(
    x: Any, k: int, largest: bool = True, nan: str = "ignore"
) -> tuple[np.ndarray, np.ndarray]:
    """1-D top-k by a Python sort of (value, index) pairs, ties to the smaller index."""
    vals = [
        float(v) if not isinstance(v, (int, np.integer)) else int(v) for v in np.ravel(x).tolist()
    ]
    pairs = [(v, i) for i, v in enumerate(vals) if not (nan == "ignore" and v != v)]

    def key(p: tuple[Any, int]) -> tuple[Any, ...]:
        v, i = p
        isnan = v != v
        if largest:
            return (0 if isnan else 1, -v if not isnan else 0, i)
        return (1 if isnan else 0, v if not isnan else 0, i)

    best = sorted(pairs, key=key)[:k]
    return np.array([v for v, _ in best]), np.array([i for _, i in best], dtype=np.int64)


def topk_rows(
    x: np.ndarray, k: int, axis: int = -1, largest: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    xm = np.moveaxis(np.asarray(x), axis, -1)
    flat = xm.reshape(-1, xm.shape[-1])
    vs, ids = zip(*(topk_ref(r, k, largest) for r in flat)) if flat.shape[0] else ((), ())
    kk = min(k, xm.shape[-1])
    v = np.array(vs).reshape(xm.shape[:-1] + (kk,)) if vs else np.empty(xm.shape[:-1] + (kk,))
    i = (
        np.array(ids).reshape(xm.shape[:-1] + (kk,))
        if ids
        else np.empty(xm.shape[:-1] + (kk,), np.int64)
    )
    return np.moveaxis(v, -1, axis), np.moveaxis(i, -1, axis)


def gravity64(
    pos: Any,
    mass: Any = None,
    eps: Any = 0.0,
    G: float = 1.0,
    targets: Any = None,
    teps: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Plummer-softened field, one source at a time, in float64.

    Coincident unsoftened pairs are skipped, as direct_gravity documents.
    """
    P = np.asarray(pos, dtype=np.float64).reshape(-1, 3)
    n = P.shape[0]
    m = np.ones(n) if mass is None else np.broadcast_to(np.asarray(mass, np.float64), (n,))
    e = np.broadcast_to(np.asarray(eps, np.float64), (n,))
    T = P if targets is None else np.asarray(targets, np.float64).reshape(-1, 3)
    te = (
        e
        if targets is None
        else np.broadcast_to(np.asarray(eps if teps is None else teps, np.float64), (T.shape[0],))
    )
    acc, pot = np.zeros((T.shape[0], 3)), np.zeros(T.shape[0])
    for i in range(T.shape[0]):
        for j in range(n):
            if targets is None and i == j:
                continue
            d = P[j] - T[i]
            # s = sqrt(|d|^2 + eps_ij^2) without squaring (no overflow for |d| ~ 1e300)
            s = math.hypot(*d, math.sqrt(0.5) * math.hypot(float(te[i]), float(e[j])))
            if s == 0.0:
                continue
            acc[i] += G * m[j] * (d / s / s / s)
            pot[i] -= G * m[j] / s
    return acc, pot


def morton_cells_ref(points: Any, box: Any = None) -> np.ndarray:
    """Exact cell coordinates (Fractions) in the bounding cube (or ``box``), shape (n, dim)."""
    P = np.asarray(points, dtype=np.float64)
    n, dim = P.shape
    bits = {2: 32, 3: 21}[dim]
    if box is None:
        lo = [Fraction(float(P[:, a].min())) for a in range(dim)]
        side = max(Fraction(float(P[:, a].max())) - lo[a] for a in range(dim))
        side = side if side > 0 else Fraction(1)
        hi = [x + side for x in lo]
    else:
        lo = [Fraction(float(v)) for v in box[0]]
        hi = [Fraction(float(v)) for v in box[1]]
    top = (1 << bits) - 1
    q = np.zeros((n, dim), dtype=np.int64)
    for i in range(n):
        for a in range(dim):
            c = math.floor((Fraction(float(P[i, a])) - lo[a]) * (1 << bits) / (hi[a] - lo[a]))
            q[i, a] = min(max(c, 0), top)
    return q


def deinterleave(keys: Any, dim: int) -> np.ndarray:
    bits = {2: 32, 3: 21}[dim]
    out = np.zeros((len(keys), dim), dtype=np.int64)
    for i, k in enumerate(np.asarray(keys).tolist()):
        for m in range(bits):
            for a in range(dim):
                out[i, a] |= ((int(k) >> (dim * m + a)) & 1) << m
    return out


def morton_check(points: Any, box: Any = None, slack: int = 1) -> Check:
    def pred(keys: Any) -> tuple[bool, str]:
        k = np.asarray(keys)
        if k.dtype != np.uint64:
            return False, f"keys have dtype {k.dtype}"
        P = np.asarray(points, np.float64)
        if P.shape[0] == 0:
            return k.shape == (0,), f"shape {k.shape}"
        want = morton_cells_ref(P, box)
        got = deinterleave(k, P.shape[1])
        d = int(np.abs(got - want).max())
        return d <= slack, f"cells within {d} of the exact quantization (allowed {slack})"

    return Check(pred)


def matmul64(A: Any, B: Any) -> np.ndarray:
    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    C = np.zeros((A.shape[0], B.shape[1]))
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            s = 0.0
            for k in range(A.shape[1]):
                s += float(A[i, k]) * float(B[k, j])
            C[i, j] = s
    return C


def moments_ref(points: Any, masses: Any = None) -> np.ndarray:
    """mass, centre of mass and the 6 second moments about it, by loops over Fractions."""
    P = np.asarray(points, np.float64).reshape(-1, 3)
    m = (
        [Fraction(1)] * len(P)
        if masses is None
        else [
            Fraction(float(v)) for v in np.broadcast_to(np.asarray(masses, np.float64), (len(P),))
        ]
    )
    M = sum(m, Fraction(0))
    c = [
        sum((mi * Fraction(float(p[a])) for mi, p in zip(m, P)), Fraction(0)) / M
        if M
        else Fraction(0)
        for a in range(3)
    ]
    S = []
    for a, b in ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)):
        S.append(
            sum(
                (
                    mi * (Fraction(float(p[a])) - c[a]) * (Fraction(float(p[b])) - c[b])
                    for mi, p in zip(m, P)
                ),
                Fraction(0),
            )
        )
    return np.array([float(M), *map(float, c), *map(float, S)])


def row10(mo: Any) -> np.ndarray:
    return np.asarray(mo.row[:10])


def lowrank_check(M: Any, rank: int | None = None, rtol: float = 1e-8) -> Check:
    """The factors reproduce ``M`` (float64 SVD of it as the yardstick) to a relative tolerance."""
    M64 = to_np(M).astype(np.float64) if not hasattr(M, "matvec") else None

    def pred(L: Any) -> tuple[bool, str]:
        U, s, Vt = (to_np(v).astype(np.float64) for v in (L.U, L.s, L.Vt))
        if M64 is None:
            return True, "operator"
        if rank is not None and len(s) != rank:
            return False, f"rank {len(s)}, expected {rank}"
        scale = float(np.abs(M64).max()) or 1.0
        A, R = M64 / scale, (U * (s / scale)) @ Vt
        sv = np.linalg.svd(A, compute_uv=False)
        best = sv[len(s)] if len(s) < len(sv) else 0.0
        top = sv[0] if len(sv) and sv[0] else 1.0
        err = float(np.linalg.norm(A - R, 2))
        ok = np.all(np.isfinite(R)) and err <= best * 10 + rtol * (sv[0] if len(sv) else 1.0)
        return (
            bool(ok),
            f"relative error {err / top:.2g} (best rank-{len(s)} {best / top:.2g})",
        )

    return Check(pred)


def is_error_free(fn: Callable[[Any], bool], msg: str) -> Check:
    return Check(lambda r: (bool(fn(r)), msg))


def tensor(x: Any, **kw: Any) -> Any:
    return torch.tensor(np.asarray(x), **kw)


# =================================================================== CASES
def scan_cases() -> None:
    area("associative_scan")
    S = pp.associative_scan
    x17 = lambda: rng(1).normal(size=17)  # noqa: E731
    ref17 = lambda: cumsum64(x17())  # noqa: E731
    case("float64, 17 elements", lambda: S(pp.add, x17()), Value(ref17))
    case(
        "list instead of an array",
        lambda: S(pp.add, [1.0, 2.0, 3.0]),
        Either(Value([1.0, 3.0, 6.0]), "elems"),
    )
    case("Python scalar", lambda: S(pp.add, 5.0), Error("elems"))
    case("out= of the result's shape", lambda: S(pp.add, x17(), out=np.empty(17)), Value(ref17))
    case("out= in place", lambda: (lambda x: S(pp.add, x, out=x))(x17()), Value(ref17))
    case("out= one short", lambda: S(pp.add, x17(), out=np.empty(16)), Error("out", "shape"))
    case("out= float32 for float64", lambda: S(pp.add, x17(), out=np.empty(17, np.float32)),
         Error("out", "dtype"))  # fmt: skip
    case("out= a list", lambda: S(pp.add, x17(), out=[0.0] * 17), Error("out"))
    case("0-d array", lambda: S(pp.add, np.array(5.0)), Error("elems"))
    case("generator", lambda: S(pp.add, (float(i) for i in range(3))), Error("elems"))
    case("empty float64", lambda: S(pp.add, np.zeros(0)), Value(np.zeros(0), dtype="float64"))
    case("length 1", lambda: S(pp.add, np.array([2.5])), Value([2.5]))
    case(
        "length 2^k+1 = 65537 float64",
        lambda: S(pp.add, np.full(65537, 0.5)),
        Value(lambda: np.arange(1, 65538) * 0.5),
    )
    case(
        "bool elements",
        lambda: S(pp.add, np.array([True, True, False])),
        Either(Value([1, 2, 2]), "elems", "bool"),
    )
    case(
        "complex128 add",
        lambda: S(pp.add, np.array([1 + 1j, 2 - 1j, 1e300j])),
        Value([1 + 1j, 3 + 0j, 3 + 1e300j]),
    )
    case(
        "complex128 maximum",
        lambda: S(pp.maximum, np.array([1 + 1j, 2 - 1j])),
        Error("elems", "complex128"),
    )
    case(
        "object array of floats",
        lambda: S(pp.add, np.array([1.0, 2.0], dtype=object)),
        Either(Value([1.0, 3.0]), "elems", "object"),
    )
    case("string array", lambda: S(pp.add, np.array(["a", "b"])), Error("elems"))
    case("datetime64", lambda: S(pp.add, np.array(["2020-01-01"], "datetime64[D]")), Error("elems"))
    case(
        "longdouble",
        lambda: S(pp.add, np.ones(3, np.longdouble)),
        Either(Value([1.0, 2.0, 3.0]), "elems", "float128"),
    )
    case(
        "int8 overflow wraps (documented)",
        lambda: S(pp.add, np.array([100, 100, 100], np.int8)),
        Value(lambda: cumsum_int([100, 100, 100], 8, True), dtype="int8"),
    )
    case(
        "uint8 wraps",
        lambda: S(pp.add, np.array([200, 100], np.uint8)),
        Value(lambda: cumsum_int([200, 100], 8, False), dtype="uint8"),
    )
    case(
        "int64 near max wraps",
        lambda: S(pp.add, np.array([2**63 - 1, 1], np.int64)),
        Value(lambda: cumsum_int([2**63 - 1, 1], 64, True)),
    )
    case(
        "uint64 mul wraps",
        lambda: S(pp.mul, np.array([2**63, 2, 3], np.uint64)),
        Value(np.array([2**63, 0, 0], dtype=object)),
    )
    case(
        "int32 add 2^31-1 + 1",
        lambda: S(pp.add, np.array([2**31 - 1, 1], np.int32)),
        Value(lambda: cumsum_int([2**31 - 1, 1], 32, True), dtype="int32"),
    )
    case("axis=5 on 2-D", lambda: S(pp.add, np.ones((2, 3)), axis=5), Error("axis"))
    case("axis=-3 on 2-D", lambda: S(pp.add, np.ones((2, 3)), axis=-3), Error("axis"))
    case("axis=1.0", lambda: S(pp.add, np.ones((2, 3)), axis=1.0), Error("axis"))
    case("axis=True", lambda: S(pp.add, np.ones((2, 3)), axis=True), Error("axis"))
    case("axis=None", lambda: S(pp.add, np.ones((2, 3)), axis=None), Error("axis"))
    case(
        "axis=np.int64(1)",
        lambda: S(pp.add, np.ones((2, 3)), axis=np.int64(1)),
        Value(np.array([[1.0, 2, 3], [1, 2, 3]])),
    )
    case(
        "axis=-1 on 2-D",
        lambda: S(pp.add, np.arange(6.0).reshape(2, 3), axis=-1),
        Value(np.array([[0.0, 1, 3], [3, 7, 12]])),
    )
    case("method='CPU' (case)", lambda: S(pp.add, np.ones(3), method="CPU"), Error("method"))
    case("method=None", lambda: S(pp.add, np.ones(3), method=None), Error("method"))
    case(
        "device='cuda' on numpy",
        lambda: S(pp.add, np.ones(3), device="cuda"),
        Error("device", "elems"),
    )
    case(
        "method='native' on numpy",
        lambda: S(pp.add, np.ones(3), method="native"),
        Error("method", "elems"),
    )
    case("device='gpu'", lambda: S(pp.add, np.ones(3), device="gpu"), Error("device"))
    case("method='reference'", lambda: S(pp.add, x17(), method="reference"), Value(ref17))
    case("method='generic'", lambda: S(pp.add, x17(), method="generic"), Value(ref17, rtol=1e-14))
    case(
        "device='dask' on numpy",
        lambda: S(pp.add, np.ones(3), device="dask"),
        Either(Value([1.0, 2, 3]), "device"),
    )
    case(
        "reverse='False' (a string)",
        lambda: S(pp.add, np.array([1.0, 2, 3]), reverse="False"),
        Error("reverse"),
    )
    case(
        "reverse=None",
        lambda: S(pp.add, np.array([1.0, 2, 3]), reverse=None),
        Either(Value([1.0, 3, 6]), "reverse"),
    )
    case(
        "reverse=np.True_",
        lambda: S(pp.add, np.array([1.0, 2, 3]), reverse=np.True_),
        Value([6.0, 5, 3]),
    )
    case("exclusive=2", lambda: S(pp.add, np.array([1.0, 2, 3]), exclusive=2), Error("exclusive"))
    case(
        "exclusive='no'",
        lambda: S(pp.add, np.array([1.0, 2, 3]), exclusive="no"),
        Error("exclusive"),
    )
    case("check='yes'", lambda: S(pp.add, np.array([1.0, 2, 3]), check="yes"), Error("check"))
    case(
        "exclusive and reverse",
        lambda: S(pp.add, np.arange(1, 6), exclusive=True, reverse=True),
        Value(np.array([14, 12, 9, 5, 0])),
    )
    case("big-endian float64", lambda: S(pp.add, x17().astype(">f8")), Value(ref17))
    case("negative stride", lambda: S(pp.add, x17()[::-1]), Value(lambda: cumsum64(x17()[::-1])))
    case("stride 3", lambda: S(pp.add, x17()[::3]), Value(lambda: cumsum64(x17()[::3])))
    case(
        "Fortran 2-D, axis 1",
        lambda: S(pp.add, np.asfortranarray(np.arange(6.0).reshape(2, 3)), axis=1),
        Value(np.array([[0.0, 1, 3], [3, 7, 12]])),
    )
    case(
        "Fortran 2-D, axis 0",
        lambda: S(pp.add, np.asfortranarray(np.arange(6.0).reshape(2, 3)), axis=0),
        Value(np.array([[0.0, 1, 2], [3, 5, 7]])),
    )
    case(
        "read-only broadcast view",
        lambda: S(pp.add, np.broadcast_to(np.arange(3.0), (2, 3)), axis=1),
        Value(np.array([[0.0, 1, 3], [0, 1, 3]])),
    )
    case(
        "shape (0, 5), axis 1", lambda: S(pp.add, np.zeros((0, 5)), axis=1), Value(np.zeros((0, 5)))
    )
    case(
        "shape (3, 0), axis 0", lambda: S(pp.add, np.zeros((3, 0)), axis=0), Value(np.zeros((3, 0)))
    )
    case(
        "1e308 + 1e308 overflows to inf (IEEE)",
        lambda: S(pp.add, np.array([1e308, 1e308, -1e308])),
        Value(np.array([1e308, np.inf, np.inf])),
    )
    case(
        "subnormals",
        lambda: S(pp.add, np.full(4, 5e-324)),
        Value(np.array([5e-324, 1e-323, 1.5e-323, 2e-323])),
    )
    case(
        "NaN in the middle",
        lambda: S(pp.add, np.array([1.0, np.nan, 2.0])),
        Value(np.array([1.0, np.nan, np.nan])),
    )
    case(
        "maximum with NaN",
        lambda: S(pp.maximum, np.array([1.0, np.nan, 5.0])),
        Value(np.array([1.0, np.nan, np.nan])),
    )
    case(
        "minimum of int16",
        lambda: S(pp.minimum, np.array([5, -3, 7, -9], np.int16)),
        Value(np.array([5, -3, -3, -9]), dtype="int16"),
    )
    case("logaddexp of int", lambda: S(pp.logaddexp, np.arange(3)), Error("elems"))
    case(
        "logaddexp of [inf, inf]",
        lambda: S(pp.logaddexp, np.array([np.inf, np.inf])),
        Value(np.array([np.inf, np.inf])),
    )
    case(
        "logaddexp of [1000, 1000, -inf]",
        lambda: S(pp.logaddexp, np.array([1000.0, 1000.0, -np.inf])),
        Value(np.array([1000.0, 1000.0 + math.log(2), 1000.0 + math.log(2)])),
    )
    case(
        "float32, 10^4 x 0.1",
        lambda: S(pp.add, np.full(10_000, 0.1, np.float32)),
        Value(
            lambda: cumsum64(np.full(10_000, np.float32(0.1))), rtol=1e4 * 2.0**-24, dtype="float32"
        ),
    )
    case(
        "float16 3000 ones (float32 inside)",
        lambda: S(pp.add, np.ones(3000, np.float16)),
        Value(
            lambda: np.arange(1, 3001).astype(np.float16).astype(np.float64),
            rtol=2**-11,
            dtype="float16",
        ),
    )
    case(
        "float16 overflow to inf on narrowing",
        lambda: S(pp.add, np.array([60000, 60000], np.float16)),
        Value(np.array([60000.0, np.inf])),
    )
    if ml_dtypes is not None:
        case(
            "ml_dtypes bfloat16",
            lambda: S(pp.add, np.ones(300, ml_dtypes.bfloat16)),
            Value(
                lambda: np.arange(1, 301).astype(ml_dtypes.bfloat16).astype(np.float64),
                rtol=2**-8,
                dtype="bfloat16",
            ),
        )
        case(
            "ml_dtypes float8_e4m3fn",
            lambda: S(pp.add, np.ones(3, ml_dtypes.float8_e4m3fn)),
            Either(Value([1.0, 2.0, 3.0]), "elems", "float8_e4m3fn"),
        )
        case(
            "ml_dtypes int4",
            lambda: S(pp.add, np.ones(3, ml_dtypes.int4)),
            Either(Value(np.array([1, 2, 3])), "elems", "int4"),
        )
    if torch is not None:
        case(
            "torch requires grad",
            lambda: S(pp.add, torch.arange(1.0, 4.0, requires_grad=True)),
            Value([1.0, 3.0, 6.0]),
        )
        case(
            "torch gradient of the scan",
            lambda: (lambda t: (S(pp.add, t).sum().backward(), t.grad)[1])(
                torch.ones(4, requires_grad=True)
            ),
            Value([4.0, 3.0, 2.0, 1.0]),
        )
        case(
            "torch bfloat16",
            lambda: S(pp.add, torch.ones(300, dtype=torch.bfloat16)),
            Value(
                lambda: (
                    np.arange(1, 301).astype(ml_dtypes.bfloat16).astype(np.float64)
                    if ml_dtypes
                    else np.arange(1, 301)
                ),
                rtol=2**-8,
            ),
        )
        case("torch int64", lambda: S(pp.add, torch.arange(5)), Value(np.array([0, 1, 3, 6, 10])))
        case(
            "torch non-contiguous",
            lambda: S(pp.add, torch.arange(12.0).reshape(3, 4).t(), axis=1),
            Value(lambda: np.cumsum(np.arange(12.0).reshape(3, 4).T, axis=1)),
        )
        case(
            "numpy and torch leaves mixed",
            lambda: S(pp.linear_recurrence, (np.ones(4), torch.ones(4, dtype=torch.float64))),
            Error("elems"),
        )
    if pd is not None:
        case(
            "pandas Series",
            lambda: S(pp.add, pd.Series([1.0, 2.0, 3.0])),
            Either(Value([1.0, 3.0, 6.0]), "elems"),
        )
    case(
        "linear_recurrence float32/float64 leaves",
        lambda: S(pp.linear_recurrence, (np.ones(3, np.float32), np.ones(3))),
        Error("elems"),
    )
    case(
        "linear_recurrence lengths 3 and 4",
        lambda: S(pp.linear_recurrence, (np.ones(3), np.ones(4))),
        Error("elems"),
    )
    case(
        "linear_recurrence three leaves",
        lambda: S(pp.linear_recurrence, (np.ones(3), np.ones(3), np.ones(3))),
        Error("elems"),
    )
    case("linear_recurrence one leaf", lambda: S(pp.linear_recurrence, np.ones(3)), Error("elems"))
    case(
        "linear_recurrence dict",
        lambda: S(pp.linear_recurrence, {"a": np.full(3, 0.5), "b": np.ones(3)}),
        Value(lambda: dict(zip("ab", linrec64(np.full(3, 0.5), np.ones(3))))),
    )
    case(
        "linear_recurrence namedtuple",
        lambda: S(
            pp.linear_recurrence, collections.namedtuple("AB", "a b")(np.full(3, 0.5), np.ones(3))
        ),
        Value(lambda: linrec64(np.full(3, 0.5), np.ones(3))),
    )
    case(
        "linear_recurrence with inf coefficient at 0",
        lambda: S(pp.linear_recurrence, (np.array([np.inf, 0.5]), np.array([2.0, 1.0])))[1],
        Value(np.array([2.0, 2.0])),
    )
    case(
        "linear_recurrence 1e-300 and 1e300",
        lambda: S(pp.linear_recurrence, (np.full(4, 1e-300), np.full(4, 1e300)))[1],
        Value(lambda: linrec64(np.full(4, 1e-300), np.full(4, 1e300))[1]),
    )

    def mm_ref(ms: list[np.ndarray], reverse: bool) -> list[np.ndarray]:
        out = []
        for t in range(len(ms)):
            seq = ms[t:][::-1] if reverse else ms[: t + 1]
            p = np.eye(2)
            for m in seq:
                p = p @ m
            out.append(p)
        return [
            np.array([p[0, 0] for p in out]),
            np.array([p[0, 1] for p in out]),
            np.array([p[1, 0] for p in out]),
            np.array([p[1, 1] for p in out]),
        ]

    mats = lambda: tuple(rng(5).normal(size=(4, 6)))  # noqa: E731
    mlist = lambda: [np.array([[a, b], [c, d]]) for a, b, c, d in zip(*mats())]  # noqa: E731
    case(
        "matmul2x2 (non-commutative)",
        lambda: S(pp.matmul2x2, mats()),
        Value(lambda: mm_ref(mlist(), False), rtol=1e-12),
    )
    case(
        "matmul2x2 reverse",
        lambda: S(pp.matmul2x2, mats(), reverse=True),
        Value(lambda: mm_ref(mlist(), True), rtol=1e-12),
    )
    case(
        "reset wrong length",
        lambda: S(pp.add, np.ones(3), reset=np.array([True, False])),
        Error("reset"),
    )
    case("reset of ints", lambda: S(pp.add, np.ones(3), reset=np.array([1, 0, 2])), Error("reset"))
    case(
        "reset of floats",
        lambda: S(pp.add, np.ones(3), reset=np.array([1.0, 0.0, 0.5])),
        Error("reset"),
    )
    case(
        "reset list of bools",
        lambda: S(pp.add, np.arange(1, 6), reset=[True, False, False, True, False]),
        Either(Value(np.array([1, 3, 6, 4, 9])), "reset"),
    )
    case(
        "reset bool array",
        lambda: S(pp.add, np.arange(1, 6), reset=np.array([True, False, False, True, False])),
        Value(np.array([1, 3, 6, 4, 9])),
    )
    case(
        "reset all True",
        lambda: S(pp.add, np.arange(1.0, 5.0), reset=np.ones(4, bool)),
        Value(np.arange(1.0, 5.0)),
    )
    case(
        "reset with exclusive",
        lambda: S(
            pp.add,
            np.arange(1, 6),
            reset=np.array([True, False, False, True, False]),
            exclusive=True,
        ),
        Value(np.array([0, 1, 3, 0, 4])),
    )
    case(
        "reset masked",
        lambda: S(pp.add, np.ones(3), reset=np.ma.array([True, False, False], mask=[0, 1, 0])),
        Error("reset"),
    )
    case(
        "reset per row, 2-D",
        lambda: S(
            pp.add,
            np.ones((2, 3)),
            axis=1,
            reset=np.array([[True, False, True], [True, True, False]]),
        ),
        Value(np.array([[1.0, 2, 1], [1, 1, 2]])),
    )
    case("identity=1 with add", lambda: S(pp.add, np.ones(3), identity=1), Error("identity"))
    case(
        "identity=0 with add",
        lambda: S(pp.add, np.ones(3), identity=0, exclusive=True),
        Value([0.0, 1.0, 2.0]),
    )
    case(
        "exclusive callable without identity",
        lambda: S(lambda a, b: a + b, np.ones(3), exclusive=True),
        Error("identity"),
    )
    case(
        "exclusive callable with identity",
        lambda: S(lambda a, b: a + b, np.ones(3), exclusive=True, identity=0.0),
        Value([0.0, 1.0, 2.0]),
    )
    case(
        "identity of the wrong structure",
        lambda: S(
            lambda a, b: (a[0] * b[0], b[0] * a[1] + b[1]),
            (np.ones(3), np.ones(3)),
            exclusive=True,
            identity={"x": 1},
        ),
        Error("identity"),
    )
    case(
        "identity of the wrong shape",
        lambda: S(lambda a, b: a + b, np.ones((2, 3)), exclusive=True, identity=np.zeros(5)),
        Error("identity"),
    )
    case("fn=None", lambda: S(None, np.ones(3)), Error("fn"))
    case("fn=np.add", lambda: S(np.add, np.ones(3)), Value([1.0, 2.0, 3.0]))
    case(
        "fn=np.subtract (not associative)",
        lambda: S(np.subtract, np.arange(5.0)),
        Error("fn", "subtract"),
    )
    case(
        "fn returns a shorter array",
        lambda: S(lambda a, b: (a + b)[:1], np.ones(4), check=False),
        Error("fn"),
    )
    case("fn returns a scalar", lambda: S(lambda a, b: 1.0, np.ones(4)), Error("fn"))
    case(
        "masked array add",
        lambda: S(pp.add, np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])),
        Value(lambda: np.ma.array([1.0, 1.0, 4.0], mask=[0, 1, 0])),
    )
    case(
        "masked array, callable, no identity",
        lambda: S(lambda a, b: a + b, np.ma.array([1.0, 2.0], mask=[0, 1])),
        Error("identity"),
    )
    case(
        "np.matrix",
        lambda: S(pp.add, np.matrix([[1.0, 2.0, 3.0]]), axis=1),
        Value(np.array([[1.0, 3.0, 6.0]])),
    )
    case("empty tuple", lambda: S(pp.add, ()), Error("elems"))
    case(
        "tuple of one array",
        lambda: S(pp.add, (np.array([1.0, 2.0]),)),
        Value((np.array([1.0, 3.0]),)),
    )
    if da is not None:
        case(
            "dask array",
            lambda: S(pp.add, da.from_array(np.arange(10.0), chunks=3)).compute(),
            Value(lambda: cumsum64(np.arange(10.0))),
        )
        case(
            "dask with device='cpu'",
            lambda: S(pp.add, da.from_array(np.arange(10.0), chunks=3), device="cpu"),
            Error("device", "elems"),
        )
        case(
            "dask with unknown chunks",
            lambda: S(pp.add, (lambda a: a[a > 2])(da.from_array(np.arange(10.0), chunks=3))),
            Error("elems"),
        )


def monoid_cases() -> None:
    area("Monoid")
    case("Monoid(combine=5)", lambda: pp.Monoid(5, 0), Error("combine"))
    case(
        "identity of 2 for a 1-arity combine",
        lambda: pp.Monoid(lambda a, b: a + b, (0, 0)),
        Error("combine", "identity"),
    )
    case(
        "combine returns 2 values for arity 1",
        lambda: pp.Monoid(lambda a, b: (a, b), 0),
        Error("combine"),
    )
    case(
        "@monoid without identity, used in a scan",
        lambda: pp.associative_scan(pp.monoid(lambda a, b: a + b), np.ones(3)),
        Error("monoid", "identity", "fn"),
    )
    case(
        "kinds='f' monoid given ints",
        lambda: pp.associative_scan(pp.Monoid(lambda a, b: a + b, 0.0, kinds="f"), np.arange(3)),
        Error("elems"),
    )
    case(
        "combine numba cannot compile",
        lambda: pp.associative_scan(
            pp.Monoid(lambda a, b: {}.get(a, b), 0.0, name="dictget"), np.ones(3)
        ),
        Error("combine", "dictget"),
    )
    case(
        "custom monoid (affine)",
        lambda: pp.associative_scan(
            pp.Monoid(lambda a1, b1, a2, b2: (a1 * a2, a2 * b1 + b2), (1.0, 0.0)),
            (np.full(3, 0.5), np.ones(3)),
        )[1],
        Value([1.0, 1.5, 1.75]),
    )
    case("Monoid called on lists", lambda: pp.add([1.0], [2.0]), Either(Value([3.0]), "a", "b"))
    case("Monoid.identity(dtype='banana')", lambda: pp.maximum.identity("banana"), Error("dtype"))


def topk_cases() -> None:
    area("topk")
    T = pp.topk
    x5 = lambda: np.array([3.0, 1.0, 4.0, 1.0, 5.0])  # noqa: E731
    case("basic", lambda: T(x5(), 3), Value(lambda: topk_ref(x5(), 3)))
    case(
        "list instead of an array",
        lambda: T([3, 1, 4], 2),
        Either(Value(lambda: topk_ref([3, 1, 4], 2)), "x"),
    )
    case("k=-1", lambda: T(x5(), -1), Error("k"))
    case("k=2.0", lambda: T(x5(), 2.0), Error("k"))
    case("k=True", lambda: T(x5(), True), Error("k"))
    case("k=None", lambda: T(x5(), None), Error("k"))
    case("k='2'", lambda: T(x5(), "2"), Error("k"))
    case("k=10**30 (> n: all)", lambda: T(x5(), 10**30), Value(lambda: topk_ref(x5(), 5)))
    case("k=np.int64(2)", lambda: T(x5(), np.int64(2)), Value(lambda: topk_ref(x5(), 2)))
    case("k=0", lambda: T(x5(), 0), Value((np.zeros(0), np.zeros(0, np.int64))))
    case("axis=3 on 1-D", lambda: T(x5(), 2, axis=3), Error("axis"))
    case("axis=0.0", lambda: T(x5(), 2, axis=0.0), Error("axis"))
    case(
        "axis=-2 on 2-D",
        lambda: T(np.arange(12.0).reshape(3, 4) % 5, 2, axis=-2),
        Value(lambda: topk_rows(np.arange(12.0).reshape(3, 4) % 5, 2, axis=0)),
    )
    case("largest='False'", lambda: T(x5(), 2, largest="False"), Error("largest"))
    case("sorted='yes'", lambda: T(x5(), 2, sorted="yes"), Error("sorted"))
    case("nan='smallest'", lambda: T(x5(), 2, nan="smallest"), Error("nan"))
    case("method='gpu'", lambda: T(x5(), 2, method="gpu"), Error("method"))
    case("device='cuda' on numpy", lambda: T(x5(), 2, device="cuda"), Error("device", "x"))
    case(
        "NaN ignored, 1-D (fewer than k)",
        lambda: T(np.array([np.nan, 1.0, 2.0]), 3),
        Value(lambda: topk_ref([np.nan, 1.0, 2.0], 3)),
    )
    case(
        "nan='largest'",
        lambda: T(np.array([np.nan, 1.0, 2.0]), 2, nan="largest"),
        Value(lambda: topk_ref([np.nan, 1.0, 2.0], 2, nan="largest")),
    )
    case(
        "nan='largest', largest=False",
        lambda: T(np.array([np.nan, 1.0, 2.0]), 3, largest=False, nan="largest"),
        Value(lambda: topk_ref([np.nan, 1.0, 2.0], 3, False, "largest")),
    )
    case(
        "ragged NaN rows, 2-D",
        lambda: T(np.array([[np.nan, 1.0, 2.0], [1, 2, 3]]), 3),
        Error("k", "nan"),
    )
    case(
        "inf and -inf",
        lambda: T(np.array([np.inf, -np.inf, 1.0]), 3),
        Value(lambda: topk_ref([np.inf, -np.inf, 1.0], 3)),
    )
    case("complex", lambda: T(np.array([1 + 1j, 2]), 1), Error("x", "dtype"))
    case("object", lambda: T(np.array([1, 2], dtype=object), 1), Error("x", "dtype"))
    case("strings", lambda: T(np.array(["a", "b"]), 1), Error("x", "dtype"))
    case("structured", lambda: T(np.zeros(3, dtype=[("a", "f8")]), 2), Error("x", "dtype"))
    case("timedelta64", lambda: T(np.array([1, 2], "timedelta64[s]"), 1), Error("x", "dtype"))
    case(
        "bool",
        lambda: T(np.array([False, True, True]), 2),
        Value((np.array([True, True]), np.array([1, 2]))),
    )
    case(
        "big-endian keeps dtype", lambda: T(x5().astype(">f8"), 2), Value(lambda: topk_ref(x5(), 2))
    )
    case(
        "float16",
        lambda: T(x5().astype(np.float16), 2),
        Value(lambda: topk_ref(x5(), 2), dtype="float16"),
    )
    case(
        "uint64 extremes",
        lambda: T(np.array([2**64 - 1, 0, 2**63], np.uint64), 2),
        Value((np.array([2**64 - 1, 2**63], dtype=object), np.array([0, 2]))),
    )
    case(
        "int64 extremes, smallest",
        lambda: T(np.array([-(2**63), 0, 2**63 - 1]), 3, largest=False),
        Value((np.array([-(2**63), 0, 2**63 - 1], dtype=object), np.array([0, 1, 2]))),
    )
    case(
        "1e300 and 1e-300 magnitudes",
        lambda: T(np.array([1e-300, 1e300, -1e300, 5e-324]), 2),
        Value(lambda: topk_ref([1e-300, 1e300, -1e300, 5e-324], 2)),
    )
    case(
        "-0.0 and 0.0 tie by index",
        lambda: T(np.array([-0.0, 0.0]), 1),
        Value((np.array([-0.0]), np.array([0]))),
    )
    if ml_dtypes is not None:
        case(
            "ml_dtypes bfloat16",
            lambda: T(x5().astype(ml_dtypes.bfloat16), 2),
            Value(lambda: topk_ref(x5(), 2), dtype="bfloat16"),
        )
        case(
            "ml_dtypes float8_e4m3fn",
            lambda: T(np.array([1, 3, 2]).astype(ml_dtypes.float8_e4m3fn), 2),
            Value((np.array([3.0, 2.0]), np.array([1, 2]))),
        )
        case(
            "ml_dtypes int4",
            lambda: T(np.array([1, 3, 2]).astype(ml_dtypes.int4), 2),
            Value((np.array([3, 2]), np.array([1, 2]))),
        )
    if torch is not None:
        case(
            "torch requires grad",
            lambda: T(torch.tensor([1.0, 3.0, 2.0], requires_grad=True), 2),
            Value((np.array([3.0, 2.0]), np.array([1, 2]))),
        )
        case(
            "torch bfloat16",
            lambda: T(torch.tensor([1.0, 3.0, 2.0], dtype=torch.bfloat16), 2),
            Value((np.array([3.0, 2.0]), np.array([1, 2]))),
        )
        case(
            "torch int32",
            lambda: T(torch.tensor([1, 3, 2], dtype=torch.int32), 2),
            Value((np.array([3, 2]), np.array([1, 2]))),
        )
        case(
            "out= torch for a numpy x",
            lambda: T(
                x5(),
                2,
                out=(torch.empty(2, dtype=torch.float64), torch.empty(2, dtype=torch.int64)),
            ),
            Error("out"),
        )
    case(
        "out of the wrong shape",
        lambda: T(x5(), 2, out=(np.empty(3), np.empty(3, np.int64))),
        Error("out"),
    )
    case(
        "out of the wrong dtype",
        lambda: T(x5(), 2, out=(np.empty(2, np.float32), np.empty(2, np.int64))),
        Error("out"),
    )
    case(
        "out read-only",
        lambda: T(x5(), 2, out=(np.broadcast_to(np.empty(1), (2,)), np.empty(2, np.int64))),
        Error("out"),
    )
    case("out not a pair", lambda: T(x5(), 2, out=np.empty(2)), Error("out"))

    def aliased() -> Any:
        x = x5()
        return T(x, 2, out=(x[:2], np.empty(2, np.int64)))

    case("out aliasing x", aliased, Value(lambda: topk_ref(x5(), 2)))
    case("negative stride", lambda: T(x5()[::-1], 2), Value(lambda: topk_ref(x5()[::-1], 2)))
    case(
        "Fortran 2-D, axis 0",
        lambda: T(np.asfortranarray(np.arange(12.0).reshape(3, 4) % 7), 2, axis=0),
        Value(lambda: topk_rows(np.arange(12.0).reshape(3, 4) % 7, 2, axis=0)),
    )
    case(
        "non-contiguous 2-D rows",
        lambda: T((np.arange(40.0).reshape(4, 10) % 7)[:, ::3], 2),
        Value(lambda: topk_rows((np.arange(40.0).reshape(4, 10) % 7)[:, ::3], 2)),
    )
    case(
        "read-only",
        lambda: T(np.broadcast_to(x5(), (2, 5)), 2),
        Value(lambda: topk_rows(np.broadcast_to(x5(), (2, 5)), 2)),
    )
    case("0-d", lambda: T(np.array(5.0), 1), Value((np.array(5.0), np.array(0))))
    case("0-d with k=2", lambda: T(np.array(5.0), 2), Error("k"))
    case("empty", lambda: T(np.zeros(0), 2), Value((np.zeros(0), np.zeros(0, np.int64))))
    case(
        "rows of length 0",
        lambda: T(np.zeros((3, 0)), 2),
        Value((np.zeros((3, 0)), np.zeros((3, 0), np.int64))),
    )
    case("length 1", lambda: T(np.array([7.0]), 3), Value((np.array([7.0]), np.array([0]))))
    if pd is not None:
        case(
            "pandas Series",
            lambda: T(pd.Series(x5()), 2),
            Either(Value(lambda: topk_ref(x5(), 2)), "x"),
        )
    case(
        "np.matrix",
        lambda: T(np.matrix([[1.0, 3.0, 2.0]]), 2),
        Value((np.array([[3.0, 2.0]]), np.array([[1, 2]]))),
    )
    case(
        "masked array",
        lambda: T(np.ma.array([1.0, 5.0, 3.0], mask=[0, 1, 0]), 2),
        Value((np.array([3.0, 1.0]), np.array([2, 0]))),
    )
    case(
        "ascending 5000 float32, k=100, unsorted",
        lambda: (lambda r: (np.sort(r[0])[::-1], np.sort(r[1])[::-1]))(
            T(np.arange(5000, dtype=np.float32), 100, sorted=False)
        ),
        Value((np.arange(4999, 4899, -1.0), np.arange(4999, 4899, -1))),
    )


def topk_summary_cases() -> None:
    area("TopK / merge_topk")
    E = pp.TopK.empty
    res = lambda t: t.result()  # noqa: E731
    case("k=-1", lambda: E(-1, np.float64), Error("k"))
    case("k=2.5", lambda: E(2.5, np.float64), Error("k"))
    case(
        "dtype='float32' (a string)",
        lambda: res(E(2, "float32").update(np.array([1.0, 5.0, 3.0], np.float32))),
        Value((np.array([5.0, 3.0]), np.array([1, 2])), dtype=None),
    )
    case("dtype='banana'", lambda: E(3, "banana"), Error("dtype"))
    case("dtype=complex128", lambda: E(3, np.complex128), Error("dtype"))
    case(
        "dtype=None",
        lambda: res(E(3, None).update([1.0])),
        Either(Value((np.array([1.0]), np.array([0]))), "dtype"),
    )
    if torch is not None:
        case(
            "dtype=torch.float32",
            lambda: E(3, torch.float32),
            Either(Check(lambda t: (t.dtype == np.float32, str(t.dtype))), "dtype"),
        )
    case("start=1.5", lambda: E(3, np.float64, start=1.5), Error("start"))
    case("start=2**63", lambda: E(3, np.float64, start=2**63), Error("start"))
    case("largest='no'", lambda: E(3, np.float64, largest="no"), Error("largest"))
    case("nan='drop'", lambda: E(3, np.float64, nan="drop"), Error("nan"))
    case(
        "update with a list",
        lambda: res(E(2, np.float64).update([1.0, 3.0, 2.0])),
        Value((np.array([3.0, 2.0]), np.array([1, 2]))),
    )
    case(
        "list int 2^24+1 into float32",
        lambda: E(2, np.float32).update([16777217, 1]),
        Error("scores"),
    )
    case(
        "float64 array into float32",
        lambda: E(2, np.float32).update(np.array([1.0, 2.0])),
        Error("scores"),
    )
    case(
        "int64 2^53+1 into float64 (inexact)",
        lambda: res(E(2, np.float64).update(np.array([2**53 + 1, 1]))),
        Either(Value((np.array([2**53 + 1, 1], dtype=object), np.array([0, 1]))), "scores"),
    )
    case(
        "uint64 2^64-1 into float64 (inexact)",
        lambda: res(E(1, np.float64).update(np.array([2**64 - 1], np.uint64))),
        Either(Value((np.array([2**64 - 1], dtype=object), np.array([0]))), "scores"),
    )
    case(
        "int32 into float64",
        lambda: res(E(2, np.float64).update(np.array([5, 1, 7], np.int32))),
        Value((np.array([7.0, 5.0]), np.array([2, 0]))),
    )
    case(
        "uint8 into float32",
        lambda: res(E(2, np.float32).update(np.array([5, 1, 7], np.uint8))),
        Value((np.array([7.0, 5.0]), np.array([2, 0]))),
    )
    case(
        "int64 into float32",
        lambda: E(2, np.float32).update(np.array([5, 1])),
        Either(Value((np.array([5.0, 1.0]), np.array([0, 1]))), "scores"),
    )
    case("2-D scores", lambda: E(2, np.float64).update(np.ones((2, 2))), Error("scores"))
    case("0-d scores", lambda: E(2, np.float64).update(np.array(3.0)), Error("scores"))
    case(
        "Python scalar scores",
        lambda: E(2, np.float64).update(3.0),
        Either(Value((np.array([3.0]), np.array([0]))), "scores"),
    )
    case(
        "generator scores", lambda: E(2, np.float64).update(x for x in [1.0, 2.0]), Error("scores")
    )
    if torch is not None:
        case(
            "torch scores",
            lambda: res(E(2, np.float32).update(torch.tensor([1.0, 5.0, 3.0]))),
            Value((np.array([5.0, 3.0]), np.array([1, 2]))),
        )
        case(
            "torch scores requiring grad",
            lambda: res(E(2, np.float32).update(torch.tensor([1.0, 5.0, 3.0], requires_grad=True))),
            Value((np.array([5.0, 3.0]), np.array([1, 2]))),
        )
    if pd is not None:
        case(
            "pandas Series scores",
            lambda: res(E(2, np.float64).update(pd.Series([1.0, 5.0, 3.0]))),
            Value((np.array([5.0, 3.0]), np.array([1, 2]))),
        )
    case(
        "ids of floats",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0, 3.0]), ids=np.array([1.0, 2.0, 3.0])),
        Error("ids"),
    )
    case(
        "ids of the wrong length",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0, 3.0]), ids=np.array([1, 2])),
        Error("ids"),
    )
    case(
        "ids uint64 >= 2^63",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0]), ids=np.array([2**63, 1], np.uint64)),
        Error("ids"),
    )
    case(
        "ids as a list",
        lambda: res(E(2, np.float64).update(np.array([1.0, 5.0]), ids=[10, 20])),
        Value((np.array([5.0, 1.0]), np.array([20, 10]))),
    )
    case(
        "ids masked",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0]), ids=np.ma.array([1, 2], mask=[0, 1])),
        Error("ids"),
    )
    case(
        "ids and offset",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0]), ids=[10, 20], offset=3),
        Error("ids", "offset"),
    )
    case(
        "offset=-5",
        lambda: res(E(2, np.float64).update(np.array([1.0, 5.0]), offset=-5)),
        Value((np.array([5.0, 1.0]), np.array([-4, -5]))),
    )
    case(
        "offset past int64",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0]), offset=2**63 - 1),
        Error("offset"),
    )
    case(
        "offset=1.0",
        lambda: E(2, np.float64).update(np.array([1.0, 5.0]), offset=1.0),
        Error("offset"),
    )
    case(
        "NaN scores ignored",
        lambda: res(E(2, np.float64).update(np.array([np.nan, 5.0, 1.0]))),
        Value((np.array([5.0, 1.0]), np.array([1, 2]))),
    )
    case("NaN into an int TopK", lambda: E(2, np.int64).update([float("nan")]), Error("scores"))
    case(
        "big-endian scores",
        lambda: res(E(2, np.float64).update(np.array([1.0, 5.0, 3.0]).astype(">f8"))),
        Value((np.array([5.0, 3.0]), np.array([1, 2]))),
    )
    case(
        "negative-stride scores",
        lambda: res(E(2, np.float64).update(np.array([1.0, 5.0, 3.0, 7.0])[::-2])),
        Value((np.array([7.0, 5.0]), np.array([0, 1]))),
    )
    case(
        "same positions numbered twice",
        lambda: (
            E(2, np.float64)
            .update(np.array([1.0, 5.0]), offset=0)
            .update(np.array([9.0, 9.0]), offset=0)
        ),
        Error("offset"),
    )
    case(
        "bool into int64",
        lambda: res(E(2, np.int64).update(np.array([True, False]))),
        Value((np.array([1, 0]), np.array([0, 1]))),
    )
    case(
        "uint64 into int64",
        lambda: E(2, np.int64).update(np.array([2**63], np.uint64)),
        Error("scores"),
    )
    case("list with 2**63 into int64", lambda: E(2, np.int64).update([2**63]), Error("scores"))
    case("list with 1.5 into int64", lambda: E(2, np.int64).update([1.5]), Error("scores"))
    case(
        "np.matrix scores",
        lambda: E(2, np.float64).update(np.matrix([[1.0, 5.0, 3.0]])),
        Either(Value((np.array([5.0, 3.0]), np.array([1, 2]))), "scores"),
    )
    case(
        "masked scores",
        lambda: res(E(2, np.float64).update(np.ma.array([1.0, 5.0, 3.0], mask=[0, 1, 0]))),
        Value((np.array([3.0, 1.0]), np.array([2, 0]))),
    )
    case(
        "k=0 summary",
        lambda: res(E(0, np.float64).update(np.ones(3))),
        Value((np.zeros(0), np.zeros(0, np.int64))),
    )
    case(
        "merge k=2 with k=3", lambda: pp.merge_topk(E(2, np.float64), E(3, np.float64)), Error("k")
    )
    case(
        "merge float64 with float32",
        lambda: pp.merge_topk(E(2, np.float64), E(2, np.float32)),
        Error("dtype"),
    )
    case(
        "merge largest with smallest",
        lambda: pp.merge_topk(E(2, np.float64), E(2, np.float64, largest=False)),
        Error("largest"),
    )
    case("merge with a list", lambda: pp.merge_topk(E(2, np.float64), [1, 2]), Error("b"))
    case(
        "merge overlapping positions",
        lambda: pp.merge_topk(
            E(2, np.float64).update(np.ones(3)), E(2, np.float64).update(np.ones(3))
        ),
        Error("start", "offset"),
    )
    case(
        "merge of disjoint streams",
        lambda: res(
            pp.merge_topk(
                E(2, np.float64).update(np.array([1.0, 9.0])),
                E(2, np.float64, start=2).update(np.array([9.0, 3.0])),
            )
        ),
        Value((np.array([9.0, 9.0]), np.array([1, 2]))),
    )
    case("from_bytes(b'garbage')", lambda: pp.TopK.from_bytes(b"garbage"), Error("bytes", "data"))
    case("from_bytes(str)", lambda: pp.TopK.from_bytes("garbage"), Error("data"))
    case("from_bytes(None)", lambda: pp.TopK.from_bytes(None), Error("data"))
    case(
        "from_bytes truncated",
        lambda: pp.TopK.from_bytes(E(2, np.float64).update(np.ones(3)).to_bytes()[:-3]),
        Error("bytes", "data"),
    )

    def resealed(data: bytes, at: int, value: bytes) -> bytes:
        """``data`` with ``value`` written at ``at`` and its CRC-32 recomputed."""
        import struct
        import zlib

        body = data[:at] + value + data[at + len(value) : -4]
        return body + struct.pack("<I", zlib.crc32(body))

    two = E(4, np.float64).update(np.array([1.0, 2.5])).to_bytes()
    scores_at = 6 + 2 + 8 * 3 + 2 + 1 + 3 + 8  # header, dtype code '<f8', count
    case(
        "from_bytes unsorted pairs, valid checksum",
        lambda: pp.TopK.from_bytes(resealed(two, scores_at, np.array([1.0, 2.5]).tobytes())),
        Error("bytes", "data"),
    )
    case(
        "from_bytes NaN-policy byte 2, valid checksum",
        lambda: pp.TopK.from_bytes(resealed(two, 6 + 2 + 8 * 3 + 1, b"\x02")),
        Error("bytes", "data"),
    )
    case(
        "from_bytes(memoryview)",
        lambda: res(
            pp.TopK.from_bytes(memoryview(E(2, np.float64).update(np.array([1.0, 4.0])).to_bytes()))
        ),
        Value((np.array([4.0, 1.0]), np.array([1, 0]))),
    )
    case(
        "pickle round trip",
        lambda: res(
            __import__("pickle").loads(
                __import__("pickle").dumps(
                    E(2, np.float32).update(np.array([2.0, 8.0], np.float32))
                )
            )
        ),
        Value((np.array([8.0, 2.0]), np.array([1, 0]))),
    )


def lowrank_cases() -> None:
    area("low_rank")
    LR = pp.low_rank
    M = lambda: rng(2).normal(size=(20, 3)) @ rng(3).normal(size=(3, 15))  # noqa: E731
    case("rank-3 matrix, rank=3", lambda: LR(M(), rank=3), lowrank_check(M(), 3))
    case("rtol=1e-8", lambda: LR(M(), rtol=1e-8), lowrank_check(M(), 3))
    case("complex numpy", lambda: LR(M() + 1j * M(), rank=2), Error("M"))
    if torch is not None:
        case("complex torch", lambda: LR(torch.tensor(M() + 1j * M()), rank=2), Error("M"))
        case(
            "torch requires grad",
            lambda: LR(torch.tensor(M(), requires_grad=True), rank=3),
            Error("M"),
        )
        case(
            "torch float32",
            lambda: LR(torch.tensor(M(), dtype=torch.float32), rank=3),
            Check(lambda L: lowrank_check(M(), 3, 1e-5).pred(L)),
        )
    case("entries ~1e300", lambda: LR(M() * 1e300, rank=3), lowrank_check(M() * 1e300, 3))
    case(
        "entries ~1e306",
        lambda: LR(M() * 1e306, rank=3),
        Either(lowrank_check(M() * 1e306, 3), "M"),
    )
    case("entries ~1e-300", lambda: LR(M() * 1e-300, rank=3), lowrank_check(M() * 1e-300, 3))
    case(
        "subnormal entries ~1e-315",
        lambda: LR(M() * 1e-315, rank=3),
        Either(lowrank_check(M() * 1e-315, 3, 1e-6), "M"),
    )
    case("rank=0", lambda: LR(M(), rank=0), Error("rank"))
    case("rank=100 > min(m, n)", lambda: LR(M(), rank=100), Error("rank"))
    case("rank=2.0", lambda: LR(M(), rank=2.0), Error("rank"))
    case("rank=True", lambda: LR(M(), rank=True), Error("rank"))
    case("neither rank nor rtol", lambda: LR(M()), Error("rank", "rtol"))
    case("rtol=0", lambda: LR(M(), rtol=0), Error("rtol"))
    case("rtol=1", lambda: LR(M(), rtol=1), Error("rtol"))
    case("rtol=nan", lambda: LR(M(), rtol=float("nan")), Error("rtol"))
    case("rtol='1e-3'", lambda: LR(M(), rtol="1e-3"), Error("rtol"))
    case("1-D M", lambda: LR(np.ones(5), rank=1), Error("M"))
    case("3-D M", lambda: LR(np.ones((2, 2, 2)), rank=1), Error("M"))
    case("list of lists", lambda: LR(M().tolist(), rank=3), lowrank_check(M(), 3))
    case("NaN entry", lambda: LR(np.where(M() > 1, np.nan, M()), rank=3), Error("M"))
    case("inf entry", lambda: LR(np.where(M() > 1, np.inf, M()), rank=3), Error("M"))
    case(
        "bool matrix",
        lambda: LR(M() > 0, rank=3),
        Check(lambda L: (L.rank == 3 and L.U.dtype == np.float64, f"rank {L.rank}, {L.U.dtype}")),
    )
    case(
        "object matrix", lambda: LR(M().astype(object), rank=3), Either(lowrank_check(M(), 3), "M")
    )
    case("string matrix", lambda: LR(np.array([["a", "b"]]), rank=1), Error("M"))
    case("seed='abc'", lambda: LR(M(), rank=3, seed="abc"), Error("seed"))
    case("seed=-1", lambda: LR(M(), rank=3, seed=-1), Error("seed"))
    case("seed=1.5", lambda: LR(M(), rank=3, seed=1.5), Error("seed"))
    case(
        "seed=Generator",
        lambda: LR(M(), rank=3, seed=np.random.default_rng(9)),
        lowrank_check(M(), 3),
    )
    case("oversample=-1", lambda: LR(M(), rank=3, oversample=-1), Error("oversample"))
    case("power_iters=1.5", lambda: LR(M(), rank=3, power_iters=1.5), Error("power_iters"))
    case("block=0", lambda: LR(M(), rtol=0.1, block=0), Error("block"))
    case("empty (0, 5), rank=1", lambda: LR(np.zeros((0, 5)), rank=1), Error("rank"))
    case(
        "empty (0, 5), rtol",
        lambda: LR(np.zeros((0, 5)), rtol=0.1),
        Check(lambda L: (L.rank == 0 and L.shape == (0, 5), repr(L))),
    )
    case(
        "zero matrix, rtol",
        lambda: LR(np.zeros((5, 5)), rtol=0.1),
        Check(lambda L: (L.rank == 0, repr(L))),
    )
    case("1 x 1", lambda: LR(np.array([[3.0]]), rank=1), lowrank_check(np.array([[3.0]]), 1))
    case(
        "float16",
        lambda: LR(M().astype(np.float16), rank=3),
        Check(lambda L: lowrank_check(M().astype(np.float16).astype(np.float64), 3, 1e-5).pred(L)),
    )
    if ml_dtypes is not None:
        case(
            "bfloat16",
            lambda: LR(M().astype(ml_dtypes.bfloat16), rank=3),
            Check(
                lambda L: lowrank_check(
                    M().astype(ml_dtypes.bfloat16).astype(np.float64), 3, 1e-5
                ).pred(L)
            ),
        )
    case("big-endian", lambda: LR(M().astype(">f8"), rank=3), lowrank_check(M(), 3))
    case(
        "Fortran order, negative strides",
        lambda: LR(np.asfortranarray(M())[::-1, ::-1], rank=3),
        lowrank_check(M()[::-1, ::-1], 3),
    )
    case(
        "rank = min(m, n)",
        lambda: LR(rng(4).normal(size=(6, 4)), rank=4),
        lowrank_check(rng(4).normal(size=(6, 4)), 4),
    )
    if pd is not None:
        case("pandas DataFrame", lambda: LR(pd.DataFrame(M()), rank=3), lowrank_check(M(), 3))
    Op = pp.separability.MatvecOperator
    case(
        "MatvecOperator, identity",
        lambda: LR(Op((5, 5), lambda x: x, lambda y: y), rank=2),
        Check(lambda L: (np.allclose(L.s, 1.0), f"s={L.s}")),
    )
    case(
        "matvec returning the wrong shape",
        lambda: LR(Op((5, 4), lambda x: np.ones(3), lambda y: y), rank=2),
        Error("matvec", "M"),
    )
    case(
        "matvec returning NaN",
        lambda: LR(Op((5, 4), lambda x: np.full((5, x.shape[1]), np.nan), lambda y: y), rank=2),
        Error("matvec", "M"),
    )
    case(
        "MatvecOperator shape (-1, 2)",
        lambda: Op((-1, 2), lambda x: x, lambda y: y),
        Error("shape"),
    )
    case("L @ x of the wrong length", lambda: LR(M(), rank=3) @ np.ones(3), Error("x"))
    case(
        "L @ list",
        lambda: LR(M(), rank=3) @ ([1.0] * 15),
        Either(Value(lambda: M() @ np.ones(15), rtol=1e-10), "x"),
    )
    case(
        "list @ L",
        lambda: ([1.0] * 20) @ LR(M(), rank=3),
        Either(Value(lambda: np.ones(20) @ M(), rtol=1e-10), "x"),
    )


def moments_cases() -> None:
    area("moments / Moments")
    P = lambda: rng(6).normal(size=(7, 3))  # noqa: E731
    w = lambda: rng(7).uniform(0.5, 2, 7)  # noqa: E731
    case(
        "basic, with masses",
        lambda: row10(pp.moments(P(), w())),
        Value(lambda: moments_ref(P(), w()), rtol=1e-13),
    )
    case(
        "list of lists",
        lambda: row10(pp.moments([[1, 0, 0], [0, 1, 0]])),
        Value(lambda: moments_ref([[1, 0, 0], [0, 1, 0]])),
    )
    case(
        "one point of shape (3,)",
        lambda: row10(pp.moments([1.0, 2.0, 3.0])),
        Value(lambda: moments_ref([[1.0, 2.0, 3.0]])),
    )
    case("empty (0, 3)", lambda: row10(pp.moments(np.zeros((0, 3)))), Value(np.zeros(10)))
    case(
        "complex points", lambda: pp.moments(np.array([[1 + 1j, 0, 0], [0, 0, 0]])), Error("points")
    )
    case("string points", lambda: pp.moments(np.array([["a", "b", "c"]])), Error("points"))
    case("generator of points", lambda: pp.moments(p for p in [[0, 0, 0]]), Error("points"))
    case(
        "object array of floats",
        lambda: row10(pp.moments(P().astype(object))),
        Either(Value(lambda: moments_ref(P()), rtol=1e-13), "points"),
    )
    case("points (3, 2)", lambda: pp.moments(np.ones((3, 2))), Error("points"))
    case("negative masses", lambda: pp.moments(np.ones((3, 3)), -np.ones(3)), Error("mass"))
    case(
        "masses of the wrong length",
        lambda: pp.moments(np.ones((3, 3)), np.ones(2)),
        Error("mass"),
    )
    case(
        "complex masses",
        lambda: pp.moments(np.ones((2, 3)), np.array([1 + 1j, 1])),
        Error("mass"),
    )
    case("string masses", lambda: pp.moments(np.ones((2, 3)), "1"), Error("mass"))
    case("NaN point", lambda: pp.moments(np.array([[np.nan, 0, 0]])), Error("points"))
    case("inf mass", lambda: pp.moments(np.ones((2, 3)), np.array([1.0, np.inf])), Error("mass"))
    case(
        "scalar mass",
        lambda: row10(pp.moments(P(), 2.0)),
        Value(lambda: moments_ref(P(), 2.0), rtol=1e-13),
    )
    case(
        "coordinates 1e150 (S2 ~ 1e300)",
        lambda: row10(pp.moments(np.array([[1e150, 0, 0], [-1e150, 0, 0]]))),
        Value(lambda: moments_ref([[1e150, 0, 0], [-1e150, 0, 0]]), rtol=1e-13),
    )
    case(
        "third moments of +-1e150 (y**3 ~ 1e450 on the way) are 0",
        lambda: pp.moments(np.array([[1e150, 0, 0], [-1e150, 0, 0]])).row[10:],
        Either(Value(np.zeros(10)), "points"),
    )
    case(
        "coordinates 1e-200 with masses 1e-300 (S2 underflows)",
        lambda: row10(pp.moments(np.array([[1e-200, 0, 0], [-1e-200, 0, 0]]), [1e-300, 1e-300])),
        Value(np.array([2e-300, 0, 0, 0, 0, 0, 0, 0, 0, 0]), rtol=1e-15),
    )
    case(
        "coordinates 1e300 (S2 overflows)",
        lambda: pp.moments(np.array([[1e300, 0, 0], [-1e300, 0, 0]])),
        Error("points", "masses"),
    )
    case(
        "masses 1e308 (total overflows)",
        lambda: pp.moments(np.array([[1.0, 0, 0], [-1.0, 0, 0]]), np.array([1e308, 1e308])),
        Error("points", "masses"),
    )
    case(
        "coordinates 1e-300 (S2 underflows to 0)",
        lambda: row10(pp.moments(np.array([[1e-300, 0, 0], [-1e-300, 0, 0]]))),
        Value(lambda: moments_ref([[1e-300, 0, 0], [-1e-300, 0, 0]]), atol=1e-300),
    )
    case(
        "zero total mass",
        lambda: row10(pp.moments(np.array([[1.0, 2, 3]]), 0.0)),
        Value(np.zeros(10)),
    )
    if torch is not None:
        case(
            "torch requires grad",
            lambda: row10(pp.moments(torch.tensor(P(), requires_grad=True))),
            Value(lambda: moments_ref(P()), rtol=1e-13),
        )
    if ml_dtypes is not None:
        case(
            "bfloat16 points",
            lambda: row10(pp.moments(P().astype(ml_dtypes.bfloat16))),
            Value(
                lambda: moments_ref(P().astype(ml_dtypes.bfloat16).astype(np.float64)), rtol=1e-12
            ),
        )
    case(
        "big-endian, Fortran",
        lambda: row10(pp.moments(np.asfortranarray(P().astype(">f8")))),
        Value(lambda: moments_ref(P()), rtol=1e-13),
    )
    mo = lambda: pp.moments(P(), w())  # noqa: E731
    far = np.array([[400.0, -300.0, 200.0]])  # (R / r)^4 ~ 1e-11
    case(
        "field at a far target vs the direct sum",
        lambda: mo().field(far, potential=True),
        Value(lambda: gravity64(P(), w(), targets=far), rtol=1e-9),
    )
    case("field order=4", lambda: mo().field(far, order=4), Error("order"))
    case("field order='3'", lambda: mo().field(far, order="3"), Error("order"))
    case("field eps=-1", lambda: mo().field(far, eps=-1), Error("eps"))
    case("field eps='a'", lambda: mo().field(far, eps="a"), Error("eps"))
    case("field eps=nan", lambda: mo().field(far, eps=float("nan")), Error("eps"))
    case("field potential='yes'", lambda: mo().field(far, potential="yes"), Error("potential"))
    case("field targets (n, 2)", lambda: mo().field(np.ones((2, 2))), Error("targets"))
    case("field targets NaN", lambda: mo().field(np.array([[np.nan, 0, 0]])), Error("targets"))
    case(
        "field one target of shape (3,)",
        lambda: mo().potential(far[0]),
        Value(lambda: gravity64(P(), w(), targets=far)[1], rtol=1e-9),
    )
    case("merge with a list", lambda: mo().merge([1]), Error("others", "Moments"))
    case(
        "Moments + 1",
        lambda: mo() + 1,
        Error("Moments", "int"),
        reading=(CLEAR, "Python's own operator TypeError names both types"),
    )
    case(
        "zero() is the identity of merge",
        lambda: row10(mo().merge(pp.Moments.zero())),
        Value(lambda: moments_ref(P(), w()), rtol=1e-13),
    )
    case("about(point) of shape (2,)", lambda: mo().about(np.ones(2)), Error("point"))
    case("about('x')", lambda: mo().about("x"), Error("point"))


def morton_cases() -> None:
    area("morton")
    from propopt.locality import bounding_box, morton_cells, morton_decode, morton_digits

    P = lambda: rng(8).uniform(-1, 1, size=(20, 3))  # noqa: E731
    case("3-D keys", lambda: pp.morton_keys(P()), morton_check(P()))
    case("2-D keys", lambda: pp.morton_keys(P()[:, :2]), morton_check(P()[:, :2]))
    huge = lambda: np.array([[-1e308, 0, 0], [1e308, 1, 1], [0, 0, 0], [5e307, 0, 0]])  # noqa: E731
    case(
        "coordinates spanning -1e308..1e308",
        lambda: pp.morton_keys(huge()),
        Either(morton_check(huge()), "points"),
    )
    case(
        "box (-1e308, 1e308)",
        lambda: pp.morton_keys(P(), box=(np.full(3, -1e308), np.full(3, 1e308))),
        Either(morton_check(P(), (np.full(3, -1e308), np.full(3, 1e308))), "box"),
    )
    case(
        "morton_order across -1e308..1e308",
        lambda: pp.morton_order(np.array([[1e308, 0.0], [-1e308, 0.0], [0.0, 0.0]])),
        Either(Value(np.array([1, 2, 0])), "points"),
    )
    case(
        "coordinates spread 1e-310 (subnormal)",
        lambda: pp.morton_keys(np.array([[0.0, 0, 0], [1e-310, 2e-310, 3e-310]])),
        morton_check(np.array([[0.0, 0, 0], [1e-310, 2e-310, 3e-310]])),
    )
    case("points (3, 4)", lambda: pp.morton_keys(np.ones((3, 4))), Error("points"))
    case("points 1-D", lambda: pp.morton_keys(np.ones(3)), Error("points"))
    case("complex points", lambda: pp.morton_keys(P() + 0j), Error("points"))
    case(
        "bool points",
        lambda: pp.morton_keys(P() > 0),
        Either(morton_check((P() > 0).astype(float)), "points"),
    )
    case("NaN point", lambda: pp.morton_keys(np.array([[np.nan, 0, 0]])), Error("points"))
    case(
        "inf point", lambda: pp.morton_keys(np.array([[np.inf, 0, 0], [0, 0, 0]])), Error("points")
    )
    case("box=(0, 1) scalars", lambda: pp.morton_keys(P(), box=(0, 1)), Error("box"))
    case("box reversed", lambda: pp.morton_keys(P(), box=(np.ones(3), -np.ones(3))), Error("box"))
    case("box='cube'", lambda: pp.morton_keys(P(), box="cube"), Error("box"))
    case(
        "point outside the box",
        lambda: pp.morton_keys(P(), box=(np.zeros(3), np.ones(3))),
        Error("box", "points"),
    )
    case("empty (0, 3)", lambda: pp.morton_keys(np.zeros((0, 3))), morton_check(np.zeros((0, 3))))
    case(
        "list of lists",
        lambda: pp.morton_keys([[0.1, 0.2], [0.3, 0.4], [0.25, 0.3]]),
        morton_check([[0.1, 0.2], [0.3, 0.4], [0.25, 0.3]]),
    )
    case("all points equal", lambda: pp.morton_keys(np.ones((4, 3))), Value(np.zeros(4, np.uint64)))
    case(
        "one point",
        lambda: pp.morton_keys(np.array([[5.0, 6.0, 7.0]])),
        Value(np.zeros(1, np.uint64)),
    )
    case(
        "int64 coordinates",
        lambda: pp.morton_keys(np.array([[3, 0, 0], [0, 7, 0], [1, 1, 1]])),
        morton_check(np.array([[3, 0, 0], [0, 7, 0], [1, 1, 1]])),
    )
    case(
        "float32",
        lambda: pp.morton_keys(P().astype(np.float32)),
        morton_check(P().astype(np.float32)),
    )
    case("big-endian", lambda: pp.morton_keys(P().astype(">f8")), morton_check(P()))
    case("negative stride", lambda: pp.morton_keys(P()[::-2]), morton_check(P()[::-2]))
    if ml_dtypes is not None:
        case(
            "bfloat16",
            lambda: pp.morton_keys(P().astype(ml_dtypes.bfloat16)),
            morton_check(P().astype(ml_dtypes.bfloat16).astype(np.float64)),
        )
    if torch is not None:
        case(
            "torch requires grad",
            lambda: pp.morton_keys(torch.tensor(P(), requires_grad=True)),
            morton_check(P()),
        )
    case("return_keys='no'", lambda: pp.morton_order(P(), return_keys="no"), Error("return_keys"))
    case(
        "morton_order keeps ties in input order",
        lambda: pp.morton_order(np.array([[0.0, 0], [1, 1], [0, 0], [1, 1]])),
        Value(np.array([0, 2, 1, 3])),
    )
    case(
        "bounding_box(cube='no')",
        lambda: bounding_box(np.array([[0.0, 0], [2, 1]]), cube="no"),
        Error("cube"),
    )
    case("bounding_box of nothing", lambda: bounding_box(np.zeros((0, 3))), Error("points"))
    case("morton_digits of negative keys", lambda: morton_digits(np.array([-1]), 1), Error("keys"))
    case("morton_digits of float keys", lambda: morton_digits(np.array([1.5]), 21), Error("keys"))
    case(
        "morton_digits level=0", lambda: morton_digits(np.array([1], np.uint64), 0), Error("level")
    )
    case(
        "morton_digits ndim=4",
        lambda: morton_digits(np.array([1], np.uint64), 1, ndim=4),
        Error("ndim"),
    )
    case(
        "morton_digits of a list of ints",
        lambda: morton_digits([0b101 << 60], 1),
        Value(np.array([5], np.uint8)),
    )
    case("morton_cells of negative keys", lambda: morton_cells(np.array([-8]), 20), Error("keys"))
    case(
        "morton_cells level=22", lambda: morton_cells(np.array([1], np.uint64), 22), Error("level")
    )
    case("morton_decode of negative keys", lambda: morton_decode(np.array([-1])), Error("keys"))
    case(
        "morton_decode of 2-D keys",
        lambda: morton_decode(np.ones((2, 2), np.uint64)),
        Error("keys"),
    )
    case("morton_decode of strings", lambda: morton_decode(np.array(["a"])), Error("keys"))
    case(
        "morton_decode of uint32 keys",
        lambda: morton_decode(np.array([0b110101], np.uint32)),
        Value(np.array([[1, 2, 3]])),
    )
    case(
        "morton_decode of 2**64-1 (dim 2)",
        lambda: morton_decode([2**64 - 1], 2),
        Value(np.array([[2**32 - 1, 2**32 - 1]])),
    )


def tiling_cases() -> None:
    area("tiles / tiled_matmul")
    from propopt.locality import tiled_matmul, tiled_pairwise, tiles

    case("tiles(-1, 2)", lambda: list(tiles(-1, 2)), Error("shape"))
    case("tiles(5, 0)", lambda: list(tiles(5, 0)), Error("tile"))
    case("tiles(5.0, 2)", lambda: list(tiles(5.0, 2)), Error("shape"))
    case("tiles('5', 2)", lambda: list(tiles("5", 2)), Error("shape"))
    case("tiles((5, 5), (2, 2, 2))", lambda: list(tiles((5, 5), (2, 2, 2))), Error("tile"))
    case(
        "tiles((), 2): a 0-d array is one tile",
        lambda: [list(t) for t in tiles((), 2)],
        Value([[]]),
    )
    case("tiles(0, 3): nothing", lambda: len(list(tiles(0, 3))), Value(0))
    case(
        "tiles((3, 2), 5): one clipped tile",
        lambda: [(s.start, s.stop) for t in tiles((3, 2), 5) for s in t],
        Value([(0, 3), (0, 2)]),
    )
    case(
        "tiles(np.int64(5), np.int64(2))",
        lambda: [(t[0].start, t[0].stop) for t in tiles(np.int64(5), np.int64(2))],
        Value([(0, 2), (2, 4), (4, 5)]),
    )
    TM = tiled_matmul
    A = lambda: rng(9).normal(size=(5, 7))  # noqa: E731
    B = lambda: rng(10).normal(size=(7, 3))  # noqa: E731
    ref = lambda: matmul64(A(), B())  # noqa: E731
    case("tiled, tile=2", lambda: TM(A(), B(), tile=2), Value(ref, rtol=1e-13))
    case("naive", lambda: TM(A(), B(), method="naive"), Value(ref, rtol=1e-13))
    case("blas", lambda: TM(A(), B(), method="blas"), Value(ref, rtol=1e-13))
    case("reference", lambda: TM(A(), B(), method="reference"), Value(ref, rtol=1e-13))
    case(
        "int64 2^53+1 (inexact as float64)",
        lambda: TM(np.array([[2**53 + 1]]), np.array([[1]])),
        Either(Value(np.array([[2**53 + 1]], dtype=object)), "A"),
    )
    case(
        "uint64 2^64-1",
        lambda: TM(np.array([[2**64 - 1]], np.uint64), np.array([[1]], np.uint64)),
        Either(Value(np.array([[2**64 - 1]], dtype=object)), "A"),
    )
    case(
        "small int32 matrices",
        lambda: TM(np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((3, 2), np.int32)),
        Value(np.array([[3.0, 3], [12, 12]])),
    )
    case(
        "bool matrices",
        lambda: TM(np.ones((2, 2), bool), np.ones((2, 2), bool)),
        Either(Value(np.full((2, 2), 2.0)), "A"),
    )
    case("complex", lambda: TM(np.ones((2, 2), complex), np.ones((2, 2))), Error("A"))
    case("inner sizes differ", lambda: TM(np.ones((2, 3)), np.ones((2, 3))), Error("A", "B"))
    case("1-D A", lambda: TM(np.ones(3), np.ones(3)), Error("A"))
    case("method='fast'", lambda: TM(A(), B(), method="fast"), Error("method"))
    case("tile=0", lambda: TM(A(), B(), tile=0), Error("tile"))
    if torch is not None:
        case(
            "torch requiring grad",
            lambda: TM(torch.tensor(A(), requires_grad=True), B()),
            Either(Value(ref, rtol=1e-13), "A"),
        )
    case("lists", lambda: TM([[1.0, 2.0]], [[3.0], [4.0]]), Value(np.array([[11.0]])))
    if ml_dtypes is not None:
        case(
            "bfloat16",
            lambda: TM(np.ones((2, 2), ml_dtypes.bfloat16), np.ones((2, 2))),
            Either(Value(np.full((2, 2), 2.0)), "A"),
        )
    case(
        "float16 (float32 result)",
        lambda: TM(np.ones((2, 2), np.float16), np.ones((2, 2), np.float16)),
        Value(np.full((2, 2), 2.0), dtype="float32"),
    )
    case(
        "float32 sum overflows to inf (documented)",
        lambda: TM(np.full((1, 2), 3e38, np.float32), np.ones((2, 1), np.float32)),
        Value(np.array([[np.inf]])),
    )
    case("object", lambda: TM(np.ones((2, 2), object), np.ones((2, 2))), Error("A"))
    case("big-endian", lambda: TM(A().astype(">f8"), B()), Value(ref, rtol=1e-13))
    case(
        "Fortran and negative strides",
        lambda: TM(np.asfortranarray(A())[::-1], B()[:, ::-1], tile=3),
        Value(lambda: matmul64(A()[::-1], B()[:, ::-1]), rtol=1e-13),
    )
    case("(0, 3) @ (3, 2)", lambda: TM(np.ones((0, 3)), np.ones((3, 2))), Value(np.zeros((0, 2))))
    case("(2, 0) @ (0, 3)", lambda: TM(np.ones((2, 0)), np.ones((0, 3))), Value(np.zeros((2, 3))))
    case(
        "NaN propagates",
        lambda: TM(np.array([[np.nan, 1.0]]), np.ones((2, 1))),
        Value(np.array([[np.nan]])),
    )
    case("tile larger than the matrices", lambda: TM(A(), B(), tile=10**6), Value(ref, rtol=1e-13))
    case(
        "A is B",
        lambda: (lambda S: TM(S, S))(rng(11).normal(size=(4, 4))),
        Value(
            lambda: matmul64(rng(11).normal(size=(4, 4)), rng(11).normal(size=(4, 4))), rtol=1e-13
        ),
    )

    def gauss(xi: Any, xj: Any) -> float:
        return math.exp(-((xi[0] - xj[0]) ** 2))

    X = np.array([[0.0], [1.0], [5.0], [0.5]])
    pref = np.array(
        [sum(math.exp(-((X[i, 0] - X[j, 0]) ** 2)) for j in range(4) if j != i) for i in range(4)]
    )
    case(
        "tiled_pairwise, tile=2", lambda: tiled_pairwise(gauss, X, tile=2), Value(pref, rtol=1e-13)
    )
    case(
        "tiled_pairwise, tile=None",
        lambda: tiled_pairwise(gauss, X, tile=None),
        Value(pref, rtol=1e-13),
    )
    case("tiled_pairwise, tile=0", lambda: tiled_pairwise(gauss, X, tile=0), Error("tile"))


def symmetry_cases() -> None:
    area("direct_gravity / pairwise_sum")
    DG = lambda *a, **kw: pp.direct_gravity(*a, potential=True, **kw)  # noqa: E731
    P = lambda: np.array([[0.0, 0, 0], [1, 0, 0], [0, 2, 0]])  # noqa: E731
    ref = lambda **kw: gravity64(P(), **kw)  # noqa: E731
    case("basic", lambda: DG(P()), Value(lambda: ref(), rtol=1e-14))
    case(
        "potential by default: None",
        lambda: pp.direct_gravity(P())[1] is None,
        Value(True),
    )
    case("potential='no'", lambda: pp.direct_gravity(P(), potential="no"), Error("potential"))
    case("eps=-1", lambda: DG(P(), eps=-1), Error("eps"))
    case("eps='0.1'", lambda: DG(P(), eps="0.1"), Error("eps"))
    case("eps=nan", lambda: DG(P(), eps=float("nan")), Error("eps"))
    case("eps of the wrong length", lambda: DG(P(), eps=np.ones(2)), Error("eps"))
    case(
        "eps as a list",
        lambda: DG(P(), eps=[0.1, 0.1, 0.1]),
        Value(lambda: ref(eps=0.1), rtol=1e-13),
    )
    case("eps with a complex entry", lambda: DG(P(), eps=[0.1 + 1j, 0.1, 0.1]), Error("eps"))
    case("eps (3, 1)", lambda: DG(P(), eps=np.ones((3, 1))), Error("eps"))
    case("G='1'", lambda: DG(P(), G="1"), Error("G"))
    case("G=nan", lambda: DG(P(), G=float("nan")), Error("G"))
    case("G=1j", lambda: DG(P(), G=1j), Error("G"))
    case("G=np.float32(2)", lambda: DG(P(), G=np.float32(2)), Value(lambda: ref(G=2.0), rtol=1e-14))
    case(
        "G=np.array(2.0) (0-d)",
        lambda: DG(P(), G=np.array(2.0)),
        Value(lambda: ref(G=2.0), rtol=1e-14),
    )
    case("G=True", lambda: DG(P(), G=True), Error("G"))
    case("eps=np.array(0.1) (0-d)", lambda: DG(P(), eps=np.array(0.1)), Value(lambda: ref(eps=0.1)))
    case("eps=0.1+0j", lambda: DG(P(), eps=0.1 + 0j), Error("eps"))
    case("negative masses", lambda: DG(P(), -np.ones(3)), Error("mass"))
    case("complex masses", lambda: DG(P(), np.ones(3) + 1j), Error("mass"))
    case("inf mass", lambda: DG(P(), np.array([1, np.inf, 1])), Error("mass"))
    case("mass='1'", lambda: DG(P(), "1"), Error("mass"))
    case("mass (3, 1)", lambda: DG(P(), np.ones((3, 1))), Error("mass"))
    case("pos (3, 2)", lambda: DG(np.ones((3, 2))), Error("pos"))
    case("complex pos", lambda: DG(P() + 0j), Error("pos"))
    case(
        "object pos",
        lambda: DG(P().astype(object)),
        Either(Value(lambda: ref(), rtol=1e-14), "pos"),
    )
    case("string pos", lambda: DG(np.array([["a", "b", "c"]])), Error("pos"))
    case(
        "bool pos",
        lambda: DG(P() > 0),
        Value(lambda: gravity64((P() > 0).astype(float)), rtol=1e-14),
    )
    case(
        "int pos",
        lambda: DG(np.array([[0, 0, 0], [1, 0, 0]])),
        Value(lambda: gravity64(np.array([[0.0, 0, 0], [1, 0, 0]])), rtol=1e-14),
    )
    case(
        "list pos",
        lambda: DG([[0, 0, 0], [1, 0, 0]]),
        Value(lambda: gravity64(np.array([[0.0, 0, 0], [1, 0, 0]])), rtol=1e-14),
    )
    case("generator pos", lambda: DG(p for p in [[0, 0, 0], [1, 0, 0]]), Error("pos"))
    if torch is not None:
        case(
            "torch pos requiring grad",
            lambda: DG(torch.tensor(P(), requires_grad=True)),
            Value(lambda: ref(), rtol=1e-14),
        )
    case("method='fast'", lambda: DG(P(), method="fast"), Error("method"))
    case("device='gpu'", lambda: DG(P(), device="gpu"), Error("device"))
    case("softening='gauss'", lambda: DG(P(), softening="gauss"), Error("softening"))
    case("tile=0", lambda: DG(P(), tile=0), Error("tile"))
    case("tile=2.0", lambda: DG(P(), tile=2.0), Error("tile"))
    case("target_eps without targets", lambda: DG(P(), target_eps=0.1), Error("target_eps"))
    case("targets (2, 2)", lambda: DG(P(), targets=np.ones((2, 2))), Error("targets"))
    case(
        "one target of shape (3,)",
        lambda: DG(P(), targets=np.array([5.0, 0, 0])),
        Either(Value(lambda: gravity64(P(), targets=[[5.0, 0, 0]]), rtol=1e-14), "targets"),
    )
    case(
        "targets with method='halved'",
        lambda: DG(P(), targets=P(), method="halved"),
        Error("method", "targets"),
    )
    case(
        "bodies 1e300 apart",
        lambda: DG(np.array([[0.0, 0, 0], [1e300, 0, 0]])),
        Value(lambda: gravity64(np.array([[0.0, 0, 0], [1e300, 0, 0]])), rtol=1e-14),
    )
    case(
        "bodies 1e-150 apart (field 1e300)",
        lambda: DG(np.array([[0.0, 0, 0], [1e-150, 0, 0]])),
        Value(
            lambda: (np.array([[1e300, 0, 0], [-1e300, 0, 0]]), np.array([-1e150, -1e150])),
            rtol=1e-14,
        ),
    )
    case(
        "bodies 1e-300 apart (field overflows)",
        lambda: DG(np.array([[0.0, 0, 0], [1e-300, 0, 0]])),
        Error("pos"),
    )
    case(
        "coincident bodies, eps=0",
        lambda: DG(np.zeros((2, 3))),
        Value((np.zeros((2, 3)), np.zeros(2))),
    )
    case("float16 pos", lambda: DG(P().astype(np.float16)), Value(lambda: ref(), rtol=1e-6))
    case(
        "float32 field overflows",
        lambda: DG(np.array([[0.0, 0, 0], [1e-30, 0, 0]], np.float32)),
        Error("pos"),
    )
    case("no bodies", lambda: DG(np.zeros((0, 3))), Value((np.zeros((0, 3)), np.zeros(0))))
    case("one body", lambda: DG(np.zeros((1, 3))), Value((np.zeros((1, 3)), np.zeros(1))))
    case(
        "per-body eps, float32",
        lambda: DG(P().astype(np.float32), eps=np.array([0.1, 0.2, 0.3])),
        Value(lambda: ref(eps=np.array([0.1, 0.2, 0.3])), rtol=1e-6),
    )
    case(
        "Fortran, negative-stride pos",
        lambda: DG(np.asfortranarray(P())[::-1]),
        Value(lambda: gravity64(P()[::-1]), rtol=1e-14),
    )
    case(
        "big-endian pos and masses",
        lambda: DG(P().astype(">f8"), np.array([1.0, 2, 3]).astype(">f8")),
        Value(lambda: ref(mass=np.array([1.0, 2, 3])), rtol=1e-14),
    )
    PS = pp.pairwise_sum

    def inv(xi: Any, xj: Any) -> float:
        return 1.0 / ((xi[0] - xj[0]) ** 2 + (xi[1] - xj[1]) ** 2 + (xi[2] - xj[2]) ** 2) ** 0.5

    def pinv(w: Any = None) -> np.ndarray:
        X = P()
        return np.array(
            [
                sum(
                    (1.0 if w is None else w[j]) / float(np.linalg.norm(X[i] - X[j]))
                    for j in range(3)
                    if j != i
                )
                for i in range(3)
            ]
        )

    case("pairwise_sum basic", lambda: PS(inv, P()), Value(lambda: pinv(), rtol=1e-14))
    case(
        "pairwise_sum method='reference'",
        lambda: PS(inv, P(), method="reference"),
        Value(lambda: pinv(), rtol=1e-14),
    )
    case(
        "pairwise_sum method='untiled'",
        lambda: PS(inv, P(), method="untiled"),
        Value(lambda: pinv(), rtol=1e-14),
    )
    case("kernel=None", lambda: PS(None, P()), Error("kernel"))
    case("symmetry='sym'", lambda: PS(inv, P(), symmetry="sym"), Error("symmetry"))
    case(
        "symmetry list of the wrong length",
        lambda: PS(inv, P(), symmetry=["symmetric", "symmetric"]),
        Error("symmetry"),
    )
    case("args as a list", lambda: PS(inv, P(), args=[1.0]), Error("args"))
    case("args holding a string", lambda: PS(lambda a, b, c: c, P(), args=("a",)), Error("args"))
    case("kernel of one argument", lambda: PS(lambda a: 1.0, P()), Error("kernel"))
    case("kernel returning an array", lambda: PS(lambda a, b: a - b, P()), Error("kernel"))
    case("kernel returning a string", lambda: PS(lambda a, b: "x", P()), Error("kernel"))
    case("kernel returning complex", lambda: PS(lambda a, b: 1j, P()), Error("kernel"))
    case("kernel returning an int", lambda: PS(lambda a, b: 1, P()), Value(np.full(3, 2.0)))
    case(
        "kernel numba cannot compile", lambda: PS(lambda a, b: {}.get(1, 1.0), P()), Error("kernel")
    )
    case(
        "weights with NaN", lambda: PS(inv, P(), weights=np.array([1, np.nan, 1])), Error("weights")
    )
    case(
        "negative weights",
        lambda: PS(inv, P(), weights=np.array([1, -1, 1.0])),
        Value(lambda: pinv([1, -1, 1.0]), rtol=1e-14),
    )
    case("X 1-D", lambda: PS(inv, np.ones(3)), Error("X"))
    case("X with 0 columns", lambda: PS(inv, np.ones((3, 0))), Error("X"))
    case(
        "targets of another dimension",
        lambda: PS(inv, P(), targets=np.ones((2, 2))),
        Error("targets"),
    )
    case("device='gpu'", lambda: PS(inv, P(), device="gpu"), Error("device"))
    case("float16 X", lambda: PS(inv, P().astype(np.float16)), Value(lambda: pinv(), rtol=1e-6))


def misra_gries_cases() -> None:
    area("MisraGries")
    from propopt.redundancy import MisraGries as MG

    def bound_check(items: list[int], m: int) -> Check:
        def pred(s: Any) -> tuple[bool, str]:
            f = collections.Counter(items)
            n = len(items)
            keys = sorted(set(items) | set(int(k) for k in s.heavy_hitters(threshold=-1)[0]))
            est = s.estimate(np.array(keys, dtype=np.int64)) if keys else np.zeros(0)
            bad = [
                (k, int(e), f[k])
                for k, e in zip(keys, est)
                if not (f[k] - n / (m + 1) <= e <= f[k])
            ]
            return (not bad and s.n == n), f"violations {bad[:3]}, n={s.n}"

        return Check(pred)

    case("m=0", lambda: MG(0), Error("m"))
    case("m=2.0", lambda: MG(2.0), Error("m"))
    case("m='3'", lambda: MG("3"), Error("m"))
    case("m=True", lambda: MG(True), Error("m"))
    case("float items", lambda: MG(2).update(np.array([1.5])), Error("items"))
    case("string items", lambda: MG(2).update(np.array(["a"])), Error("items"))
    case(
        "uint64 items >= 2^63",
        lambda: MG(2).update(np.array([2**64 - 1, 2**64 - 1, 5], np.uint64)).heavy_hitters(),
        Either(Value((np.array([2**64 - 1, 5], dtype=object), np.array([2, 1]))), "items"),
    )
    case(
        "estimate of 7.9 (a float)",
        lambda: MG(2).update(np.array([7, 7, 7])).estimate([7.9]),
        Either(Value(np.array([0])), "items"),
    )
    case(
        "estimate of 'a'", lambda: MG(2).update(np.array([7, 7, 7])).estimate(["a"]), Error("items")
    )
    case(
        "estimate of 2**64-1 (Python int)",
        lambda: MG(2).update(np.array([7, 7, 7])).estimate([2**64 - 1]),
        Either(Value(np.array([0])), "items"),
    )
    case(
        "estimate of uint64 2**64-1 when -1 is held",
        lambda: MG(2).update(np.array([-1, -1])).estimate(np.array([2**64 - 1], np.uint64)),
        Either(Value(np.array([0])), "items"),
    )
    case(
        "heavy_hitters(threshold='a')",
        lambda: MG(2).update(np.array([7, 7, 7])).heavy_hitters("a"),
        Error("threshold"),
    )
    case(
        "heavy_hitters(threshold=nan)",
        lambda: MG(2).update(np.array([7, 7, 7])).heavy_hitters(float("nan")),
        Error("threshold"),
    )
    case(
        "heavy_hitters(threshold=2): counts that may exceed 2",
        lambda: MG(2).update(np.array([7, 7, 7, 1])).heavy_hitters(2),
        Value((np.array([7, 1]), np.array([3, 1]))),
    )
    case("merge with an int", lambda: MG(2).merge(5), Error("b", "other"))
    case("merge m=2 with m=3", lambda: MG(2).merge(MG(3)), Error("m"))
    case("list items", lambda: MG(2).update([1, 1, 2]), bound_check([1, 1, 2], 2))
    case(
        "generator items",
        lambda: MG(2).update(i for i in [1, 1, 2]),
        Either(bound_check([1, 1, 2], 2), "items"),
    )
    case(
        "bool items", lambda: MG(2).update(np.array([True, True, False])), bound_check([1, 1, 0], 2)
    )
    if pd is not None:
        case(
            "pandas Series items",
            lambda: MG(2).update(pd.Series([1, 1, 2])),
            bound_check([1, 1, 2], 2),
        )
    if torch is not None:
        case(
            "torch items", lambda: MG(2).update(torch.tensor([1, 1, 2])), bound_check([1, 1, 2], 2)
        )
    case(
        "object array of ints",
        lambda: MG(2).update(np.array([1, 1, 2], object)),
        Either(bound_check([1, 1, 2], 2), "items"),
    )
    case("empty items", lambda: MG(2).update(np.array([], np.int64)), bound_check([], 2))
    case("0-d item", lambda: MG(2).update(np.int64(3)), bound_check([3], 2))
    case(
        "int8 negatives",
        lambda: MG(2).update(np.array([-1, -1, -128], np.int8)),
        bound_check([-1, -1, -128], 2),
    )
    case(
        "2-D items (raveled)",
        lambda: MG(2).update(np.array([[1, 2], [1, 1]])),
        Either(bound_check([1, 2, 1, 1], 2), "items"),
    )
    items = [int(v) for v in rng(12).zipf(1.5, 2000) % 50]
    case("zipf stream, m=1", lambda: MG(1).update(np.array(items)), bound_check(items, 1))
    case(
        "zipf stream merged, m=5",
        lambda: MG(5).update(np.array(items[:700])).merge(MG(5).update(np.array(items[700:]))),
        bound_check(items, 5),
    )
    case(
        "int64 extremes",
        lambda: MG(2).update(np.array([-(2**63), 2**63 - 1, 2**63 - 1])),
        bound_check([-(2**63), 2**63 - 1, 2**63 - 1], 2),
    )
    case(
        "masked items are not counted",
        lambda: MG(3).update(np.ma.MaskedArray([1, 1, 2, 1, 1], mask=[1, 1, 0, 1, 1])),
        bound_check([2], 3),
    )


def audit_cases() -> None:
    area("audit")
    from propopt import audit

    x = lambda: np.arange(10.0)  # noqa: E731
    pts = lambda: rng(13).normal(size=(10, 3))  # noqa: E731
    ok_is = lambda want: Check(lambda r: (r.ok == want, f"ok={r.ok}"))  # noqa: E731
    case(
        "check_associative trials=0",
        lambda: audit.check_associative(pp.add, x(), trials=0),
        Error("trials"),
    )
    case(
        "check_associative trials=2.5",
        lambda: audit.check_associative(pp.add, x(), trials=2.5),
        Error("trials"),
    )
    case(
        "check_associative rtol=-1",
        lambda: audit.check_associative(pp.add, x(), rtol=-1),
        Error("rtol"),
    )
    case(
        "check_associative rtol=nan",
        lambda: audit.check_associative(pp.add, x(), rtol=float("nan")),
        Error("rtol"),
    )
    case(
        "check_associative rtol='a'",
        lambda: audit.check_associative(pp.add, x(), rtol="a"),
        Error("rtol"),
    )
    case(
        "check_associative atol=-1",
        lambda: audit.check_associative(pp.add, x(), atol=-1.0),
        Error("atol"),
    )
    case(
        "check_associative atol=inf",
        lambda: audit.check_associative(np.subtract, x(), atol=float("inf")),
        Either(ok_is(True), "atol"),
    )
    case("check_associative fn=5", lambda: audit.check_associative(5, x()), Error("fn"))
    case(
        "check_associative empty samples",
        lambda: audit.check_associative(pp.add, np.zeros(0)),
        Error("samples"),
    )
    case(
        "check_associative list samples",
        lambda: audit.check_associative(pp.add, [1.0, 2.0, 3.0]),
        Either(ok_is(True), "samples"),
    )
    case(
        "check_associative axis=2",
        lambda: audit.check_associative(pp.add, x(), axis=2),
        Error("axis"),
    )
    case(
        "check_associative seed='a'",
        lambda: audit.check_associative(pp.add, x(), seed="a"),
        Error("seed"),
    )
    case(
        "check_associative NaN samples",
        lambda: audit.check_associative(pp.add, np.array([np.nan, 1.0, 2.0])),
        ok_is(True),
    )
    case(
        "check_associative np.subtract fails",
        lambda: audit.check_associative(np.subtract, x()),
        ok_is(False),
    )
    case(
        "check_associative complex add",
        lambda: audit.check_associative(pp.add, x() + 1j),
        ok_is(True),
    )
    if ml_dtypes is not None:
        case(
            "check_associative bfloat16 add",
            lambda: audit.check_associative(pp.add, x().astype(ml_dtypes.bfloat16)),
            ok_is(True),
        )
    if torch is not None:
        case(
            "check_associative torch requiring grad",
            lambda: audit.check_associative(
                lambda a, b: a + b, torch.arange(10.0, requires_grad=True)
            ),
            ok_is(True),
        )
    case(
        "check_associative fn returning a str",
        lambda: audit.check_associative(lambda a, b: "x", x()),
        Error("fn"),
    )
    case(
        "check_commutative matmul2x2 fails",
        lambda: audit.check_commutative(pp.matmul2x2, tuple(rng(0).normal(size=(4, 20)))),
        ok_is(False),
    )
    case(
        "check_commutative trials=-1",
        lambda: audit.check_commutative(pp.add, x(), trials=-1),
        Error("trials"),
    )
    case(
        "check_identity of a plain function",
        lambda: audit.check_identity(lambda a, b: a + b, x()),
        Error("monoid", "Monoid"),
    )
    case(
        "check_identity wrong identity fails",
        lambda: audit.check_identity(pp.Monoid(lambda a, b: a * b, 0.0), x() + 1),
        ok_is(False),
    )
    case(
        "check_identity trials=0",
        lambda: audit.check_identity(pp.add, x(), trials=0),
        Error("trials"),
    )
    sub0 = lambda a, b: (a - b)[:, 0]  # noqa: E731
    case(
        "check_symmetric, antisymmetric f fails",
        lambda: audit.check_symmetric(sub0, pts()),
        ok_is(False),
    )
    case(
        "check_symmetric antisymmetric=True holds",
        lambda: audit.check_symmetric(sub0, pts(), antisymmetric=True),
        ok_is(True),
    )
    case(
        "check_symmetric antisymmetric='no'",
        lambda: audit.check_symmetric(sub0, pts(), antisymmetric="no"),
        Error("antisymmetric"),
    )
    case(
        "check_symmetric NaN samples",
        lambda: audit.check_symmetric(sub0, np.array([[np.nan, 0, 0], [1, 1, 1]])),
        Error("samples"),
    )
    case(
        "check_symmetric complex samples",
        lambda: audit.check_symmetric(sub0, pts() + 1j),
        Either(ok_is(False), "samples"),
    )
    case(
        "check_symmetric f returning a scalar",
        lambda: audit.check_symmetric(lambda a, b: 1.0, pts()),
        Error("pair_fn", "<lambda>"),
    )
    case(
        "check_symmetric trials=0",
        lambda: audit.check_symmetric(sub0, pts(), trials=0),
        Error("trials"),
    )
    case(
        "check_low_rank of a complex rank-1 matrix",
        lambda: audit.check_low_rank(np.array([[1, 1j], [1j, -1]])).rank,
        Either(Value(1), "kernel_or_matrix"),
    )
    case(
        "check_low_rank of a complex kernel",
        lambda: (
            audit.check_low_rank(
                lambda a, b: np.exp(1j * np.linalg.norm(a - b, axis=-1)), rtol=0.5
            ).rank
        ),
        Either(Check(lambda r: (r >= 1, f"rank {r}")), "kernel_or_matrix"),
        reading=None,
    )
    case(
        "check_low_rank rtol='a'", lambda: audit.check_low_rank(np.eye(3), rtol="a"), Error("rtol")
    )
    case("check_low_rank 1-D", lambda: audit.check_low_rank(np.ones(3)), Error("kernel_or_matrix"))
    case(
        "check_low_rank NaN",
        lambda: audit.check_low_rank(np.array([[np.nan]])),
        Error("kernel_or_matrix"),
    )
    case(
        "check_low_rank n=0",
        lambda: audit.check_low_rank(lambda a, b: np.ones(len(a)), n=0),
        Error("n"),
    )
    if torch is not None:
        case(
            "check_low_rank torch requiring grad",
            lambda: audit.check_low_rank(torch.eye(3, requires_grad=True)).rank,
            Value(3),
        )
    case(
        "check_low_rank string matrix",
        lambda: audit.check_low_rank(np.array([["a"]])),
        Error("kernel_or_matrix"),
    )
    case("check_low_rank 1e300 * I", lambda: audit.check_low_rank(np.eye(3) * 1e300).rank, Value(3))
    case(
        "check_low_rank X, Y dimensions differ",
        lambda: audit.check_low_rank(
            lambda a, b: np.ones(len(a)), X=np.ones((3, 2)), Y=np.ones((3, 3))
        ),
        Error("Y", "X"),
    )
    inv_r = lambda a, b: 1 / np.linalg.norm(a - b, axis=-1)  # noqa: E731
    case("check_decay r_min=-1", lambda: audit.check_decay(inv_r, r_min=-1), Error("r_min"))
    case(
        "check_decay r_max < r_min",
        lambda: audit.check_decay(inv_r, r_min=10, r_max=1),
        Error("r_min", "r_max"),
    )
    case(
        "check_decay distances=1", lambda: audit.check_decay(inv_r, distances=1), Error("distances")
    )
    case("check_decay r_min='1'", lambda: audit.check_decay(inv_r, r_min="1"), Error("r_min"))
    case(
        "check_decay of 1/r: exponent 1",
        lambda: audit.check_decay(inv_r).exponent,
        Value(1.0, rtol=1e-3),
    )
    case("audit_table kind='op'", lambda: audit.audit_table(np.add, kind="op"), Error("kind"))
    case("audit_table(3)", lambda: audit.audit_table(3), Error("fn"))
    case("audit_table ndim=0", lambda: audit.audit_table(np.add, ndim=0), Error("ndim"))
    case(
        "audit_table three-argument fn", lambda: audit.audit_table(lambda a, b, c: a), Error("kind")
    )


def threads_cases() -> None:
    area("threads")
    most = __import__("numba").config.NUMBA_NUM_THREADS
    case("set_num_threads(0)", lambda: pp.set_num_threads(0), Error("n"))
    case("set_num_threads(1.0)", lambda: pp.set_num_threads(1.0), Error("n"))
    case("set_num_threads(10**6)", lambda: pp.set_num_threads(10**6), Error("n"))
    case("set_num_threads('2')", lambda: pp.set_num_threads("2"), Error("n"))
    case("set_num_threads(True)", lambda: pp.set_num_threads(True), Error("n"))

    def ctx() -> Any:
        with pp.set_num_threads(np.int64(1)):
            inside = pp.get_num_threads()
        return inside, pp.get_num_threads() >= 1

    case("context manager with np.int64(1)", ctx, Value((1, True)))
    case(
        "a scan inside set_num_threads(1)",
        lambda: (
            lambda: [
                pp.set_num_threads(1),
                pp.associative_scan(pp.add, np.ones(5)),
                pp.set_num_threads(None),
            ][1]
        )(),
        Value(np.arange(1.0, 6.0)),
    )
    case(
        f"set_num_threads({most}) then None",
        lambda: [pp.set_num_threads(most), pp.set_num_threads(None), pp.get_num_threads() >= 1][-1],
        Value(True),
    )


# ---------------------------------------------------------------- case studies
def softplus(v: float) -> float:
    return v if v > 20 else math.log1p(math.exp(v))


def mamba_ref(
    u: Any,
    delta: Any,
    A: Any,
    B: Any,
    C: Any,
    D: Any = None,
    z: Any = None,
    bias: Any = None,
    sp: bool = False,
) -> np.ndarray:
    """mamba_ssm's selective scan, one token at a time, float64; B, C per token (batch, N, L)."""
    u, delta, A, B, C = (np.asarray(v, dtype=np.float64) for v in (u, delta, A, B, C))
    b, d, L = u.shape
    N = A.shape[1]
    out = np.zeros((b, d, L))
    for bi in range(b):
        for di in range(d):
            h = [0.0] * N
            for t in range(L):
                dt = float(delta[bi, di, t]) + (0.0 if bias is None else float(bias[di]))
                dt = softplus(dt) if sp else dt
                y = 0.0
                for n in range(N):
                    Bt = B[di, n] if B.ndim == 2 else B[bi, n, t]
                    Ct = C[di, n] if C.ndim == 2 else C[bi, n, t]
                    h[n] = math.exp(dt * A[di, n]) * h[n] + dt * Bt * u[bi, di, t]
                    y += Ct * h[n]
                if D is not None:
                    y += float(D[di]) * u[bi, di, t]
                if z is not None:
                    zz = float(z[bi, di, t])
                    y *= zz / (1 + math.exp(-zz))
                out[bi, di, t] = y
    return out


def mamba_cases() -> None:
    area("mamba")
    from propopt_case_studies import mamba as mb

    r = rng(14)
    b, d, L, N = 1, 3, 5, 2
    u0, dl0 = r.normal(size=(b, d, L)), r.uniform(0.1, 1, (b, d, L))
    A0 = -np.exp(r.normal(size=(d, N)))
    B0, C0, D0, z0 = (
        r.normal(size=(b, N, L)),
        r.normal(size=(b, N, L)),
        r.normal(size=d),
        r.normal(size=(b, d, L)),
    )
    u, dl, A, B, C = (
        (lambda: u0.copy()),
        (lambda: dl0.copy()),
        (lambda: A0.copy()),
        (lambda: B0.copy()),
        (lambda: C0.copy()),
    )
    ss = mb.selective_scan
    ref = lambda **kw: mamba_ref(u0, dl0, A0, B0, C0, **kw)  # noqa: E731
    case(
        "selective_scan basic",
        lambda: ss(u(), dl(), A(), B(), C()),
        Value(lambda: ref(), rtol=1e-12),
    )
    case(
        "D, z, delta_bias, softplus",
        lambda: ss(u(), dl(), A(), B(), C(), D=D0, z=z0, delta_bias=D0, delta_softplus=True),
        Value(lambda: ref(D=D0, z=z0, bias=D0, sp=True), rtol=1e-12),
    )
    case(
        "u as a list",
        lambda: ss(u().tolist(), dl(), A(), B(), C()),
        Either(Value(lambda: ref(), rtol=1e-12), "u"),
    )
    case("u 2-D", lambda: ss(u()[0], dl(), A(), B(), C()), Error("u"))
    case("A transposed", lambda: ss(u(), dl(), A().T, B(), C()), Error("A"))
    case("D of the wrong length", lambda: ss(u(), dl(), A(), B(), C(), D=np.ones(5)), Error("D"))
    case("complex A", lambda: ss(u(), dl(), A() + 0j, B(), C()), Error("A"))
    case("int u", lambda: ss(np.ones((b, d, L), int), dl(), A(), B(), C()), Error("u"))
    case("bool u", lambda: ss(u() > 0, dl(), A(), B(), C()), Error("u"))
    case(
        "float32 u, float64 rest",
        lambda: ss(u().astype(np.float32), dl(), A(), B(), C()),
        Value(lambda: ref(), rtol=1e-5, dtype="float32"),
    )
    case(
        "float16 u and delta",
        lambda: ss(u().astype(np.float16), dl().astype(np.float16), A(), B(), C()),
        Value(
            lambda: mamba_ref(u0.astype(np.float16), dl0.astype(np.float16), A0, B0, C0),
            rtol=2e-3,
            dtype="float16",
        ),
    )
    if ml_dtypes is not None:
        case(
            "bfloat16 u and delta",
            lambda: ss(
                u().astype(ml_dtypes.bfloat16), dl().astype(ml_dtypes.bfloat16), A(), B(), C()
            ),
            Value(
                lambda: mamba_ref(
                    u0.astype(ml_dtypes.bfloat16), dl0.astype(ml_dtypes.bfloat16), A0, B0, C0
                ),
                rtol=1e-2,
                dtype="bfloat16",
            ),
        )
    case(
        "big-endian u",
        lambda: ss(u().astype(">f8"), dl(), A(), B(), C()),
        Value(lambda: ref(), rtol=1e-12),
    )
    case(
        "negative-stride u",
        lambda: ss(u()[:, :, ::-1], dl(), A(), B(), C()),
        Value(lambda: mamba_ref(u0[:, :, ::-1], dl0, A0, B0, C0), rtol=1e-12),
    )
    case(
        "Fortran-order u",
        lambda: ss(np.asfortranarray(u()), dl(), A(), B(), C()),
        Value(lambda: ref(), rtol=1e-12),
    )
    case(
        "read-only inputs",
        lambda: ss(*(np.broadcast_to(v, v.shape) for v in (u(), dl(), A(), B(), C()))),
        Value(lambda: ref(), rtol=1e-12),
    )
    case("method='gpu'", lambda: ss(u(), dl(), A(), B(), C(), method="gpu"), Error("method"))
    case(
        "device='cuda' on numpy",
        lambda: ss(u(), dl(), A(), B(), C(), device="cuda"),
        Error("device", "u"),
    )
    case(
        "method='reference'",
        lambda: ss(u(), dl(), A(), B(), C(), method="reference"),
        Value(lambda: ref(), rtol=1e-12),
    )
    case(
        "method='parallel'",
        lambda: ss(u(), dl(), A(), B(), C(), method="parallel"),
        Value(lambda: ref(), rtol=1e-12),
    )
    case(
        "delta_softplus='no'",
        lambda: ss(u(), dl(), A(), B(), C(), delta_softplus="no"),
        Error("delta_softplus"),
    )
    case(
        "return_last_state='no'",
        lambda: ss(u(), dl(), A(), B(), C(), return_last_state="no"),
        Error("return_last_state"),
    )
    case(
        "L=0",
        lambda: ss(u()[:, :, :0], dl()[:, :, :0], A(), B()[:, :, :0], C()[:, :, :0]),
        Value(np.zeros((b, d, 0))),
    )
    case(
        "batch=0", lambda: ss(u()[:0], dl()[:0], A(), B()[:0], C()[:0]), Value(np.zeros((0, d, L)))
    )
    case(
        "d_state=0",
        lambda: ss(u(), dl(), A()[:, :0], B()[:, :0], C()[:, :0]),
        Either(Value(np.zeros((b, d, L))), "A"),
    )
    case(
        "NaN in u propagates",
        lambda: ss(np.where(u0 > 0, np.nan, u0), dl(), A(), B(), C()),
        Value(lambda: mamba_ref(np.where(u0 > 0, np.nan, u0), dl0, A0, B0, C0), rtol=1e-12),
    )
    case(
        "delta ~1e300",
        lambda: ss(u(), dl() * 1e300, A(), B(), C()),
        Value(lambda: mamba_ref(u0, dl0 * 1e300, A0, B0, C0), rtol=1e-12),
    )
    case(
        "initial_state of the wrong shape",
        lambda: ss(u(), dl(), A(), B(), C(), initial_state=np.zeros((b, d))),
        Error("initial_state"),
    )
    case(
        "seq_idx of floats",
        lambda: ss(u(), dl(), A(), B(), C(), seq_idx=np.zeros((b, L))),
        Error("seq_idx"),
    )
    case(
        "seq_idx with u as a list",
        lambda: ss(u().tolist(), dl(), A(), B(), C(), seq_idx=np.zeros((b, L), int)),
        Error("u"),
    )
    case(
        "cu_seqlens not ending at L",
        lambda: ss(u(), dl(), A(), B(), C(), cu_seqlens=np.array([0, 3])),
        Error("cu_seqlens"),
    )
    case(
        "groups not dividing dim",
        lambda: ss(u(), dl(), A(), np.ones((b, 2, N, L)), C()),
        Error("B", "groups"),
    )
    case(
        "delta_bias as a Python float",
        lambda: ss(u(), dl(), A(), B(), C(), delta_bias=0.5),
        Either(Value(lambda: ref(bias=np.full(d, 0.5)), rtol=1e-12), "delta_bias"),
    )
    if torch is not None:
        case(
            "torch requiring grad",
            lambda: ss(*(torch.tensor(v, requires_grad=True) for v in (u0, dl0, A0, B0, C0))),
            Value(lambda: ref(), rtol=1e-12),
        )
        case(
            "torch u, numpy rest",
            lambda: ss(torch.tensor(u0), dl(), A(), B(), C()),
            Error("u", "delta"),
        )
        case("torch int u", lambda: ss(torch.tensor(u0).int(), dl(), A(), B(), C()), Error("u"))
    x3, dlt = np.ones((1, 3, 2)), np.full((1, 3, 2), 0.5)

    def chapter_ref() -> np.ndarray:
        h, out = 0.0, []
        for _ in range(3):
            h = math.exp(-0.5) * h + 1.0
            out.append(h)
        return np.array(out)

    case(
        "chapter_scan",
        lambda: mb.chapter_scan(x3, -np.ones((2, 1)), np.ones((1, 3, 1)), np.ones((1, 3, 1)), dlt)[
            0, :, 0
        ],
        Value(chapter_ref, rtol=1e-12),
    )
    case(
        "chapter_scan A of the wrong shape",
        lambda: mb.chapter_scan(x3, -np.ones((1, 2)), np.ones((1, 3, 1)), np.ones((1, 3, 1)), dlt),
        Error("A"),
    )
    case(
        "chapter_scan method='fast'",
        lambda: mb.chapter_scan(
            x3, -np.ones((2, 1)), np.ones((1, 3, 1)), np.ones((1, 3, 1)), dlt, method="fast"
        ),
        Error("method"),
    )
    s1 = lambda: np.zeros((1, 2, 1))  # noqa: E731

    def step_args() -> tuple[np.ndarray, ...]:
        return np.ones((1, 2)), np.ones((1, 2)), -np.ones((2, 1)), np.ones((1, 1)), np.ones((1, 1))

    case("step basic", lambda: mb.step(s1(), *step_args()), Value(np.array([[1.0, 1.0]])))
    case(
        "step on a read-only state",
        lambda: mb.step(np.broadcast_to(np.zeros((1, 2, 1)), (1, 2, 1)), *step_args()),
        Error("state"),
    )
    case(
        "step on an int state",
        lambda: mb.step(np.zeros((1, 2, 1), int), *step_args()),
        Error("state"),
    )
    case("step on a list state", lambda: mb.step([[[0.0], [0.0]]], *step_args()), Error("state"))
    case(
        "step state_batch_indices out of range",
        lambda: mb.step(np.zeros((3, 2, 1)), *step_args(), state_batch_indices=np.array([5])),
        Error("state_batch_indices"),
    )
    case(
        "step state_batch_indices of floats",
        lambda: mb.step(np.zeros((3, 2, 1)), *step_args(), state_batch_indices=np.array([1.0])),
        Error("state_batch_indices"),
    )
    case(
        "step with x aliasing the state",
        lambda: (
            lambda s: mb.step(
                s, s[:, :, 0], np.ones((1, 2)), -np.ones((2, 1)), np.ones((1, 1)), np.ones((1, 1))
            )
        )(np.ones((1, 2, 1))),
        Value(np.full((1, 2), math.exp(-1) + 1)),
    )

    def step_noncontig() -> Any:
        s = np.zeros((1, 1, 2)).transpose(0, 2, 1)
        mb.step(s, *step_args())
        return s

    case("step writes a non-contiguous state", step_noncontig, Value(np.ones((1, 2, 1))))
    case(
        "step dt_softplus='no'",
        lambda: mb.step(s1(), *step_args(), dt_softplus="no"),
        Error("dt_softplus"),
    )
    case(
        "exps_only of a list",
        lambda: mb.exps_only([[[0.1] * 64]], np.ones((64, 1))),
        Value(np.full((1, 64), math.exp(0.1)), rtol=1e-12),
    )
    case(
        "exps_only of ints",
        lambda: mb.exps_only(np.ones((1, 1, 64), int), np.ones((64, 1), int)),
        Either(Value(np.full((1, 64), math.e), rtol=1e-6), "delta"),
    )
    case(
        "exps_only of complex",
        lambda: mb.exps_only(np.ones((1, 1, 64), complex), np.ones((64, 1))),
        Error("delta"),
    )
    case(
        "exps_only of float16",
        lambda: mb.exps_only(np.ones((1, 1, 64), np.float16), np.ones((64, 1))),
        Either(Value(np.full((1, 64), math.e), rtol=1e-3), "delta"),
    )
    case(
        "exps_only d_model=63",
        lambda: mb.exps_only(np.ones((1, 1, 63)), np.ones((63, 1))),
        Error("delta"),
    )
    # Mamba-2
    H, Pd, G, Ns, L2 = 2, 2, 1, 2, 6
    x2, dt2 = r.normal(size=(1, L2, H, Pd)), r.uniform(0.1, 1, (1, L2, H))
    A2, B2, C2 = (
        -np.exp(r.normal(size=H)),
        r.normal(size=(1, L2, G, Ns)),
        r.normal(size=(1, L2, G, Ns)),
    )

    def ssd_ref() -> np.ndarray:
        y = np.zeros((1, L2, H, Pd))
        for h in range(H):
            s = np.zeros((Pd, Ns))
            for t in range(L2):
                a = math.exp(dt2[0, t, h] * A2[h])
                s = a * s + dt2[0, t, h] * np.outer(x2[0, t, h], B2[0, t, 0])
                y[0, t, h] = s @ C2[0, t, 0]
        return y

    ssd = lambda **kw: mb.ssd_scan(x2.copy(), dt2.copy(), A2.copy(), B2.copy(), C2.copy(), **kw)  # noqa: E731
    case("ssd_scan chunk_size=4", lambda: ssd(chunk_size=4), Value(ssd_ref, rtol=1e-12))
    case("ssd_scan chunk_size=1", lambda: ssd(chunk_size=1), Value(ssd_ref, rtol=1e-12))
    case("ssd_scan chunk_size=0", lambda: ssd(chunk_size=0), Error("chunk_size"))
    case("ssd_scan chunk_size=2.0", lambda: ssd(chunk_size=2.0), Error("chunk_size"))
    case(
        "ssd_scan dt_limit reversed",
        lambda: ssd(chunk_size=4, dt_limit=(1.0, 0.0)),
        Error("dt_limit"),
    )
    case("ssd_scan dt_limit='a'", lambda: ssd(chunk_size=4, dt_limit="a"), Error("dt_limit"))
    case("ssd_scan method='fast'", lambda: ssd(chunk_size=4, method="fast"), Error("method"))
    case(
        "ssd_scan dt_softplus='no'",
        lambda: ssd(chunk_size=4, dt_softplus="no"),
        Error("dt_softplus"),
    )
    case(
        "ssd_scan return_final_states='no'",
        lambda: ssd(chunk_size=4, return_final_states="no"),
        Error("return_final_states"),
    )
    case(
        "ssd_scan return_varlen_states='no'",
        lambda: ssd(chunk_size=4, cu_seqlens=np.array([0, L2]), return_varlen_states="no"),
        Error("return_varlen_states"),
    )
    case(
        "ssd_scan A of shape (2, 1)",
        lambda: mb.ssd_scan(x2, dt2, A2[:, None], B2, C2, chunk_size=4),
        Error("A"),
    )


def nbody_cases() -> None:
    area("nbody")
    from propopt_case_studies import nbody as nb
    from propopt_case_studies.nbody.integrate import leapfrog

    X0, m0 = rng(15).normal(size=(40, 3)), rng(16).uniform(0.5, 1.5, 40)
    X, m = (lambda: X0.copy()), (lambda: m0.copy())
    exact = gravity64(X0, m0)
    bh = nb.barnes_hut

    def close(rtol: float, scale: float = 1.0, X1: Any = None) -> Check:
        def pred(res: Any) -> tuple[bool, str]:
            acc, pot = res
            a0, p0 = exact if X1 is None else gravity64(X1, m0)
            acc = to_np(acc) / scale  # compared in the units of the reference (no overflow)
            ea = float(np.max(np.linalg.norm(acc - a0, axis=1) / np.linalg.norm(a0, axis=1)))
            ep = (
                float(np.max(np.abs(to_np(pot) / scale - p0) / np.abs(p0)))
                if pot is not None
                else 0.0
            )
            return (
                ea <= rtol and ep <= rtol,
                f"max relative error: acc {ea:.2g}, pot {ep:.2g} (allowed {rtol:g})",
            )

        return Check(pred)

    case("barnes_hut theta=0 is exact", lambda: bh(X(), m(), theta=0), close(1e-12))
    case("barnes_hut default theta", lambda: bh(X(), m()), close(2e-2))
    case("theta=-1", lambda: bh(X(), m(), theta=-1), Error("theta"))
    case("theta=nan", lambda: bh(X(), m(), theta=float("nan")), Error("theta"))
    case("theta='0.5'", lambda: bh(X(), m(), theta="0.5"), Error("theta"))
    case("theta=np.array(0.0) (0-d)", lambda: bh(X(), m(), theta=np.array(0.0)), close(1e-12))
    case("G=np.array(1.0) (0-d)", lambda: bh(X(), m(), theta=0, G=np.array(1.0)), close(1e-12))
    case("quadrupole='no'", lambda: bh(X(), m(), quadrupole="no"), Error("quadrupole"))
    case("potential='no'", lambda: bh(X(), m(), potential="no"), Error("potential"))
    case("leaf_size=0", lambda: bh(X(), m(), leaf_size=0), Error("leaf_size"))
    case("group_size=2.0", lambda: bh(X(), m(), group_size=2.0), Error("group_size"))
    case("method='fast'", lambda: bh(X(), m(), method="fast"), Error("method"))
    case("device='gpu'", lambda: bh(X(), m(), device="gpu"), Error("device"))
    case("precision='float16'", lambda: bh(X(), m(), precision="float16"), Error("precision"))
    case("softening='x'", lambda: bh(X(), m(), softening="x"), Error("softening"))
    case("G='1'", lambda: bh(X(), m(), G="1"), Error("G"))
    case("negative masses", lambda: bh(X(), -m()), Error("mass"))
    case("complex masses", lambda: bh(X(), m() + 1j), Error("mass"))
    case("complex positions", lambda: bh(X() + 0j, m()), Error("pos"))
    case("positions as a list", lambda: bh(X().tolist(), m(), theta=0), close(1e-12))
    case("positions (n, 2)", lambda: bh(X()[:, :2], m()), Error("pos"))
    case(
        "no bodies",
        lambda: bh(np.zeros((0, 3)), potential=True),
        Value((np.zeros((0, 3)), np.zeros(0))),
    )
    case(
        "one body",
        lambda: bh(np.zeros((1, 3)), potential=True),
        Value((np.zeros((1, 3)), np.zeros(1))),
    )
    case(
        "coincident bodies, eps=0",
        lambda: bh(np.zeros((5, 3)), potential=True),
        Value((np.zeros((5, 3)), np.zeros(5))),
    )

    def huge_check(res: Any) -> tuple[bool, str]:
        acc, pot = (to_np(v) for v in res)
        ep = float(np.max(np.abs(pot * 1e300 - exact[1]) / np.abs(exact[1])))
        amax = float(np.abs(acc).max())
        return (
            ep <= 1e-12 and amax < 1e-307,
            f"pot relative error {ep:.2g}; |acc| <= {amax:.2g} (exact ~1e-600 underflows)",
        )

    case(
        "positions ~1e300",
        lambda: bh(X() * 1e300, m(), theta=0, potential=True),
        Check(huge_check),
    )
    case(
        "positions ~1e-300 (field overflows)",
        lambda: bh(X() * 1e-300, m()),
        Error("pos", "positions"),
    )
    case("masses ~1e300", lambda: bh(X(), m() * 1e300, theta=0), close(1e-12, 1e300))
    case(
        "float16 positions",
        lambda: bh(X().astype(np.float16), m(), theta=0),
        close(1e-12, X1=X0.astype(np.float16)),
    )
    if ml_dtypes is not None:
        case(
            "bfloat16 positions",
            lambda: bh(X().astype(ml_dtypes.bfloat16), m(), theta=0),
            close(1e-12, X1=X0.astype(ml_dtypes.bfloat16).astype(np.float64)),
        )
    case("big-endian positions", lambda: bh(X().astype(">f8"), m(), theta=0), close(1e-12))
    if torch is not None:
        case(
            "torch positions requiring grad",
            lambda: bh(torch.tensor(X0, requires_grad=True), m(), theta=0),
            close(1e-12),
        )
    case("targets 1-D", lambda: bh(X(), m(), targets=np.zeros(3)), Error("targets"))
    case(
        "eps as a list",
        lambda: bh(X(), m(), eps=[0.1] * 40, theta=0, potential=True),
        Value(lambda: gravity64(X0, m0, eps=0.1), rtol=1e-12),
    )
    case("eps='0.1'", lambda: bh(X(), m(), eps="0.1"), Error("eps"))
    case(
        "Octree.build box not holding the bodies",
        lambda: nb.Octree.build(X(), m(), box=(np.zeros(3), np.ones(3))),
        Error("box", "points"),
    )
    case("Octree.build box='x'", lambda: nb.Octree.build(X(), m(), box="x"), Error("box"))
    case("fmm tol=0", lambda: nb.fmm(X(), m(), tol=0), Error("tol"))
    case("fmm tol='1e-3'", lambda: nb.fmm(X(), m(), tol="1e-3"), Error("tol"))
    case("fmm tol=nan", lambda: nb.fmm(X(), m(), tol=float("nan")), Error("tol"))
    case("fmm quantile=0.9", lambda: nb.fmm(X(), m(), quantile=0.9), Error("quantile"))
    case("fmm quantile=True", lambda: nb.fmm(X(), m(), quantile=True), Error("quantile"))
    case("fmm quantile='0.5'", lambda: nb.fmm(X(), m(), quantile="0.5"), Error("quantile"))
    case("fmm order=2.5", lambda: nb.fmm(X(), m(), order=2.5), Error("order"))
    case("fmm theta=-1", lambda: nb.fmm(X(), m(), theta=-1), Error("theta"))
    case("fmm potential='no'", lambda: nb.fmm(X(), m(), potential="no"), Error("potential"))
    case(
        "fmm tol=np.float32(1e-6), G=np.array(1.0)",
        lambda: nb.fmm(X(), m(), tol=np.float32(1e-6), G=np.array(1.0), potential=True),
        close(1e-5),
    )
    case("fmm tol=1e-6", lambda: nb.fmm(X(), m(), tol=1e-6, potential=True), close(1e-5))
    case(
        "fmm no bodies",
        lambda: nb.fmm(np.zeros((0, 3)), potential=True),
        Value((np.zeros((0, 3)), np.zeros(0))),
    )
    case(
        "fmm coincident bodies",
        lambda: nb.fmm(np.zeros((5, 3)), potential=True),
        Value((np.zeros((5, 3)), np.zeros(5))),
    )
    case(
        "fmm positions ~1e-300 (field overflows)",
        lambda: nb.fmm(X() * 1e-300, m()),
        Error("pos", "positions"),
    )
    case("fmm leaf_size=0", lambda: nb.fmm(X(), m(), leaf_size=0), Error("leaf_size"))
    case("leapfrog dt=0", lambda: leapfrog(X(), X(), m(), dt=0, steps=1), Error("dt"))
    case("leapfrog steps=1.0", lambda: leapfrog(X(), X(), m(), dt=0.1, steps=1.0), Error("steps"))
    case(
        "leapfrog vel of another shape",
        lambda: leapfrog(X(), X()[:5], m(), dt=0.1, steps=1),
        Error("vel"),
    )
    case(
        "leapfrog eps='0.1'",
        lambda: leapfrog(X(), X(), m(), dt=0.1, steps=1, eps="0.1"),
        Error("eps"),
    )
    case(
        "leapfrog theta='a'",
        lambda: leapfrog(X(), X(), m(), dt=0.1, steps=1, theta="a"),
        Error("theta"),
    )
    case(
        "leapfrog without pos",
        lambda: leapfrog(dt=0.1, steps=1),
        Error("pos"),
        reading=(UNCLEAR, "says 'pos has dtype object' when pos is missing", "dtype object"),
    )
    case("leapfrog without vel", lambda: leapfrog(X(), dt=0.1, steps=1), Error("vel"))
    case(
        "leapfrog quadrupole='no'",
        lambda: leapfrog(X(), X(), m(), dt=0.1, steps=1, method="direct", quadrupole="no"),
        Error("quadrupole"),
    )
    case(
        "leapfrog progress='no'",
        lambda: leapfrog(X(), X(), m(), dt=0.1, steps=1, method="direct", progress="no"),
        Error("progress"),
    )
    case("plummer_sphere(-1)", lambda: nb.plummer_sphere(-1), Error("n"))
    case("plummer_sphere(2.0)", lambda: nb.plummer_sphere(2.0), Error("n"))
    case("plummer_sphere(a='1')", lambda: nb.plummer_sphere(5, a="1"), Error("a"))
    case(
        "plummer_sphere(dtype=np.int32)",
        lambda: nb.plummer_sphere(5, dtype=np.int32),
        Error("dtype"),
    )
    case(
        "plummer_sphere(dtype='banana')",
        lambda: nb.plummer_sphere(5, dtype="banana"),
        Error("dtype"),
    )
    case("plummer_sphere(seed='a')", lambda: nb.plummer_sphere(5, seed="a"), Error("seed"))
    case(
        "plummer_sphere(dtype=np.float32)",
        lambda: nb.plummer_sphere(5, dtype=np.float32),
        Value(lambda: tuple(v.astype(np.float32) for v in nb.plummer_sphere(5)), dtype="float32"),
    )
    case(
        "plummer_sphere(1)",
        lambda: nb.plummer_sphere(1),
        Value((np.zeros((1, 3)), np.zeros((1, 3)), np.ones(1))),
    )
    case(
        "nbody_naive of int arrays",
        lambda: nb.nbody_naive(np.array([[0, 0, 0], [2, 0, 0]]), np.array([1, 3]), potential=True),
        Either(
            Value((np.array([[0.75, 0, 0], [-0.25, 0, 0]]), np.array([-1.5, -0.5])), rtol=1e-9),
            "pos",
        ),
    )
    case(
        "nbody_naive of lists",
        lambda: nb.nbody_naive([[0, 0, 0], [1, 0, 0]], [1, 1], potential=True),
        Either(Value(lambda: gravity64([[0, 0, 0], [1, 0, 0]]), rtol=1e-9), "pos"),
    )
    F = nb.field
    case("field method='direct' is exact", lambda: F(X(), m(), method="direct",
                                                     potential=True), close(1e-12))  # fmt: skip
    case("field method='fmm'", lambda: F(X(), m(), method="fmm", potential=True), close(1e-3))
    case("field method='fast'", lambda: F(X(), m(), method="fast"), Error("method"))
    case("field device='gpu'", lambda: F(X(), m(), device="gpu"), Error("device"))
    case("field fmm on cuda", lambda: F(X(), m(), method="fmm", device="cuda"), Error("device"))
    case("field tol with the tree", lambda: F(X(), m(), method="tree", tol=1e-3), Error("tol"))
    case("field theta with direct", lambda: F(X(), m(), method="direct", theta=0.5),
         Error("theta"))  # fmt: skip
    case("field fmm theta=1", lambda: F(X(), m(), method="fmm", theta=1.0), Error("theta"))
    case(
        "field auto tol, quantile=0.9",
        lambda: F(X(), m(), tol=1e-4, quantile=0.9),
        Error("quantile"),
    )
    case("field tree negative masses", lambda: F(X(), -m(), method="tree"), Error("mass"))
    case("field fmm negative masses", lambda: F(X(), -m(), method="fmm"), Error("mass"))
    case("field direct negative masses", lambda: F(X(), -m(), method="direct"), Error("mass"))
    case("field auto negative masses", lambda: F(X(), -m()), Error("mass"))
    case("field dask without client", lambda: F(X(), m(), device="dask", targets=X()),
         Error("client"))  # fmt: skip


def streaming_cases() -> None:
    area("streaming_topk")
    from propopt_case_studies import streaming_topk as st

    def rec() -> np.ndarray:
        r = np.zeros(6, dtype=[("score", "f8"), ("id", "i8")])
        r["score"] = [3, 1, 4, 1, 5, 9]
        r["id"] = np.arange(6) * 10
        return r

    case(
        "top_k_chunks of two chunks",
        lambda: st.top_k_chunks([rec()[:3], rec()[3:]], 2)[1],
        Value(np.array([5, 4])),
    )
    case("k=-1", lambda: st.top_k_chunks([rec()], -1), Error("k"))
    case("score column missing", lambda: st.top_k_chunks([rec()], 2, score="x"), Error("score"))
    case("threads=0", lambda: st.top_k_chunks([rec()], 2, threads=0), Error("threads"))
    case(
        "threads=np.int64(1)",
        lambda: st.top_k_chunks([rec()], 2, threads=np.int64(1))[1],
        Either(Value(np.array([5, 4])), "threads"),
    )
    case(
        "chunks with other fields",
        lambda: st.top_k_chunks([rec(), rec()[["score"]]], 2),
        Error("chunk", "chunks"),
    )
    case(
        "plain arrays as chunks",
        lambda: st.top_k_chunks([np.array([1.0, 2.0])], 1),
        Error("chunk", "chunks"),
    )
    case("chunks=5 (not iterable)", lambda: st.top_k_chunks(5, 2), Error("chunks"))
    case(
        "generator of chunks",
        lambda: st.top_k_chunks((c for c in [rec()[:2], rec()[2:]]), 3)[1],
        Value(np.array([5, 4, 2])),
    )
    case("largest='no'", lambda: st.top_k_chunks([rec()], 2, largest="no"), Error("largest"))
    if pd is not None:
        case(
            "DataFrames",
            lambda: st.top_k_chunks(
                [pd.DataFrame({"score": [1.0, 5.0, 2.0]}), pd.DataFrame({"score": [7.0, 0.0]})], 2
            )[1],
            Value(np.array([3, 1])),
        )
        case(
            "score dtype changes between chunks (depends on the thread schedule)",
            lambda: st.top_k_chunks(
                [pd.DataFrame({"score": [1.0, 5.0]}), pd.DataFrame({"score": [7, 0]})], 2
            ),
            Error("score"),
        )
        case(
            "score dtype changes between chunks, int first",
            lambda: st.top_k_chunks(
                [pd.DataFrame({"score": [7, 0]}), pd.DataFrame({"score": [1.0, 5.0]})], 2
            ),
            Error("score"),
        )
        case(
            "one DataFrame as chunks",
            lambda: st.top_k_chunks(pd.DataFrame({"score": [1.0, 5.0]}), 1),
            Error("chunks"),
        )
        case(
            "structured array then DataFrame",
            lambda: st.top_k_chunks([rec(), pd.DataFrame({"score": [7.0, 0.0]})], 2),
            Error("chunk", "chunks"),
        )
        case(
            "string score column",
            lambda: st.top_k_chunks([pd.DataFrame({"score": ["a", "b"]})], 1),
            Error("score"),
        )
    if da is not None:
        case(
            "top_k_dask_array",
            lambda: st.top_k_dask_array(da.from_array(np.arange(10.0), chunks=3), 2),
            Value((np.array([9.0, 8.0]), np.array([9, 8]))),
        )
        case(
            "top_k_dask_array of numpy", lambda: st.top_k_dask_array(np.arange(10.0), 2), Error("x")
        )
        case(
            "top_k_dask_array 2-D",
            lambda: st.top_k_dask_array(da.ones((3, 3), chunks=2), 2),
            Error("x"),
        )


SECTIONS = {
    "scan": scan_cases,
    "monoid": monoid_cases,
    "topk": topk_cases,
    "topk_summary": topk_summary_cases,
    "low_rank": lowrank_cases,
    "moments": moments_cases,
    "morton": morton_cases,
    "tiling": tiling_cases,
    "symmetry": symmetry_cases,
    "misra_gries": misra_gries_cases,
    "audit": audit_cases,
    "threads": threads_cases,
    "mamba": mamba_cases,
    "nbody": nbody_cases,
    "streaming": streaming_cases,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only", action="append", choices=sorted(SECTIONS), help="run only these sections"
    )
    ap.add_argument(
        "--strict", action="store_true", help="exit 1 if a case is unclear or silently wrong"
    )
    args = ap.parse_args(argv)
    for name, build in SECTIONS.items():
        if not args.only or name in args.only:
            build()
    t0 = time.perf_counter()
    width = max(map(len, CLASSES))
    for c in CASES:
        run_case(c)
        print(
            f"[{c.result:<{width}}] {c.area}: {c.name} ({c.seconds:.2f}s) -- {c.detail}", flush=True
        )
    total = time.perf_counter() - t0
    areas = list(dict.fromkeys(c.area for c in CASES))
    counts = {a: collections.Counter(c.result for c in CASES if c.area == a) for a in areas}
    head = f"{'area':<30}" + "".join(f"{k:>15}" for k in CLASSES) + f"{'cases':>8}"
    print("\n" + head + "\n" + "-" * len(head))
    for a in areas:
        print(
            f"{a:<30}"
            + "".join(f"{counts[a][k]:>15}" for k in CLASSES)
            + f"{sum(counts[a].values()):>8}"
        )
    allc = collections.Counter(c.result for c in CASES)
    print(
        "-" * len(head)
        + "\n"
        + f"{'total':<30}"
        + "".join(f"{allc[k]:>15}" for k in CLASSES)
        + f"{len(CASES):>8}"
    )
    print(f"\n{len(CASES)} cases in {total:.1f} s")
    bad = [c for c in CASES if c.result in (UNCLEAR, SILENT)]
    if bad:
        print("\nunclear or silently wrong:")
        for c in bad:
            print(f"  [{c.result}] {c.area}: {c.name} -- {c.detail}")
    return 1 if args.strict and bad else 0


if __name__ == "__main__":
    sys.exit(main())
