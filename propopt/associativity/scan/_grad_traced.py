"""The fused backward of a user's Monoid: its combine's Jacobians derived once, by sympy.

For the inclusive scan ``y_s = y_{s-1} . x_s`` (scan order ``s``; an
exclusive scan reads ``gy`` one position later and ``y_{s-1}`` from its own
output at ``s``), the backward is one reverse walk::

    g_{s-1} = gy_{s-1} + J_L(y_{s-1}, x_s)^T g_s       grad_x_s = J_R(y_{s-1}, x_s)^T g_s
    g_{n-1} = gy_{n-1}                                  grad_x_0 = g_0

Both products are the vector-Jacobian product of the combine at one point,
so each step evaluates the combine's derivatives once.  :func:`derive` calls
the combine on ``sympy`` symbols (``a_1..a_k, b_1..b_k``), differentiates the
``k`` results, and keeps the products with a symbolic ``g``; the generated
numba source holds them after common-subexpression elimination, with the
structural zeros gone (an affine combine ``(a1 a2, a2 b1 + b2)`` costs what
the built-in ``linear_recurrence`` costs: ``g_{s-1} = a_s g_s``,
``grad_a_s = h_{s-1} g_s``, ``grad_b_s = g_s``) and only the components the
loss reaches (``live``) walked.  Long rows are cut into one chunk per
thread, as ``_grad_kernels`` does: each chunk is reduced to the affine map
``g_lo = G + P g_hi`` (``P`` the product of the left Jacobians, with the
sparsity their product keeps), the carries are chained, and each chunk is
walked again from its carry, two lanes at a time (``_grad_source``).  A
gradient that is ``g`` itself is flushed to a zero of its sign below the
smallest normal where it is written, as the built-in monoids' backward
flushes it; the walked ``g`` is flushed every ``FLUSH`` positions (a test at
each would lengthen the dependency chain that bounds the walk), so that a
decaying gradient runs on subnormals for a few steps at most.  The built-in
:data:`~propopt.mul`, :data:`~propopt.linear_recurrence` and
:data:`~propopt.matmul2x2` trace too and take this route.

A combine that does not trace (a branch on a value, a ``math`` or NumPy
call, anything but arithmetic and powers) gives None, and the caller keeps
the torch autograd route: never a wrong gradient, only a slower one.  The
generated source holds the derived expressions themselves, so it is keyed,
written and cached on disk by what it computes, as the forward kernels are;
a record beside the kernels (:class:`Traced`) keeps those sources, so a
later process loads them without importing sympy or deriving again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ... import _jit, files, threads
from ..._memory import mapped_empty, settle_allocator
from ..monoid import Monoid
from ..segmented import Segmented
from ._grad_source import source

#: rows up to this many elements in all run on the calling thread; longer ones
#: are cut into one chunk per thread that threads.sized() grants (it grants one
#: where the other cores are busy).  Forward+backward of linear_recurrence with
#: the loss on h and A at 2^20 float32, side by side on a 2-core AMD EPYC:
#: 5.7 ms chunked against 7.0-8.0 ms on one thread when the machine was quiet,
#: and 15.9-16.0 ms against 16.2-27.4 ms with one core kept busy
SERIAL_UP_TO = 1 << 19

_derived: dict[tuple[str, str], Traced | None] = {}


class Derived:
    """The combine's results as sympy expressions of ``a_1..a_k, b_1..b_k``."""

    def __init__(self, k: int, a: list[Any], b: list[Any], outs: list[Any]) -> None:
        import sympy

        self.k, self.a, self.b, self.outs = k, a, b, outs
        self.jl = [[sympy.diff(o, x) for x in a] for o in outs]  # d c_j / d a_i
        self.jr = [[sympy.diff(o, x) for x in b] for o in outs]  # d c_j / d b_i


