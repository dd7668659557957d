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
walked again from its carry.  ``g`` is flushed to a zero of its sign below
the smallest normal, as the built-in monoids' backward is.

A combine that does not trace (a branch on a value, a ``math`` or NumPy
call, anything but arithmetic and powers) gives None, and the caller keeps
the torch autograd route: never a wrong gradient, only a slower one.  The
generated source holds the derived expressions themselves, so it is keyed,
written and cached on disk by what it computes, as the forward kernels are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import _jit, threads
from ..._memory import mapped_empty, settle_allocator
from ..monoid import Monoid
from ..segmented import Segmented

#: rows up to this many elements in all run on the calling thread
SERIAL_UP_TO = 1 << 16

#: interleaved lanes of the reduce phase (independent dependency chains)
LANES = 4

_derived: dict[tuple[str, str], Derived | None] = {}


class Derived:
    """The combine's results as sympy expressions of ``a_1..a_k, b_1..b_k``."""

    def __init__(self, k: int, a: list[Any], b: list[Any], outs: list[Any]) -> None:
        import sympy

        self.k, self.a, self.b, self.outs = k, a, b, outs
        self.jl = [[sympy.diff(o, x) for x in a] for o in outs]  # d c_j / d a_i
        self.jr = [[sympy.diff(o, x) for x in b] for o in outs]  # d c_j / d b_i
        self.modules: dict[tuple[Any, ...], Any] = {}

    def live(self, present: Sequence[bool]) -> tuple[int, ...]:
        """The components whose ``g`` can be nonzero: those with a gradient, and what they reach."""
        live = {i for i, p in enumerate(present) if p}
        while True:
            more = {i for j in live for i in range(self.k) if self.jl[j][i] != 0} - live
            if not more:
                return tuple(sorted(live))
            live |= more


def derive(fn: Monoid) -> Derived | None:
    """The combine of ``fn`` traced on sympy symbols, or None where it does not trace."""
    if isinstance(fn, Segmented) or fn.arity < 1:
        return None
    spliced = _jit.splice(fn.scalar, "_c")
    key = (spliced.source, spliced.key)
    if key not in _derived:
        _derived[key] = _trace(fn)
    return _derived[key]


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


# ------------------------------------------------------------------ code generation
def _printer(consts: dict[str, float]) -> Any:
    from sympy.printing.pycode import PythonCodePrinter

    class Printer(PythonCodePrinter):  # type: ignore[misc]
        """Numbers as constants of the element dtype, small powers as products."""

        def _number(self, v: Any) -> str:
            x = float(v)
            for name, c in consts.items():
                if c == x and math.copysign(1, c) == math.copysign(1, x):
                    return name
            name = f"K{len(consts)}"
            consts[name] = x
            return name

        _print_Integer = _print_Rational = _print_Float = _number
        _print_One = _print_Zero = _print_NegativeOne = _print_Half = _number

        def _print_Pow(self, e: Any, rational: bool = False) -> str:
            import sympy

            base, x = f"({self._print(e.base)})", e.exp
            if x.is_Integer and 1 <= abs(int(x)) <= 4:
                prod = "(" + " * ".join([base] * abs(int(x))) + ")"
                return prod if x > 0 else f"({self._number(1)} / {prod})"
            if x == sympy.Rational(1, 2):
                return f"math.sqrt{base}"
            if x == sympy.Rational(-1, 2):
                return f"({self._number(1)} / math.sqrt{base})"
            return f"({base} ** ({self._print(x)}))"

    return Printer({"fully_qualified_modules": True})


def _function(name: str, args: list[str], exprs: list[Any], consts: dict[str, float]) -> str:
    """An inlined numba function returning ``exprs`` (sympy) of ``args``, after CSE."""
    import sympy

    pr = _printer(consts)
    subs, reduced = sympy.cse(exprs, symbols=sympy.numbered_symbols("t"), optimizations=None)
    lines = ["@numba.njit(inline='always', fastmath=FM)", f"def {name}({', '.join(args)}):"]
    lines += [f"    {s} = {pr.doprint(e)}" for s, e in subs]
    lines.append(f"    return ({''.join(pr.doprint(e) + ', ' for e in reduced)})")
    return "\n".join(lines) + "\n"


def _pattern(m: np.ndarray) -> np.ndarray:
    """The sparsity of every product of matrices with pattern ``m``, the identity included."""
    p = np.eye(len(m), dtype=bool)
    while True:
        q = p | ((m.astype(int) @ p.astype(int)) > 0)
        if (q == p).all():
            return p
        p = q


