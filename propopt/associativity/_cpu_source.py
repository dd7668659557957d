"""The Python source of a monoid's CPU kernels (``_cpu.py`` compiles and drives them).

:func:`_source` writes, for one arity, dtype and direction, the per-thread
block scan (in the form :mod:`._cpu_forms` picks), the fix-up of blocks
1.., the row, super-block and column drivers and the elementwise combine;
the combine itself is spliced in as ``_py_combine`` (``_jit.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import numpy as np

from . import _cpu_ftz, _cpu_vector
from ._cpu_forms import LANE, PREFETCH_ITEMSIZE, tile_elements, uses_tree
from ._cpu_lanes import lane_lines, lane_total_lines
from ._cpu_tile import reduce_then_scan_source, tile_source


def _j(names: Iterable[str]) -> str:
    return ", ".join(names)


def _v(prefix: str, k: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(k)]


def _unpack(names: Sequence[str]) -> str:
    return _j(names) + ","


def flush_source(dtype: np.dtype, flush: Sequence[int], decorator: str) -> str:
    """Source of ``ftz(v)``, flush-to-zero for one value of ``dtype`` (see ``Monoid.flush``).

    A float below the smallest normal in magnitude becomes a zero of its sign
    (a compare, a copysign and a select, which vectorize and never compute on
    the subnormal; NaN fails the compare and passes); complex values flush
    their two parts apart.  Empty when nothing
    is flushed or ``dtype`` is not floating.
    """
    if not flush or dtype.kind not in "fc":
        return ""
    real = np.dtype(f"f{dtype.itemsize // 2}") if dtype.kind == "c" else dtype
    lines = [
        "import math",
        f"TINY = np.{real.name}({float(np.finfo(real).tiny)!r})",
        f"RZ = np.{real.name}(0.0)",
        decorator,
        "def ftz_real(v):",
        "    if abs(v) < TINY:",
        f"        return np.{real.name}(math.copysign(RZ, v))",
        "    return v",
        "",
        decorator,
        "def ftz(v):",
    ]
    if dtype.kind == "c":
        lines.append("    return DT(complex(ftz_real(v.real), ftz_real(v.imag)))")
    else:
        lines.append("    return ftz_real(v)")
    return "\n".join(lines) + "\n"


def hardware_flush(k: int, dtype: np.dtype, flush: Sequence[int]) -> bool:
    """Whether the kernels flush every component with the CPU's bit (``_cpu_ftz.py``):
    real floats on x86-64 whose every component flushes."""
    return _cpu_ftz.HARDWARE and dtype.kind == "f" and set(flush) == set(range(k))


#: The per-thread functions that run with the CPU's flush bit set, where it flushes.
FLUSH_BIT_FUNCTIONS = ("_block", "_fix", "_reduce", "_cols")


def _with_flush_bit(src: str, hw: bool) -> str:
    """``src`` with each of ``FLUSH_BIT_FUNCTIONS`` renamed ``<name>_k`` and called by
    a ``<name>`` that sets the flush bit around it and puts the register back (``hw``).

    A combine that raises leaves ``<name>_k`` early: the register is put back
    before the exception leaves the thread (numba cannot re-raise it, so the
    kernel runs again without the bit and raises it afresh; where that run
    passes, the error says the combine raised with the bit set)."""
    if not hw:
        return src
    body = src
    lines = ["from propopt.associativity._cpu_ftz import ftz_enter, ftz_leave"]
    for name in FLUSH_BIT_FUNCTIONS:
        head = f"\ndef {name}("
        at = body.find(head)
        if at < 0:
            continue
        params = body[at + len(head) : body.index("):", at)]
        body = body.replace(head, f"\ndef {name}_k(", 1)
        lines += [
            "@numba.njit(nogil=True, cache=CACHE)",
            f"def {name}({params}):",
            "    m = ftz_enter()",
            "    ok = True",
            "    try:",
            f"        r = {name}_k({params})",
            "    except Exception:",
            "        ok = False",
            "    ftz_leave(m)",
            "    if not ok:",
            f"        {name}_k({params})",
            "        raise ArithmeticError('the combine raised with the flush-to-zero bit set')",
            "    return r",
            "",
        ]
    return body + "\n".join(lines) + "\n"


def _finish(out: list[str], hw: bool) -> str:
    """The module's source from its lines (``out[0]``: the spliced combine), every kernel
    compiled with ``error_model='numpy'``: the combine is inlined into them, and so takes
    their error model (a division by zero gives inf or NaN, as in NumPy; see
    ``_jit.KERNEL_HELPER``)."""
    body = "\n".join(out[1:]).replace("numba.njit(", "numba.njit(error_model='numpy', ")
    return _with_flush_bit(out[0] + "\n" + body + "\n", hw)


@functools.lru_cache(maxsize=256)
def _source(
    k: int,
    dtype: np.dtype,
    header: str,
    cache: bool,
    rev: bool,
    excl: bool,
    flush: Sequence[int] = (),
    keep: Sequence[int] = (),
    tree: bool | None = None,
    vector: str = "",
) -> str:
    """Python source of the CPU kernels for arity ``k``, ``dtype`` and one direction.

    ``tree``: the in-block tree (else the lanes); by :func:`uses_tree` when None.
    ``vector``: ``"max"`` or ``"min"`` for the vector form of ``_cpu_vector.py``
    (:func:`vector_op`), which takes the place of both.

    The unrolled lane loop of ``_block`` is written for the one (``rev``,
    ``excl``) variant the module serves: the four variants in one function
    made numba compile four times the code on every first use, for the one
    that runs (``rev`` and ``excl`` remain arguments of the other loops).
    """
    if tree is None:
        tree = uses_tree(k, dtype.itemsize)
    nt = _cpu_vector.width(dtype.itemsize) if vector else tile_elements(k, dtype.itemsize, tree)
    X, O, E, C = _v("x", k), _v("o", k), _v("e", k), _v("c", k)
    A = [f"x{i}[u]" for i in range(k)]
    out: list[str] = [header]
    w = out.append
    w("import numpy as np")
    w("import numba")
    w("from numba import prange")
    w("from propopt.associativity._cpu_prefetch import prefetch_read, prefetch_write")
    if vector:
        out.extend(_cpu_vector.header_lines(vector, rev, excl))
    w(f"DT = np.{dtype.name}")
    w(f"CACHE = {cache}")
    w(f"TILE = {nt}")
    w(f"SL = {LANE}")
    w(f"PFM = {max(1, 64 // dtype.itemsize) - 1}  # elements of a cache line, less one")
    w("FM = {'contract'}")
    w("_c = numba.njit(inline='always', fastmath=FM)(_py_combine)")
    w("")
    w(flush_source(dtype, flush, "@numba.njit(inline='always', cache=CACHE, fastmath=FM)"))
    flush = flush if dtype.kind in "fc" else ()  # integers never flush
    hw = hardware_flush(k, dtype, flush)
    res = ["r"] if k == 1 else [f"r[{i}]" for i in range(k)]
    soft = [f"ftz(DT({r}))" if i in flush else f"DT({r})" for i, r in enumerate(res)]
    # comb: the combine of the per-thread functions; combs: of the few serial
    # ones (the carries between threads, the elementwise combine), which run
    # without the CPU's flush bit (_cpu_ftz.py) and so flush in code
    for name, rs in (("comb", [f"DT({r})" for r in res] if hw else soft), ("combs", soft)):
        if name == "combs" and not hw:
            w("combs = comb")
            break
        w("@numba.njit(inline='always', cache=CACHE, fastmath=FM)")
        w(f"def {name}({_j(_v('a', k) + _v('b', k))}):")
        w(f"    r = _c({_j(_v('a', k) + _v('b', k))})")
        w("    return (" + ", ".join(rs) + ",)")
    w("")

    def idx(rev: bool, off: str) -> str:
        # physical index of logical tile position ``off`` (an expression)
        return f"ub - np.uintp({off})" if rev else f"ub + np.uintp({off})"

    OU = [f"o{i}[u]" for i in range(k)]
    XU = [f"x{i}[u]" for i in range(k)]
    WS = _v("wa", k) + _v("wb", k) + _v("e", k)

    kept = list(keep) or list(range(k))
    partial = len(kept) < k

    def store(indent: str, st: Sequence[str]) -> None:
        w(indent + "; ".join(f"{OU[i]} = {st[i]}" for i in kept))

    if tree:
        for line in tile_source(k, rev, excl, nt, kept):
            w(line)
    # _block: scan logical positions [lo, hi) from carry c; returns c . total.
    # fresh: there is no carry yet (c holds the identity as a placeholder), so
    # the first element is taken as it is.  No element is ever combined with
    # the identity: e . x == x fails in IEEE arithmetic where x holds an inf or
    # a NaN (the linear recurrence's (1, 0) . (inf, b) = (inf, inf * 0 + b)).
    w("@numba.njit(nogil=True, cache=CACHE, fastmath=FM)")
    w(f"def _block({_j(X)}, {_j(O)}, lo, hi, N, rev, excl, {_j(C)}, {_j(E)}, fresh):")
    w("    nt = (hi - lo) // TILE")
    if tree:
        w("    if nt > 0:")
        w("        " + "; ".join(f"{s} = np.empty(TILE, DT)" for s in WS))
        w("        for t in range(nt):")
        w(
            f"            {_unpack(C)} = _tile({_j(X)}, {_j(O)}, {_j(WS)}, lo + t * TILE, N, "
            f"{_j(C)}, fresh)"
        )
        w("            fresh = False")
    elif vector:
        _cpu_vector.vector_lines(vector, rev, excl, w)
    else:
        lane_lines(k, rev, excl, w, prefetch=dtype.itemsize <= PREFETCH_ITEMSIZE, keep=kept)
    w("    for l in range(lo + nt * TILE, hi):")
    w("        u = np.uintp(N - 1 - l if rev else l)")
    w("        if excl:")
    store("            ", C)
    w("        if fresh:")
    w(f"            {_unpack(C)} = {_unpack(XU)}")
    w("            fresh = False")
    w("        else:")
    w(f"            {_unpack(C)} = comb({_j(C + XU)})")
    w("        if not excl:")
    store("            ", C)
    w(f"    return ({_j(C)},)")
    w("")
    # _fix: o = k . o over logical [lo, hi), elementwise (vectorizes)
    # (exclusive: the block's first output was left for its carry, stored as is)
    w("@numba.njit(nogil=True, cache=CACHE, fastmath=FM)")
    w(f"def _fix({_j(O)}, lo, hi, N, rev, excl, {_j(C)}):")
    w("    plo = N - hi if rev else lo")
    w("    n = hi - lo")
    w("    if excl and n > 0:")
    w("        n -= 1")
    w("        u = np.uintp(plo + n) if rev else np.uintp(plo)")
    store("        ", C)
    w("        if not rev:")
    w("            plo += 1")
    w("    for i in range(n):")
    w("        u = np.uintp(plo + i)")
    w(f"        {_unpack(_v('r', k))} = comb({_j(C + OU)})")
    store("        ", _v("r", k))
    w("")

    # rows in parallel: each row of a (P, N) array scanned by one thread
    w("@numba.njit(parallel=True, nogil=True, cache=CACHE)")
    # i: each row's carry into its first element (a (P,) array per component),
    # unless fresh
    I_ = _v("i", k)
    w(f"def scan_rows({_j(X)}, {_j(O)}, rev, excl, {_j(E)}, {_j(I_)}, fresh):")
    w("    P, N = x0.shape")
    w("    for p in prange(P):")
    w(
        f"        _block({_j(x + '[p]' for x in X)}, {_j(o + '[p]' for o in O)}, "
        f"np.int64(0), N, N, rev, excl, {_j(i + '[p]' for i in I_)}, {_j(E)}, fresh)"
    )
    w("")

    # one long row, threads cooperating through super-blocks: each thread
    # scans its block (thread 0 from the running carry, the others from the
    # identity), the T totals are scanned, and blocks 1.. are fixed up while
    # still in cache.
    T_ = [f"tot{i}" for i in range(k)]
    K_ = [f"car{i}" for i in range(k)]
    if partial:  # outputs left out: no _fix, blocks reduced then scanned
        total = None if tree else lane_total_lines(k, rev, tile_elements(k, dtype.itemsize, True))
        out.extend(reduce_then_scan_source(k, nt, rev, kept, total))
        return _finish(out, hw)
    w("@numba.njit(parallel=True, nogil=True, cache=CACHE)")
    w(f"def scan_1d({_j(X)}, {_j(O)}, rev, excl, T, BK, B0, {_j(E)}, {_j(I_)}, fresh):")
    w("    # thread 0 scans B0 elements per super-block, threads 1.. BK each")
    w("    N = x0.shape[0]")
    for t_, k_ in zip(T_, K_):
        w(f"    {t_} = np.empty(T, DT); {k_} = np.empty(T, DT)")
    w(f"    {_unpack(C)} = {_unpack(I_)}")
    w("    SB = B0 + (T - 1) * BK")
    w("    nsb = (N + SB - 1) // SB")
    w("    for b in range(nsb + 1):")
    w("        s0 = b * SB")
    w("        for t in prange(T):")
    w("            if b > 0 and t > 0:")
    w("                # fix up this thread's block of the previous super-block")
    w("                plo = min(s0 - SB + B0 + (t - 1) * BK, N)")
    w(
        f"                _fix({_j(O)}, plo, min(plo + BK, N), N, rev, excl, "
        f"{_j(k_ + '[t]' for k_ in K_)})"
    )
    w("            lo = min(s0 + (0 if t == 0 else B0 + (t - 1) * BK), N)")
    w("            hi = min(lo + (B0 if t == 0 else BK), N)")
    w("            if b < nsb:")
    w("                if t == 0:")
    w(
        f"                    r = _block({_j(X)}, {_j(O)}, lo, hi, N, rev, excl, {_j(C)}, "
        f"{_j(E)}, fresh and b == 0)"
    )
    w("                else:")
    w(
        f"                    r = _block({_j(X)}, {_j(O)}, lo, hi, N, rev, excl, {_j(E)}, "
        f"{_j(E)}, np.bool_(True))"
    )
    w("                " + "; ".join(f"{t_}[t] = r[{i}]" for i, t_ in enumerate(T_)))
    w("        if b < nsb:")
    w("            " + "; ".join(f"c{i} = tot{i}[0]" for i in range(k)))
    w("            for t in range(1, T):")
    w("                " + "; ".join(f"{k_}[t] = {c}" for k_, c in zip(K_, C)))
    w(f"                {_unpack(C)} = combs({_j(C + [t_ + '[t]' for t_ in T_])})")
    w("")

    # columns: (P, N, Q) arrays, Q independent scans vectorized innermost
    XN = [f"x{i}[n, q]" for i in range(k)]
    CQ = [f"c{i}[q]" for i in range(k)]
    w("@numba.njit(nogil=True, cache=CACHE)")
    w(f"def _cols({_j(X)}, {_j(O)}, lo, hi, N, q0, q1, rev, excl, write, fresh, {_j(C)}):")
    w("    # x: (N, Q); c: carries (Q,) updated in place; write=False only reduces;")
    w("    # fresh: no carry yet, the first element is taken as it is (see _block)")
    w("    for l in range(lo, hi):")
    w("        n = N - 1 - l if rev else l")
    w("        if fresh and l == lo:")
    w("            for q in range(q0, q1):")
    w("                if write and excl:")
    w("                    " + "; ".join(f"o{i}[n, q] = c{i}[q]" for i in range(k)))
    w("                " + "; ".join(f"c{i}[q] = x{i}[n, q]" for i in range(k)))
    w("                if write and not excl:")
    w("                    " + "; ".join(f"o{i}[n, q] = x{i}[n, q]" for i in range(k)))
    w("        elif not write:")
    w("            for q in range(q0, q1):")
    w(f"                {_j(_v('r', k))}, = comb({_j(CQ + XN)})")
    w("                " + "; ".join(f"c{i}[q] = r{i}" for i in range(k)))
    w("        elif excl:")
    w("            for q in range(q0, q1):")
    w("                " + "; ".join(f"o{i}[n, q] = c{i}[q]" for i in range(k)))
    w(f"                {_j(_v('r', k))}, = comb({_j(CQ + XN)})")
    w("                " + "; ".join(f"c{i}[q] = r{i}" for i in range(k)))
    w("        else:")
    w("            for q in range(q0, q1):")
    w(f"                {_j(_v('r', k))}, = comb({_j(CQ + XN)})")
    w("                " + "; ".join(f"c{i}[q] = r{i}; o{i}[n, q] = r{i}" for i in range(k)))
    w("")
    w("@numba.njit(parallel=True, nogil=True, cache=CACHE)")
    w(f"def scan_cols({_j(X)}, {_j(O)}, rev, excl, QB, {_j(E)}):")
    w("    P, N, Q = x0.shape")
    w("    nqb = (Q + QB - 1) // QB")
    w("    for task in prange(P * nqb):")
    w("        p = task // nqb")
    w("        q0 = (task % nqb) * QB")
    w("        q1 = min(q0 + QB, Q)")
    for i in range(k):
        w(f"        c{i} = np.full(Q, e{i}, DT)")
    w(
        f"        _cols({_j(x + '[p]' for x in X)}, {_j(o + '[p]' for o in O)}, "
        f"0, N, N, q0, q1, rev, excl, True, True, {_j(C)})"
    )
    w("")
    w("@numba.njit(parallel=True, nogil=True, cache=CACHE)")
    w(f"def scan_cols_chunked({_j(X)}, {_j(O)}, rev, excl, T, {_j(E)}):")
    w("    # x: (N, Q); T chunks of the scan axis, three phases")
    w("    N, Q = x0.shape")
    w("    CH = (N + T - 1) // T")
    for i in range(k):
        w(f"    tot{i} = np.full((T, Q), e{i}, DT)")
    w("    for t in prange(T):")
    w("        lo = min(t * CH, N); hi = min(lo + CH, N)")
    w(
        f"        _cols({_j(X)}, {_j(O)}, lo, hi, N, 0, Q, rev, excl, False, True, "
        f"{_j(f'tot{i}[t]' for i in range(k))})"
    )
    for i in range(k):
        w(f"    car{i} = np.full((T, Q), e{i}, DT)  # chunk 0 starts fresh")
    w("    for q in range(Q):")
    w(f"        {_unpack(C)} = {_unpack([f'tot{i}[0, q]' for i in range(k)])}")
    w("        for t in range(1, T):")
    w("            " + "; ".join(f"car{i}[t, q] = c{i}" for i in range(k)))
    w(f"            {_unpack(C)} = combs({_j(C + [f'tot{i}[t, q]' for i in range(k)])})")
    w("    for t in prange(T):")
    w("        lo = min(t * CH, N); hi = min(lo + CH, N)")
    w(
        f"        _cols({_j(X)}, {_j(O)}, lo, hi, N, 0, Q, rev, excl, True, t == 0, "
        f"{_j(f'car{i}[t]' for i in range(k))})"
    )
    w("")
    # elementwise combine of two batches (the array form of a scalar combine)
    # (elementwise_here on the calling thread, for a combine that may raise)
    B = _v("b", k)
    for name, par, loop in (("elementwise", True, "prange"), ("elementwise_here", False, "range")):
        w(f"@numba.njit(parallel={par}, nogil=True, cache=CACHE)")
        w(f"def {name}({_j(X)}, {_j(B)}, {_j(O)}):")
        w(f"    for q in {loop}(x0.shape[0]):")
        w("        u = np.uintp(q)")
        w(f"        {_j(_v('r', k))}, = combs({_j(A + [f'b{i}[u]' for i in range(k)])})")
        w("        " + "; ".join(f"o{i}[u] = r{i}" for i in range(k)))
    return _finish(out, hw)