class Traced:
    """A combine that traces: its arity, which components feed which, and its kernels.

    The sources of its kernels are kept on disk beside the kernels, in a
    record named by what the combine computes and by this route's own code
    (:func:`_record_path`), so a process that finds them there loads the
    kernels without importing sympy or deriving anything again.
    """

    def __init__(self, k: int, reach: list[list[bool]], derived: Any, record: Path | None,
                 sources: dict[str, str]) -> None:  # fmt: skip
        self.k = k
        self.reach = reach  # reach[j][i]: d c_j / d a_i is not structurally zero
        self._derived = derived  # () -> Derived, called only for a source not yet stored
        self._record = record
        self._sources = sources
        self.modules: dict[tuple[Any, ...], Any] = {}

    def live(self, present: Sequence[bool]) -> tuple[int, ...]:
        """The components whose ``g`` can be nonzero: those with a gradient, and what they reach."""
        live = {i for i, p in enumerate(present) if p}
        while True:
            more = {i for j in live for i in range(self.k) if self.reach[j][i]} - live
            if not more:
                return tuple(sorted(live))
            live |= more

    def source(self, live: tuple[int, ...], needs: tuple[bool, ...],
               present: tuple[bool, ...], dtype: np.dtype) -> str:  # fmt: skip
        """The kernels' module source, from the record where it is there."""
        key = f"{live}|{needs}|{present}|{dtype.name}"
        src = self._sources.get(key)
        if src is None:
            src = self._sources[key] = source(self._derived(), live, needs, present, dtype)
            _save(self._record, {"k": self.k, "reach": self.reach, "sources": self._sources})
        return src


def _code_version() -> str:
    """What the stored sources depend on besides the combine: this route's code and sympy's."""
    global _VERSION
    if _VERSION is None:
        from importlib import metadata

        from . import _grad_source

        h = hashlib.sha256()
        for mod in (__file__, _grad_source.__file__):
            h.update(Path(mod).read_bytes())
        try:
            h.update(metadata.version("sympy").encode())
        except metadata.PackageNotFoundError:
            pass
        _VERSION = h.hexdigest()
    return _VERSION


_VERSION: str | None = None


def _record_path(spliced: Any) -> Path | None:
    """Where the record of a combine written out in full is kept (None: one bound in memory)."""
    if spliced.namespace is not None:
        return None
    digest = hashlib.sha256((spliced.source + spliced.key + _code_version()).encode())
    return _jit.cache_dir() / "grad_traced" / f"{digest.hexdigest()[:24]}.json"


def _load(path: Path | None) -> dict[str, Any] | None:
    """The stored record, or None where there is none or it does not read as one."""
    if path is None:
        return None
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(rec, dict) and (
        rec.get("traced") is False
        or (
            isinstance(rec.get("k"), int)
            and isinstance(rec.get("reach"), list)
            and len(rec["reach"]) == rec["k"]
            and all(isinstance(r, list) and len(r) == rec["k"] for r in rec["reach"])
            and isinstance(rec.get("sources"), dict)
            and all(isinstance(v, str) for v in rec["sources"].values())
        )
    )
    return rec if ok else None