def _source(d: Derived, live: tuple[int, ...], needs: tuple[bool, ...],
            present: tuple[bool, ...], dtype: np.dtype) -> str:  # fmt: skip
    """The generated module: ``walk`` (one thread) and ``chunked`` (threads over chunks)."""
    import sympy

    k, m = d.k, len(live)
    g = [sympy.Symbol(f"g{j}", real=True) for j in range(k)]
    gl = [g[j] if j in live else 0 for j in range(k)]
    # left_l = sum_j J_L[j][l] g_j for l in live; right_i = sum_j J_R[j][i] g_j for i needed
    left = [sum(d.jl[j][i] * gl[j] for j in live) for i in live]
    wanted = [i for i in range(k) if needs[i]]
    right = [sum(d.jr[j][i] * gl[j] for j in live) for i in wanted]
    used = set().union(*(sympy.sympify(e).free_symbols for e in left + right))
    ua = [i for i in range(k) if d.a[i] in used]  # y_{s-1} components read
    ub = [i for i in range(k) if d.b[i] in used]  # x_s components read
    ab = [f"a{i}" for i in ua] + [f"b{i}" for i in ub]
    consts: dict[str, float] = {}
    out: list[str] = []
    vjp = [sympy.sympify(x) for x in left + right]
    out.append(_function("vjp", ab + [f"g{j}" for j in live], vjp, consts))
    # the left map on columns of P (pattern) and on G
    mpat = np.array([[d.jl[live[c]][live[r]] != 0 for c in range(m)] for r in range(m)])
    pat = _pattern(mpat)
    cols = []
    for c in range(m):
        rows = [r for r in range(m) if pat[r, c]]
        cols.append(rows)
        col = {live[r]: sympy.Symbol(f"g{live[r]}", real=True) for r in rows}
        ex = [sympy.sympify(sum(d.jl[j][live[r]] * col[j] for j in col)) for r in rows]
        out.append(_function(f"col{c}", ab + [f"g{live[r]}" for r in rows], ex, consts))
    dt = np.dtype(dtype).name
    head = ["import math", "import numba", "import numpy as np", "from numba import prange", "",
            'FM = {"contract"}', f"DT = np.{dt}"]  # fmt: skip
    head += [f"{n} = DT(float.fromhex({v.hex()!r}))" for n, v in consts.items()]
    body = _kernels(k, m, live, wanted, present, ua, ub, cols)
    return "\n".join(head) + "\n\n\n" + "\n\n".join(out) + "\n\n" + body


