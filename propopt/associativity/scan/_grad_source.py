"""Numba source for the fused backward of a traced combine (see ``_grad_traced``).

:func:`source` writes, for one derived combine, the components the loss
reaches (``live``), the inputs that want a gradient and the outputs that
have one, the module whose ``walk`` (one thread) and ``chunked`` (threads
over chunks of each row) write the inputs' gradients.  The vector-Jacobian
product of the combine is one inlined function of the derived expressions
after common-subexpression elimination; numbers are constants of the element
dtype and small integer powers are products, so that a float32 walk stays in
float32.  Each walk keeps ``LANES`` lanes of a chunk in flight, each from its
own carry, the carries given by the lanes' affine maps ``g_lo = G + P g_hi``
(``P`` held to the sparsity the products of the left Jacobians keep).
Indices are unsigned, so that numba does not test them for wraparound.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: interleaved lanes of each walk (independent dependency chains); more lanes
#: of a power-of-two length read and write more streams than the L1 cache keeps apart
LANES = 2

#: ``g`` (and a chunk's map) is flushed below the smallest normal every this many
#: positions (a power of two), not at each: the test would lengthen the chain
FLUSH = 8


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


def source(d: Any, live: tuple[int, ...], needs: tuple[bool, ...],
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
            'FM = {"contract"}', f"DT = np.{dt}", "U = np.uintp  # no wraparound test"]  # fmt: skip
    head += [f"{n} = DT(float.fromhex({v.hex()!r}))" for n, v in consts.items()]
    bare = [sympy.sympify(x).is_Symbol for x in right]  # a g itself: flushed as written
    body = _kernels(k, m, live, wanted, present, ua, ub, cols, bare)
    return "\n".join(head) + "\n\n\n" + "\n\n".join(out) + "\n\n" + body


def _kernels(k: int, m: int, live: tuple[int, ...], wanted: list[int], present: tuple[bool, ...],
             ua: list[int], ub: list[int], cols: list[list[int]],
             bare: list[bool]) -> str:  # fmt: skip
    """The walk and chunked kernels, as source (see the module docstring).

    A map ``(G, P)`` (``g_lo = G + P g_hi``) is a tuple of ``S`` scalars: ``G``
    over the live components, then ``P``'s pattern entries column by column.
    A chunk ``[lo, hi)`` is walked down from ``g_hi``: its top ``[top, hi)``
    alone, then ``LANES`` lanes of ``ln`` positions together, each from its
    own carry, the carries given by the lanes' maps.
    """
    L: list[str] = []
    w = L.append
    j_ = ", ".join
    flatP = [(r, c) for c in range(m) for r in cols[c]]
    S = m + len(flatP)
    pos = {rc: m + q for q, rc in enumerate(flatP)}
    G = [f"g{j}" for j in live]
    ab = j_([f"a{i}" for i in ua] + [f"b{i}" for i in ub])
    abc = ab + ", " if ab else ""

    def gy(j: int, at: str) -> str:
        return f"GY[{j}][U(p), U({at})]" if present[j] else "zero"

    def loads(ind: str, yi: str, xi: str) -> None:
        for i in ua:
            w(f"{ind}a{i} = Y[{i}][U(p), U({yi})]")
        for i in ub:
            w(f"{ind}b{i} = X[{i}][U(p), U({xi})]")

    def tup(xs: Any) -> str:
        return "(" + "".join(f"{x}, " for x in xs) + ")"

    ctx = "X, Y, GY, O, p, base, d, e, tiny, zero"
    # one step of the walk at s: writes grad_x_s, returns g_{s-1}
    w("@numba.njit(inline='always', fastmath=FM)")
    w(f"def _step({ctx}, s, g):")
    w(f"    {j_(G)}, = g")
    w("    u = base + d * s")
    w("    if s == 0:")
    for i in wanted:
        w(
            f"        O[{wanted.index(i)}][U(p), U(u)] = "
            f"{f'_ftz(g{i}, tiny, zero)' if i in live else 'zero'}"
        )
    w("        return g")
    loads("    ", "base + d * (s - 1 + e)", "u")
    w(f"    r = vjp({abc}{j_(G)})")
    for q in range(len(wanted)):
        v = f"_ftz(r[{m + q}], tiny, zero)" if bare[q] else f"r[{m + q}]"
        w(f"    O[{q}][U(p), U(u)] = {v}")
    w("    t = base + d * (s - 1 + e)")
    w("    return " + tup(f"{gy(j, 't')} + r[{q}]" for q, j in enumerate(live)))
    w("")
    # g_{s-1} from g_s, writing nothing (s >= 1)
    w("@numba.njit(inline='always', fastmath=FM)")
    w(f"def _adv({ctx}, s, g):")
    w(f"    {j_(G)}, = g")
    loads("    ", "base + d * (s - 1 + e)", "base + d * s")
    w(f"    r = vjp({abc}{j_(G)})")
    w("    t = base + d * (s - 1 + e)")
    w("    return " + tup(f"_ftz({gy(j, 't')} + r[{q}], tiny, zero)" for q, j in enumerate(live)))
    w("")
    # one reduce step at s (s >= 1): the map of [s - 1, hi) from that of [s, hi)
    w("@numba.njit(inline='always', fastmath=FM)")
    w(f"def _mstep({ctx}, s, st):")
    loads("    ", "base + d * (s - 1 + e)", "base + d * s")
    w("    t = base + d * (s - 1 + e)")
    w(f"    r = vjp({abc}{j_(f'st[{q}]' for q in range(m))})")
    out = [f"{gy(j, 't')} + r[{q}]" for q, j in enumerate(live)]
    newp: dict[tuple[int, int], str] = {}
    for c in range(m):
        w(f"    c{c} = col{c}({abc}{j_(f'st[{pos[(r, c)]}]' for r in cols[c])})")
        for q, r in enumerate(cols[c]):
            newp[(r, c)] = f"c{c}[{q}]"
    w("    return " + tup(out + [newp[rc] for rc in flatP]))
    w("")
    for name, size in (("_fg", m), ("_fs", S)):
        w("@numba.njit(inline='always', fastmath=FM)")
        w(f"def {name}(t, tiny, zero):")
        w("    return " + tup(f"_ftz(t[{q}], tiny, zero)" for q in range(size)))
        w("")
    # composition and application of maps
    w("@numba.njit(inline='always', fastmath=FM)")
    w("def _comp(t, u, tiny, zero):")
    w('    """t after u: (Gt + Pt Gu, Pt Pu)."""')
    res = []
    for q in range(m):
        terms = [f"t[{pos[(q, c)]}] * u[{c}]" for c in range(m) if (q, c) in pos]
        res.append(f"_ftz(t[{q}] + {' + '.join(terms)}, tiny, zero)")
    for r, c in flatP:
        terms = [f"t[{pos[(r, v)]}] * u[{pos[(v, c)]}]" for v in range(m)
                 if (r, v) in pos and (v, c) in pos]  # fmt: skip
        res.append(f"_ftz({' + '.join(terms) or 'zero'}, tiny, zero)")
    w("    return " + tup(res))
    w("")
    w("@numba.njit(inline='always', fastmath=FM)")
    w("def _app(t, g, tiny, zero):")
    res = []
    for q in range(m):
        terms = [f"t[{pos[(q, c)]}] * g[{c}]" for c in range(m) if (q, c) in pos]
        res.append(f"_ftz(t[{q}] + {' + '.join(terms)}, tiny, zero)")
    w("    return " + tup(res))
    w("")
    ident = ["zero"] * m + ["one" if r == c else "zero" for r, c in flatP]
    # the maps of a chunk: its top and its LANES lanes
    w("@numba.njit(nogil=True, cache=True, fastmath=FM)")
    w(f"def _maps({ctx}, one, lo, hi):")
    w("    ln = (hi - lo) // LANES")
    w("    top = lo + LANES * ln")
    w(f"    mt = {tup(ident)}")
    w("    for s in range(hi, top, -1):")
    w(f"        mt = _mstep({ctx}, s, mt)")
    w("        if (s & FLUSH) == 0:")
    w("            mt = _fs(mt, tiny, zero)")
    for lane in range(LANES):
        w(f"    m{lane} = {tup(ident)}")
    w("    for i in range(ln):")
    for lane in range(LANES):
        w(f"        m{lane} = _mstep({ctx}, lo + {lane + 1} * ln - i, m{lane})")
    w("        if (i & FLUSH) == 0:")
    for lane in range(LANES):
        w(f"            m{lane} = _fs(m{lane}, tiny, zero)")
    w(
        "    return "
        + tup(["_fs(mt, tiny, zero)"] + [f"_fs(m{lane}, tiny, zero)" for lane in range(LANES)])
    )
    w("")
    w("@numba.njit(inline='always', fastmath=FM)")
    w("def _whole(ms, tiny, zero):")
    w('    """The map of the chunk: lane 0 after lane 1 ... after the top (ms: top, lanes)."""')
    w("    c = ms[0]")
    for lane in range(LANES - 1, -1, -1):
        w(f"    c = _comp(ms[{lane + 1}], c, tiny, zero)")
    w("    return c")
    w("")
    # the maps _emit reads (lanes 1..LANES-1), each reduced over LANES sub-lanes
    w("@numba.njit(nogil=True, cache=True, fastmath=FM)")
    w(f"def _lanes({ctx}, one, lo, hi):")
    w("    ln = (hi - lo) // LANES")
    got = [tup(ident), tup(ident)] + [
        f"_whole(_maps({ctx}, one, lo + {lane} * ln, lo + {lane + 1} * ln), tiny, zero)"
        for lane in range(1, LANES)
    ]
    w(f"    return {tup(got)}")
    w("")
    # walk a chunk [lo, hi) down from g_hi, given its lanes' maps (ms[1..LANES])
    w("@numba.njit(nogil=True, cache=True, fastmath=FM)")
    w(f"def _emit({ctx}, lo, hi, ms, ghi):")
    w("    ln = (hi - lo) // LANES")
    w("    top = lo + LANES * ln")
    w("    gtop = ghi")
    w("    if top < hi:")
    w(f"        g = _adv({ctx}, hi, ghi)")
    w("        for s in range(hi - 1, top, -1):")
    w(f"            g = _step({ctx}, s, g)")
    w("            if (s & FLUSH) == 0:")
    w("                g = _fg(g, tiny, zero)")
    w("        gtop = _fg(g, tiny, zero)")
    w(f"        g{LANES - 1} = _step({ctx}, top, g)")
    w("        if ln == 0:")
    w("            return")
    w("    else:")
    w("        if ln == 0:")
    w("            return")
    w(f"        g{LANES - 1} = _adv({ctx}, top, gtop)")
    w(f"    c{LANES - 1} = gtop")
    for lane in range(LANES - 2, -1, -1):
        w(f"    c{lane} = _app(ms[{lane + 2}], c{lane + 1}, tiny, zero)")
    for lane in range(LANES - 1):
        w(f"    g{lane} = _adv({ctx}, lo + {lane + 1} * ln, c{lane})")
    w("    for i in range(ln):")
    for lane in range(LANES):
        w(f"        g{lane} = _step({ctx}, lo + {lane + 1} * ln - 1 - i, g{lane})")
    w("        if (i & FLUSH) == 0:")
    for lane in range(LANES):
        w(f"            g{lane} = _fg(g{lane}, tiny, zero)")
    w("")
    w("@numba.njit(inline='always', fastmath=FM)")
    w(f"def _last({ctx}, n):")
    w('    """g_{n-1}: the last gradient (an exclusive scan never reads its last output)."""')
    w(f"    if e == 1:\n        return {tup(['zero'] * m)}")
    w("    return " + tup(gy(j, "base + d * (n - 1)") for j in live))
    w("")
    w("@numba.njit(nogil=True, cache=True, fastmath=FM)")
    w("def walk(X, Y, GY, O, rev, excl, tiny, zero, one):")
    w("    R, n = X[0].shape")
    w("    base = n - 1 if rev else 0")
    w("    d = -1 if rev else 1")
    w("    e = 1 if excl else 0")
    w("    for p in range(R):")
    w(f"        gl = _last({ctx}, n)")
    w(f"        _step({ctx}, n - 1, gl)")
    w(f"        _emit({ctx}, 0, n - 1, _lanes({ctx}, one, 0, n - 1), gl)")
    w("")
    w("@numba.njit(parallel=True, nogil=True, cache=True, fastmath=FM)")
    w("def chunked(X, Y, GY, O, rev, excl, chunks, tiny, zero, one):")
    w("    R, n = X[0].shape")
    w("    base = n - 1 if rev else 0")
    w("    d = -1 if rev else 1")
    w("    e = 1 if excl else 0")
    w("    C = chunks")
    w(f"    rl = np.empty((R, C, LANES + 1, {S}), DT)  # the lanes' maps (and the top's)")
    w(f"    rc = np.empty((R, C, {S}), DT)  # the chunk's map")
    w(f"    rg = np.empty((R, C, {m}), DT)  # the carry into the chunk")
    w("    for task in prange(R * C):")
    w("        p, c = task // C, task % C")
    w("        lo, hi = c * (n - 1) // C, (c + 1) * (n - 1) // C")
    w("        if c == 0:  # its map is never applied: the maps of its lanes alone")
    w(f"            ms = _lanes({ctx}, one, lo, hi)")
    w("        else:")
    w(f"            ms = _maps({ctx}, one, lo, hi)")
    for lane in range(LANES + 1):
        for q in range(S):
            w(f"        rl[p, c, {lane}, {q}] = ms[{lane}][{q}]")
    w("        t = _whole(ms, tiny, zero)")
    for q in range(S):
        w(f"        rc[p, c, {q}] = t[{q}]")
    w("    for p in range(R):")
    w(f"        g = _last({ctx}, n)")
    w("        for c in range(C - 1, -1, -1):")
    for q in range(m):
        w(f"            rg[p, c, {q}] = g[{q}]")
    w("            if c > 0:")
    w("                g = _app(" + tup(f"rc[p, c, {q}]" for q in range(S)) + ", g, tiny, zero)")
    w("    for task in prange(R * C):")
    w("        p, c = task // C, task % C")
    w("        lo, hi = c * (n - 1) // C, (c + 1) * (n - 1) // C")
    w("        g = " + tup(f"rg[p, c, {q}]" for q in range(m)))
    w("        if c == C - 1:")
    w(f"            _step({ctx}, n - 1, g)")
    w("        ms = (" + "".join(tup(f"rl[p, c, {lane}, {q}]" for q in range(S)) + ", "
                        for lane in range(LANES + 1)) + ")")  # fmt: skip
    w(f"        _emit({ctx}, lo, hi, ms, g)")
    w("")
    w("@numba.njit(inline='always', fastmath=FM)")
    w("def _ftz(v, tiny, zero):")
    w("    if abs(v) < tiny:")
    w("        return math.copysign(zero, v)")
    w("    return v")
    w("")
    w(f"LANES = {LANES}")
    w(f"FLUSH = {FLUSH - 1}")
    return "\n".join(L) + "\n"