def _save(path: Path | None, rec: dict[str, Any]) -> None:
    """Write the record (best effort: a folder that cannot be written costs a derivation)."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_text(path, json.dumps(rec))
    except OSError:
        pass


def derive(fn: Monoid) -> Traced | None:
    """The combine of ``fn`` traced on sympy symbols, or None where it does not trace."""
    if isinstance(fn, Segmented) or fn.arity < 1:
        return None
    spliced = _jit.splice(fn.scalar, "_c")
    key = (spliced.source, spliced.key)
    if key in _derived:
        return _derived[key]
    path = _record_path(spliced)
    rec = _load(path)
    traced: Traced | None
    if rec is not None:
        traced = None
        if rec.get("traced") is not False:
            once: list[Derived | None] = []

            def later() -> Derived:
                if not once:
                    once.append(_trace(fn))
                if once[0] is None:  # pragma: no cover - the record said it traces
                    raise RuntimeError("propopt: the stored trace of this combine is stale")
                return once[0]

            traced = Traced(rec["k"], rec["reach"], later, path, dict(rec["sources"]))
    else:
        d = _trace(fn)
        if d is None:
            traced = None
            _save(path, {"traced": False})
        else:
            reach = [[bool(d.jl[j][i] != 0) for i in range(d.k)] for j in range(d.k)]
            traced = Traced(d.k, reach, lambda: d, path, {})
            _save(path, {"k": d.k, "reach": reach, "sources": {}})
    _derived[key] = traced
    return traced


#: what the derived expressions may hold (each prints as numba compiles it)
_ALLOWED = ("Symbol", "Add", "Mul", "Pow", "exp", "log")


def _trace(fn: Monoid) -> Derived | None:
    try:
        import sympy
    except ImportError:  # pragma: no cover - sympy comes with torch
        return None
    k = fn.arity
    a = [sympy.Symbol(f"a{i}", real=True) for i in range(k)]
    b = [sympy.Symbol(f"b{i}", real=True) for i in range(k)]
    try:
        out = fn.scalar(*a, *b)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        outs = [sympy.sympify(o, strict=True) for o in outs]
        if len(outs) != k:
            return None
        d = Derived(k, a, b, outs)
    except Exception:  # a branch on a value, a math call, an object sympy does not take
        return None
    syms = set(a) | set(b)
    for e in [*outs, *(x for row in d.jl + d.jr for x in row)]:
        if not isinstance(e, sympy.Expr) or not e.free_symbols <= syms:
            return None
        for node in sympy.preorder_traversal(e):
            if not (node.is_Number and node.is_finite) and type(node).__name__ not in _ALLOWED:
                return None
    return d


def _module(d: Traced, live: tuple[int, ...], needs: tuple[bool, ...],
            present: tuple[bool, ...], dtype: np.dtype) -> Any:  # fmt: skip
    key = (live, needs, present, dtype)
    mod = d.modules.get(key)
    if mod is None:
        src = d.source(live, needs, present, dtype)
        mod = d.modules[key] = _jit.load_module(src, f"grad_traced_{d.k}_{dtype.name}")
    return mod


def backward(
    fn: Monoid,
    xs: Sequence[np.ndarray],
    ys: Sequence[np.ndarray],
    gys: Sequence[Any],
    needs: Sequence[bool],
    axis: int,
    reverse: bool,
    exclusive: bool,
) -> list[Any] | None:
    """The inputs' gradients of a scan of ``fn`` by the traced kernel (None: not taken).

    Parameters
    ----------
    fn : Monoid
        The scanned monoid.
    xs, ys : list of numpy.ndarray
        The scan's inputs and outputs (the exclusive outputs for
        ``exclusive=True``), all of one shape.
    gys : list of numpy.ndarray or None
        The outputs' gradients, any strides (None: zero).
    needs : list of bool
        Which inputs want a gradient.
    axis, reverse, exclusive
        The scan's.

    Returns
    -------
    list of numpy.ndarray or None, or None
        One gradient per input (None where not needed), or None when this
        route does not take the scan: the combine does not trace, the dtype
        is not float32 or float64, or the elements are not scalars along the
        last axis of more than one element.
    """
    x0 = xs[0]
    shape, dt = x0.shape, x0.dtype
    if dt not in (np.float32, np.float64) or len(shape) == 0:
        return None
    n = shape[axis]
    if math.prod(shape[axis + 1 :]) != 1 or n < 2:
        return None
    arrays = [*xs, *ys, *(g for g in gys if g is not None)]
    if any(x.dtype != dt or x.shape != shape for x in arrays):
        return None
    d = derive(fn)
    if d is None:
        return None
    k = d.k
    present = tuple(g is not None for g in gys)
    wanted = tuple(bool(v) for v in needs)
    if not any(present) or not any(wanted):
        return [None] * k
    live = d.live(present)
    mod = _module(d, live, wanted, present, dt)
    p = math.prod(shape[:axis])
    X = tuple(x.reshape(p, n) for x in xs)
    Y = tuple(y.reshape(p, n) for y in ys)
    GY = tuple(X[0] if g is None else g.reshape(p, n) for g in gys)
    if p * n * dt.itemsize >= 1 << 17:
        settle_allocator()
    O = tuple(mapped_empty((p, n), dt) for i in range(k) if wanted[i])
    tiny, zero, one = dt.type(np.finfo(dt).tiny), dt.type(0), dt.type(1)
    if p * n <= SERIAL_UP_TO:
        mod.walk(X, Y, GY, O, bool(reverse), bool(exclusive), tiny, zero, one)
    else:
        with threads.sized() as T:
            if T == 1:
                mod.walk(X, Y, GY, O, bool(reverse), bool(exclusive), tiny, zero, one)
            else:
                chunks = 1 if p >= 2 * T else max(1, min(T, n // 64))
                mod.chunked(X, Y, GY, O, bool(reverse), bool(exclusive), chunks, tiny, zero, one)
    it = iter(O)
    return [next(it).reshape(shape) if wanted[i] else None for i in range(k)]