def _kernels(k: int, m: int, live: tuple[int, ...], wanted: list[int], present: tuple[bool, ...],
             ua: list[int], ub: list[int], cols: list[list[int]]) -> str:  # fmt: skip
    """The walk, reduce and chunked kernels, as source (see the module docstring)."""
    L: list[str] = []
    w = L.append
    G = [f"g{j}" for j in live]
    j_ = ", ".join

    def loads(ind: str, yi: str, xi: str) -> None:
        for i in ua:
            w(f"{ind}a{i} = Y{i}[p, {yi}]")
        for i in ub:
            w(f"{ind}b{i} = X{i}[p, {xi}]")

    ab = j_([f"a{i}" for i in ua] + [f"b{i}" for i in ub])
    abc = ab + ", " if ab else ""

    def gy(j: int, at: str) -> str:
        return f"GY{j}[p, {at}]" if present[j] else "zero"

    args = "X, Y, GY, O, p, lo, hi, base, d, e, tiny, zero"
    unpack = (
        "".join(f"    X{i} = X[{i}]\n" for i in ub)
        + "".join(f"    Y{i} = Y[{i}]\n" for i in ua)
        + "".join(f"    GY{j} = GY[{j}]\n" for j in live if present[j])
        + "".join(f"    O{i} = O[{q}]\n" for q, i in enumerate(wanted))
    )
    # walk [lo, hi) down from g_hi = C (carried) or from the last position
    w("@numba.njit(nogil=True, cache=True, fastmath=FM)")
    w(f"def _walk({args}, carried, C):")
    L.append(unpack.rstrip("\n"))
    w("    s = hi - 1")
    w("    if carried:")
    w(f"        {j_(G)}, = C")
    loads("        ", "base + d * (hi - 1 + e)", "base + d * hi")
    w(f"        r = vjp({abc}{j_(G)})")
    for q, j in enumerate(live):
        w(f"        g{j} = _ftz({gy(j, 'base + d * (s + e)')} + r[{q}], tiny, zero)")
    w("    elif e == 1:")
    w("        " + "; ".join(f"g{j} = zero" for j in live))
    w("    else:")
    w("        " + "; ".join(f"g{j} = {gy(j, 'base + d * s')}" for j in live))
    w("    while True:")
    w("        u = base + d * s")
    w("        if s == 0:")
    for i in wanted:
        w(f"            O{i}[p, u] = {f'g{i}' if i in live else 'zero'}")
    w("            break")
    loads("        ", "base + d * (s - 1 + e)", "u")
    w(f"        r = vjp({abc}{j_(G)})")
    for q, i in enumerate(wanted):
        w(f"        O{i}[p, u] = r[{m + q}]")
    w("        if s == lo:")
    w("            break")
    w("        s -= 1")
    for q, j in enumerate(live):
        w(f"        g{j} = _ftz({gy(j, 'base + d * (s + e)')} + r[{q}], tiny, zero)")
    w("")
    # reduce [lo, hi) to (G, P): g_lo = G + P g_hi; the top [lo + LANES ln, hi) first,
    # then LANES lanes of ln positions walked together, composed from the top
    P = [[f"{r}_{c}" for r in cols[c]] for c in range(m)]  # column c: its pattern rows
    flatP = [x for col in P for x in col]

    def state(t: str) -> tuple[list[str], list[str]]:
        return [f"G{t}_{q}" for q in range(m)], [f"P{t}_{x}" for x in flatP]

    def init(ind: str, t: str) -> None:
        gs, ps = state(t)
        for x in gs:
            w(f"{ind}{x} = zero")
        for x, name in zip(flatP, ps):
            r, c = x.split("_")
            w(f"{ind}{name} = {'one' if r == c else 'zero'}")

    def step(ind: str, t: str, s: str) -> None:
        gs = state(t)[0]
        loads(ind, f"base + d * ({s} - 1 + e)", f"base + d * {s}")
        w(f"{ind}r = vjp({abc}{j_(gs)})")
        for q, j in enumerate(live):
            w(f"{ind}{gs[q]} = _ftz({gy(j, f'base + d * ({s} - 1 + e)')} + r[{q}], tiny, zero)")
        for c in range(m):
            cps = [f"P{t}_{x}" for x in P[c]]
            w(f"{ind}r = col{c}({abc}{j_(cps)})")
            for q, x in enumerate(cps):
                w(f"{ind}{x} = _ftz(r[{q}], tiny, zero)")

    def compose(ind: str, t: str, u: str) -> None:
        """(G_t, P_t) <- (G_t + P_t G_u, P_t P_u): map t applied after map u."""
        gt, pt = state(t)
        gu = state(u)[0]
        for q in range(m):
            terms = [f"P{t}_{q}_{c} * {gu[c]}" for c in range(m) if q in cols[c]]
            w(f"{ind}n{q} = _ftz({gt[q]} + {' + '.join(terms)}, tiny, zero)")
        for c in range(m):
            for r in cols[c]:
                terms = [f"P{t}_{r}_{v} * P{u}_{v}_{c}" for v in range(m)
                         if r in cols[v] and v in cols[c]]  # fmt: skip
                w(f"{ind}N{r}_{c} = _ftz({' + '.join(terms) or 'zero'}, tiny, zero)")
        w(f"{ind}{j_(gt + pt)} = {j_([f'n{q}' for q in range(m)] + ['N' + x for x in flatP])}")

    w("@numba.njit(nogil=True, cache=True, fastmath=FM)")
    w(f"def _reduce({args}, one):")
    L.append(unpack.rstrip("\n"))
    w("    ln = (hi - lo) // LANES")
    w("    top = lo + LANES * ln")
    init("    ", "t")
    w("    for s in range(hi, top, -1):")
    step("        ", "t", "s")
    for lane in range(LANES):
        init("    ", str(lane))
    w("    for i in range(ln):")
    for lane in range(LANES):
        step("        ", str(lane), f"(lo + {lane + 1} * ln - i)")
    for lane in range(LANES - 1, -1, -1):
        compose("    ", str(lane), "t" if lane == LANES - 1 else str(lane + 1))
    gs0, ps0 = state("0")
    w(f"    return ({j_(gs0)},), ({j_(ps0)},)")
    w("")
    # the chunked walk: reduce each chunk but the first, chain the carries, walk again
    w("@numba.njit(parallel=True, nogil=True, cache=True, fastmath=FM)")
    w("def chunked(X, Y, GY, O, rev, excl, chunks, tiny, zero, one):")
    w("    R, n = X[0].shape")
    w("    base = n - 1 if rev else 0")
    w("    d = -1 if rev else 1")
    w("    e = 1 if excl else 0")
    w("    C = chunks")
    w(f"    rg = np.empty((R, C, {m}), DT)")
    w(f"    rp = np.empty((R, C, {max(1, len(flatP))}), DT)")
    w("    for task in prange(R * C):")
    w("        p, c = task // C, task % C")
    w("        lo, hi = c * n // C, (c + 1) * n // C")
    w("        if c == 0:")
    w("            continue")
    w("        if hi == n:  # the last chunk: position n-1 starts it")
    w("            top = _walk_top(X, Y, GY, O, p, lo, n, base, d, e, tiny, zero)")
    w("            if n - 1 > lo:")
    w("                gg, pp = _reduce(X, Y, GY, O, p, lo, n - 1, base, d, e, tiny, zero, one)")
    for q in range(m):
        terms = [f"pp[{flatP.index(f'{q}_{c}')}] * top[{c}]" for c in range(m) if q in cols[c]]
        w(f"                rg[p, c, {q}] = _ftz(gg[{q}] + {' + '.join(terms)}, tiny, zero)")
    w("            else:")
    for q in range(m):
        w(f"                rg[p, c, {q}] = top[{q}]")
    w("        else:")
    w("            gg, pp = _reduce(X, Y, GY, O, p, lo, hi, base, d, e, tiny, zero, one)")
    for q in range(m):
        w(f"            rg[p, c, {q}] = gg[{q}]")
    for q in range(len(flatP)):
        w(f"            rp[p, c, {q}] = pp[{q}]")
    w("    for p in range(R):  # the carry into chunk c is g at the start of chunk c + 1")
    w("        " + j_(G) + ", = " + j_(f"rg[p, C - 1, {q}]" for q in range(m)) + ",")
    w("        for c in range(C - 2, -1, -1):")
    w("            " + j_(f"h{j}" for j in live) + " = " + j_(G))
    w("            if c > 0:")
    for q, j in enumerate(live):
        terms = [f"rp[p, c, {flatP.index(f'{q}_{c2}')}] * h{live[c2]}"
                 for c2 in range(m) if q in cols[c2]]  # fmt: skip
        w(f"                g{j} = _ftz(rg[p, c, {q}] + {' + '.join(terms)}, tiny, zero)")
    for q, j in enumerate(live):
        w(f"            rg[p, c, {q}] = h{j}")
    w("    for task in prange(R * C):")
    w("        p, c = task // C, task % C")
    w("        lo, hi = c * n // C, (c + 1) * n // C")
    w("        _walk(X, Y, GY, O, p, lo, hi, base, d, e, tiny, zero, c < C - 1,")
    w(f"              ({''.join(f'rg[p, c, {q}], ' for q in range(m))}))")
    w("")
    w("@numba.njit(nogil=True, cache=True, fastmath=FM)")
    w("def _walk_top(X, Y, GY, O, p, lo, n, base, d, e, tiny, zero):")
    w("    if e == 1:")
    w(f"        return ({'zero, ' * m})")
    top = "".join(f"    GY{j} = GY[{j}]\n" for j in live if present[j])
    L.append(top.rstrip("\n") or "    pass")
    w(f"    return ({''.join(gy(j, 'base + d * (n - 1)') + ', ' for j in live)})")
    w("")
    w("@numba.njit(nogil=True, cache=True, fastmath=FM)")
    w("def walk(X, Y, GY, O, rev, excl, tiny, zero):")
    w("    R, n = X[0].shape")
    w("    base = n - 1 if rev else 0")
    w("    d = -1 if rev else 1")
    w("    e = 1 if excl else 0")
    w("    for p in range(R):")
    w(f"        _walk(X, Y, GY, O, p, 0, n, base, d, e, tiny, zero, False, ({'zero, ' * m}))")
    w("")
    w("@numba.njit(inline='always', fastmath=FM)")
    w("def _ftz(v, tiny, zero):")
    w("    if abs(v) < tiny:")
    w("        return math.copysign(zero, v)")
    w("    return v")
    w("")
    w(f"LANES = {LANES}")
    return "\n".join(L) + "\n"


def _module(d: Derived, live: tuple[int, ...], needs: tuple[bool, ...],
            present: tuple[bool, ...], dtype: np.dtype) -> Any:  # fmt: skip
    key = (live, needs, present, dtype)
    mod = d.modules.get(key)
    if mod is None:
        src = _source(d, live, needs, present, dtype)
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
        mod.walk(X, Y, GY, O, bool(reverse), bool(exclusive), tiny, zero)
    else:
        with threads.sized() as T:
            if T == 1:
                mod.walk(X, Y, GY, O, bool(reverse), bool(exclusive), tiny, zero)
            else:
                chunks = 1 if p >= 2 * T else max(1, min(T, n // 64))
                mod.chunked(X, Y, GY, O, bool(reverse), bool(exclusive), chunks, tiny, zero, one)
    it = iter(O)
    return [next(it).reshape(shape) if wanted[i] else None for i in range(k)]
