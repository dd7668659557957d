"""The kernels of logaddexp's own CPU scan on one thread: the chunked tile, the
block (forward, reverse, exclusive), the sequential fold and the reduce.

``_cpu_logsum``'s docstring describes the method and its fallbacks; it drives
these on one or more threads (with ``_cpu_logsum_threads`` for the forward
scan of one row).
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from .. import vmath
from .monoid import _logaddexp

#: Elements of one tile and of one chunk inside it.
NT = 2048
C = 256
NC = NT // C

#: A last part tile of at least this many elements is scanned padded with
#: ``-inf`` to whole chunks; a shorter one by the fold (one scalar ``exp`` and
#: ``log1p`` an element, about 32 ns, against a chunk's 1.4 ns an element of
#: ``C``, float32, one core of a 2-core AMD EPYC).
PAD_MIN = 32

FM = {"contract"}
_lae = numba.njit(inline="always", fastmath=FM)(_logaddexp)


def _as(v: float, like: Any) -> Any:
    """``v`` as a scalar of the type of ``like`` (in numba code)."""
    return type(like)(v)


@overload(_as, inline="always")
def _as_impl(v, like):  # type: ignore[no-untyped-def]
    if isinstance(like, types.Float) and like.bitwidth == 32:
        return lambda v, like: np.float32(v)
    return lambda v, like: np.float64(v)


@numba.njit(inline="always", fastmath=FM)
def _comb(a, b):  # type: ignore[no-untyped-def]
    return _as(_lae(a, b), b)


@intrinsic
def _fmax(typingctx, a, b):  # type: ignore[no-untyped-def]
    """``llvm.maxnum``: a maximum LLVM vectorizes as a reduction (``vmaxps``)."""
    sig = a(a, b)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        t = args[0].type
        fn = builder.module.declare_intrinsic("llvm.maxnum", [t], ir.FunctionType(t, [t, t]))
        return builder.call(fn, args)

    return sig, codegen


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _bad(x, lo, hi, inf):  # type: ignore[no-untyped-def]
    # elements that are NaN or +inf (both fail v < inf; -inf passes)
    n = 0
    b = np.uintp(lo)
    for i in range(np.uintp(hi - lo)):
        n += 0 if x[b + i] < inf else 1
    return n


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _nans(x, lo, hi):  # type: ignore[no-untyped-def]
    n = 0
    b = np.uintp(lo)
    for i in range(np.uintp(hi - lo)):
        n += 0 if x[b + i] == x[b + i] else 1
    return n


@numba.njit(nogil=True, cache=True, fastmath={"contract", "nnan", "nsz"})
def _max(x, lo, hi, m):  # type: ignore[no-untyped-def]
    # the maximum of x[lo:hi] and m, where no element is NaN
    b = np.uintp(lo)
    for i in range(np.uintp(hi - lo)):
        m = _fmax(m, x[b + i])
    return m


@numba.njit(nogil=True, cache=True, fastmath={"contract", "reassoc"})
def _sumexp(x, lo, hi, m, one, zero):  # type: ignore[no-untyped-def]
    s = zero
    b = np.uintp(lo)
    for i in range(np.uintp(hi - lo)):
        s += vmath.fexp_flush(x[b + i] - m, one)
    return s


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _value(m, s):  # type: ignore[no-untyped-def]
    # M + log(S) as one value; NaN and +inf states hold S = 1, -inf S = 0
    if m < np.inf and m > -np.inf:
        return _as(m + math.log(s), m)
    return m


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _state(v, one, zero):  # type: ignore[no-untyped-def]
    return (v, zero) if v == -np.inf else (v, one)


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _join(m1, s1, m2, s2, one, zero):  # type: ignore[no-untyped-def]
    # the state of the concatenation of two runs
    if not (m1 < np.inf) or not (m2 < np.inf):  # a NaN or +inf: the scalar combine
        return _state(_comb(_value(m1, s1), _value(m2, s2)), one, zero)
    m = m1 if m1 > m2 else m2
    if m == -np.inf:
        return m, zero
    return m, s1 * math.exp(m1 - m) + s2 * math.exp(m2 - m)


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _fold(x, o, lo, hi, m, s, one, zero):  # type: ignore[no-untyped-def]
    # the sequential fold of the scalar combine from state (m, s); o=None: reduce only
    c = _value(m, s)
    for i in range(lo, hi):
        c = _comb(c, x[i])
        if o is not None:
            o[i] = c
    return _state(c, one, zero)


@intrinsic
def _scan_chunk(typingctx, e, carry):  # type: ignore[no-untyped-def]
    """``e[:C]`` replaced by ``carry`` plus its inclusive prefix sums; returns the last.

    Each vector of ``W`` elements (8 float32, 4 float64: one AVX2 register) is
    scanned in its register by ``log2(W)`` shifted adds (``shufflevector``),
    then gets the running carry; the carry grows by the vector's total, a
    scalar add, so its chain is one add long per vector.
    """
    sig = e.dtype(e, carry)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        arrty = signature.args[0]
        ft = context.get_value_type(arrty.dtype)
        w = 8 if arrty.dtype.bitwidth == 32 else 4
        h = w // 2  # the elements of one 128-bit half
        vt = ir.VectorType(ft, w)
        i32 = ir.IntType(32)
        zero = ir.Constant(vt, None)

        def shuffle(v, lanes):  # type: ignore[no-untyped-def]
            # lane j from v[lanes[j]], or 0 where lanes[j] is None
            mask = ir.Constant(ir.VectorType(i32, w), [w if i is None else i for i in lanes])
            return builder.shuffle_vector(v, zero, mask)

        data = context.make_array(arrty)(context, builder, args[0]).data
        al = arrty.dtype.bitwidth // 8  # the element's alignment: e need not be aligned to W
        kv = shuffle(builder.insert_element(zero, args[1], ir.Constant(i32, 0)), [0] * w)
        for v in range(C // w):
            vp = builder.bitcast(builder.gep(data, [ir.Constant(i32, v * w)]), vt.as_pointer())
            x = builder.load(vp, align=al)
            # shifts inside each 128-bit half (one instruction each), then the
            # low half's total to the high half
            s = 1
            while s < h:
                x = builder.fadd(x, shuffle(x, [j - s if j % h >= s else None for j in range(w)]))
                s *= 2
            x = builder.fadd(x, shuffle(x, [None] * h + [h - 1] * h))
            builder.store(builder.fadd(x, kv), vp, align=al)
            kv = builder.fadd(kv, shuffle(x, [w - 1] * w))
        return builder.extract_element(kv, ir.Constant(i32, 0))

    return sig, codegen


@numba.njit(nogil=True, cache=True, fastmath=FM, inline="always")
def _least(x, xb, m):  # type: ignore[no-untyped-def]
    """Where the least prefix of the chunk at ``xb`` that holds a term of its own lies,
    given ``m``, the maximum before the chunk: its first element, or where ``m`` is
    ``-inf`` (all before it ``-inf``), its first element above ``-inf``."""
    j0 = np.uintp(0)
    if m > -np.inf:
        return j0
    while j0 < np.uintp(C - 1) and not (x[xb + j0] > -np.inf):
        j0 += np.uintp(1)
    return j0


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _tile(x, o, b, cm, cs, e, th, one, zero, nc=NC):  # type: ignore[no-untyped-def]
    """Scan x[b:b + nc C] into o from state (cm, cs), chunk after chunk, with ``e``
    (``C`` elements) as scratch; returns (M, S, ok)."""
    ninf = _as(-np.inf, zero)
    # A NaN or +inf element needs no pass of its own: exp(x - M) is NaN or +inf
    # there (or M is), the prefix sums carry it to the chunk's total and the
    # carries to the tile's, which then fails k < inf.
    if not (cm < np.inf):
        return cm, cs, False
    ub = np.uintp(b)
    cc = np.uintp(C)
    m, k = cm, cs
    ok = True
    for c in range(np.uintp(nc)):
        xb = ub + c * cc
        mc = _max(x, xb, xb + cc, m)
        if mc > ninf:
            # the carry to the new maximum (from -inf: k is 0, or NaN where a NaN was met)
            k = k * vmath.fexp_flush(m - mc)
        r = mc if mc > ninf else zero
        for j in range(cc):
            e[j] = vmath.fexp_flush(x[xb + j] - r, one)
        k = _scan_chunk(e, k)  # e: the carry plus the prefix sums
        j0 = np.uintp(0)
        if mc > ninf:
            # the prefixes grow along the chunk: the least is its first's,
            # or from -inf, its first finite element's (before it 0 exactly)
            j0 = _least(x, xb, m)
            ok = ok and e[j0] >= th
        # flog_normal: where its argument is not a positive normal float the
        # tile is redone by the fold (below th, +inf, NaN: k is then NaN or
        # +inf), except where mc is -inf: e is then 0 and -inf + log(0) -inf
        for j in range(cc):
            o[xb + j] = mc + vmath.flog_normal(e[j], one)
        for j in range(j0):  # prefixes of -inf alone
            o[xb + j] = ninf
        m = mc
    return m, k, ok and k < np.inf and m < np.inf


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _forward(x, o, lo, hi, m, s, th, one, zero, e):  # type: ignore[no-untyped-def]
    """Scan x[lo:hi] into o from state (m, s), first to last; returns the state after it."""
    nt = (hi - lo) // NT
    for t in range(nt):
        b = lo + t * NT
        if not (m < np.inf):  # NaN or +inf from here on
            return _saturated(x, o, b, hi, m, one)
        m2, s2, ok = _tile(x, o, b, m, s, e, th, one, zero)
        if not ok:
            m2, s2 = _fold(x, o, b, b + NT, m, s, one, zero)
        m, s = m2, s2
    b = lo + nt * NT
    if not (m < np.inf):
        return _saturated(x, o, b, hi, m, one)
    n = hi - b
    if n >= PAD_MIN:
        # the last part tile, padded with -inf to whole chunks (which leaves
        # the state as it is)
        nc = (n + C - 1) // C
        xs = np.empty(nc * C, x.dtype)
        os_ = np.empty(nc * C, x.dtype)
        ub, un = np.uintp(b), np.uintp(n)
        for i in range(un):
            xs[i] = x[ub + i]
        for i in range(un, np.uintp(nc * C)):
            xs[i] = -np.inf
        m2, s2, ok = _tile(xs, os_, 0, m, s, e, th, one, zero, nc)
        if ok:
            for i in range(un):
                o[ub + i] = os_[i]
            return m2, s2
    return _fold(x, o, b, hi, m, s, one, zero)


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _block(x, o, lo, hi, m, s, th, one, zero, rev, excl):  # type: ignore[no-untyped-def]
    """Scan logical positions [lo, hi) into o from state (m, s); returns the state after.

    ``rev``: logical position ``l`` is ``x[N - 1 - l]``.  ``excl``: position
    ``l`` gets the combination of the positions before it (the carry's value
    at ``lo``).  Both scan each tile in scratch and copy it out, reversed or
    shifted by one.
    """
    e = np.empty(C, x.dtype)
    if not rev and not excl:
        return _forward(x, o, lo, hi, m, s, th, one, zero, e)
    xs = np.empty(NT, x.dtype)
    os_ = np.empty(NT, x.dtype)
    N = x.shape[0]
    one_u = np.uintp(1)
    for b in range(lo, hi, NT):
        n = min(NT, hi - b)
        top = np.uintp(N - b) - one_u  # the physical index of logical position b
        ub = np.uintp(b)
        if rev:
            for i in range(np.uintp(n)):
                xs[i] = x[top - i]
        else:
            for i in range(np.uintp(n)):
                xs[i] = x[ub + i]
        before = _value(m, s)
        m, s = _forward(xs, os_, 0, n, m, s, th, one, zero, e)
        if excl:  # os_[i - 1] to position i, the carry to the first
            if rev:
                o[top] = before
                for i in range(one_u, np.uintp(n)):
                    o[top - i] = os_[i - one_u]
            else:
                o[ub] = before
                for i in range(one_u, np.uintp(n)):
                    o[ub + i] = os_[i - one_u]
        else:
            for i in range(np.uintp(n)):
                o[top - i] = os_[i]
    return m, s


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _saturated(x, o, lo, hi, c, one):  # type: ignore[no-untyped-def]
    """The fold from a NaN or +inf carry ``c``: +inf until the first NaN, then NaN."""
    i = lo
    if c == c:
        # whole tiles without a NaN at a time (vector loops), then one by one
        while hi - i >= NT and _nans(x, i, i + NT) == 0:
            o[i : i + NT] = c
            i += NT
        while i < hi and x[i] == x[i]:
            o[i] = c
            i += 1
    nan = _as(np.nan, one)
    for j in range(i, hi):
        o[j] = nan
    return (c if i == hi else nan), one


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _reduce(x, lo, hi, one, zero):  # type: ignore[no-untyped-def]
    """The state of x[lo:hi] (from the identity; the same in either direction)."""
    ninf = _as(-np.inf, zero)
    m, s = ninf, zero
    nt = (hi - lo) // NT
    for t in range(nt):
        b = lo + t * NT
        if not (m < np.inf):
            # NaN stays NaN; from +inf only a NaN still changes the state
            if m == m and _nans(x, b, hi) > 0:
                m = _as(np.nan, one)
            return m, one
        if _bad(x, b, b + NT, np.inf) > 0:
            # the fold of a run holding a NaN is NaN, else one holding +inf is +inf
            m2, s2 = _as(np.nan if _nans(x, b, b + NT) > 0 else np.inf, one), one
        else:
            m2 = _max(x, b, b + NT, ninf)
            s2 = zero if m2 == ninf else _sumexp(x, b, b + NT, m2, one, zero)
        m, s = _join(m, s, m2, s2, one, zero)
    m2, s2 = _fold(x, None, lo + nt * NT, hi, ninf, zero, one, zero)
    return _join(m, s, m2, s2, one, zero)
