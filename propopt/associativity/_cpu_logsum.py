"""logaddexp's own CPU scan: one ``exp`` per element and one ``log`` per output.

The generic kernels (``_cpu.py``) run ``logaddexp`` as a tree of combines,
each an ``exp`` and a ``log1p``, over ``log2`` of the tile's levels.  Here a
prefix is kept as a pair ``(M, S)`` standing for ``M + log(S)``, as in the
online softmax.  A tile of ``NT`` elements is cut into ``NC`` chunks of ``C``,
each done in turn (``C`` elements of scratch ``e``, in L1):

* ``M_c``, the running maximum at the end of chunk ``c`` (a vector maximum),
  and the carry rescaled to it, ``K <- K exp(M_{c-1} - M_c)``;
* ``e_j = exp(x_j - M_c)`` (vectorized: :func:`propopt.vmath.fexp_flush`);
* ``e_j <- K + e_0 + ... + e_j``, by vectors of one register: each scanned
  in its register by shifted adds, then given the running carry
  (:func:`_scan_chunk`); ``K`` becomes the last;
* ``out_j = M_c + log(e_j)`` (vectorized: :func:`propopt.vmath.flog_normal`).

``fexp_flush`` and ``flog_normal`` get the dtype's 1 as a run-time argument, so
that their constants stay in registers in these loops (see ``fexp``).

Cost, in cache on one thread of a 2-core AMD EPYC (``znver2``, AVX2),
quietest of 15 runs on the shared machine: a float32 tile 1.32 ns an
element, of which ``exp`` 0.43, ``log`` 0.40, the prefix sums 0.28 and the
rest (maxima, carries, the passes' loads and stores) 0.23; float64 3.08
(``exp`` 1.25, ``log`` 1.17, prefix sums 0.35, the rest 0.31).  Before
(constants reloaded in each iteration, ``floor`` and clamps in ``exp``, a
compare and select in ``log``, longer series, 16 interleaved scalar prefix
chains): 1.89 and 5.05.

A tile falls back to the plain sequential fold of the scalar combine when it
holds a NaN or ``+inf`` (found in its totals, not by a pass of its own), or
when some ``e_j`` is below ``2^-60`` (float32; ``2^-900``
float64), where the terms that ``exp`` flushed to zero could matter (a
prefix far below its chunk's maximum).  From a NaN or ``+inf`` carry the
rest is written as the fold gives it (NaN; ``+inf`` up to the first NaN).
So NaN, ``+inf`` and the identity ``-inf`` give what the fold gives.  The
rounding differs from the fold's and between thread counts (the carries
combine in another order): within 2e-5 of the float64 fold in float32 and
1e-12 in float64 in tests/associativity/test_scan_logsum.py.

A reverse or exclusive scan scans each tile in scratch and copies it out
reversed or shifted by one (the carry's value first).  Scans along another
axis keep the generic kernels.

Threads: the array is walked in super-blocks, as in ``_cpu_tile``'s
reduce-then-scan: threads 1.. reduce a block to its ``(M, S)`` (a maximum
and a sum of ``exp(x - M)``, both vectorized, read only) and scan, from its
carry, their block of the super-block before, while it is still in cache;
thread 0 scans its block from the running carry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic, overload

from .. import threads, vmath
from .._memory import mapped_empty, settle_allocator
from .monoid import _logaddexp

#: Elements of one tile and of one chunk inside it.
NT = 2048
C = 256
NC = NT // C

#: Bytes of input of one thread's block per super-block (fits the 512 KiB L2).
BLOCK_BYTES = 256 * 1024

#: Thread 0 scans ``1 + LEAD_SHARE[itemsize]`` times the elements of each
#: other thread, which also reduce theirs: in cache on one thread of a 2-core
#: AMD EPYC (``znver2``), float32, a block scanned 1.30 ns an element and
#: reduced 0.61 (float64 3.11 and 1.22), so that thread 0 takes about 1.45
#: (1.4) times as many.
LEAD_SHARE = {4: 0.45, 8: 0.4}

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


def serves(monoid: Any, leaves: Sequence[Any], axis: int, reverse: bool, exclusive: bool) -> bool:
    """Whether :func:`scan` runs this scan itself: a ``logaddexp`` scan (either direction,
    inclusive or exclusive) of one float32 or float64 array along its last axis."""
    del reverse, exclusive  # all four variants
    if getattr(monoid, "scalar", None) is not _logaddexp or len(leaves) != 1:
        return False
    x = leaves[0]
    nd = getattr(x, "ndim", 0)
    return (
        nd >= 1 and axis in (-1, nd - 1) and getattr(x, "dtype", None) in (np.float32, np.float64)
    )


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


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _tile(x, o, b, cm, cs, e, th, one, zero):  # type: ignore[no-untyped-def]
    """Scan x[b:b + NT] into o from state (cm, cs), chunk after chunk, with ``e``
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
    for c in range(np.uintp(NC)):
        xb = ub + c * cc
        mc = _max(x, xb, xb + cc, m)
        if mc > ninf:
            # the carry to the new maximum (from -inf: k is 0, or NaN where a NaN was met)
            k = k * vmath.fexp_flush(m - mc)
        r = mc if mc > ninf else zero
        for j in range(cc):
            e[j] = vmath.fexp_flush(x[xb + j] - r, one)
        k = _scan_chunk(e, k)  # e: the carry plus the prefix sums
        if mc > ninf:
            # the prefixes grow along the chunk: its first is the least
            ok = ok and e[0] >= th
        # flog_normal: where its argument is not a positive normal float the
        # tile is redone by the fold (below th, +inf, NaN: k is then NaN or
        # +inf), except where mc is -inf: e is then 0 and -inf + log(0) -inf
        for j in range(cc):
            o[xb + j] = mc + vmath.flog_normal(e[j], one)
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
    if not (m < np.inf):
        return _saturated(x, o, lo + nt * NT, hi, m, one)
    return _fold(x, o, lo + nt * NT, hi, m, s, one, zero)


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
        if _bad(x, b, b + NT, np.inf) > 0:
            # the fold of a run holding a NaN is NaN, else one holding +inf is +inf
            m2, s2 = _as(np.nan if _nans(x, b, b + NT) > 0 else np.inf, one), one
        else:
            m2 = _max(x, b, b + NT, ninf)
            s2 = zero if m2 == ninf else _sumexp(x, b, b + NT, m2, one, zero)
        m, s = _join(m, s, m2, s2, one, zero)
    m2, s2 = _fold(x, None, lo + nt * NT, hi, ninf, zero, one, zero)
    return _join(m, s, m2, s2, one, zero)


@numba.njit(parallel=True, nogil=True, cache=True)
def _scan_1d(x, o, T, BK, B0, th, one, zero, rev, excl):  # type: ignore[no-untyped-def]
    """Scan one row on ``T`` threads: thread 0 scans ``B0`` elements of each
    super-block, threads 1.. reduce ``BK`` each and scan them in the next region."""
    N = x.shape[0]
    ninf = _as(-np.inf, zero)
    tm = np.empty(T, x.dtype)
    ts = np.empty(T, x.dtype)
    km = np.empty(T, x.dtype)
    ksum = np.empty(T, x.dtype)
    m, s = ninf, zero
    SB = B0 + (T - 1) * BK
    nsb = (N + SB - 1) // SB
    for b in range(nsb + 1):
        s0 = b * SB
        for t in prange(T):
            if b > 0 and t > 0:
                plo = min(s0 - SB + B0 + (t - 1) * BK, N)
                _block(x, o, plo, min(plo + BK, N), km[t], ksum[t], th, one, zero, rev, excl)
            lo = min(s0 + (0 if t == 0 else B0 + (t - 1) * BK), N)
            hi = min(lo + (B0 if t == 0 else BK), N)
            if b < nsb:
                if t == 0:
                    r = _block(x, o, lo, hi, m, s, th, one, zero, rev, excl)
                else:
                    r = (
                        _reduce(x, N - hi, N - lo, one, zero)
                        if rev
                        else _reduce(x, lo, hi, one, zero)
                    )
                tm[t] = r[0]
                ts[t] = r[1]
        if b < nsb:
            m, s = tm[0], ts[0]
            for t in range(1, T):
                km[t] = m
                ksum[t] = s
                m, s = _join(m, s, tm[t], ts[t], one, zero)


@numba.njit(parallel=True, nogil=True, cache=True)
def _scan_rows(x, o, th, one, zero, rev, excl):  # type: ignore[no-untyped-def]
    ninf = _as(-np.inf, zero)
    for p in prange(x.shape[0]):
        _block(x[p], o[p], 0, x.shape[1], ninf, zero, th, one, zero, rev, excl)


def _consts(dtype: np.dtype) -> tuple[Any, Any, Any]:
    """``th`` (see the module docstring), one and zero in ``dtype``."""
    th = 2.0**-60 if dtype == np.float32 else 2.0**-900
    return dtype.type(th), dtype.type(1), dtype.type(0)


def scan(
    x: np.ndarray, out: np.ndarray | None = None, reverse: bool = False, exclusive: bool = False
) -> np.ndarray:
    """The ``logaddexp`` scan of ``x`` (float32 or float64) along its last axis (from the
    last element to the first where ``reverse``; each output leaving its own element
    out where ``exclusive``)."""
    x = np.ascontiguousarray(x)
    shape, n = x.shape, x.shape[-1]
    p = math.prod(shape[:-1])
    x2 = x.reshape(p, n)
    if out is None:
        if x.nbytes >= 1 << 17:
            settle_allocator()
        out = mapped_empty(shape, x.dtype)
    o2 = out.reshape(p, n)
    k = _consts(x.dtype)
    rev, excl = bool(reverse), bool(exclusive)
    bk = max(NT, BLOCK_BYTES // x.itemsize // NT * NT)
    ninf = x.dtype.type(-np.inf)
    if p * n <= 2 * bk:
        for r in range(p):
            _block(x2[r], o2[r], 0, n, ninf, k[2], *k, rev, excl)
        return out
    with threads.sized() as T:
        if T == 1:
            for r in range(p):
                _block(x2[r], o2[r], 0, n, ninf, k[2], *k, rev, excl)
        elif p >= 2 * T or n <= 2 * bk:
            _scan_rows(x2, o2, *k, rev, excl)
        else:
            from . import _cpu_logsum_threads as lt

            fwd = not rev and not excl
            share = (lt.LEAD_SHARE if fwd else LEAD_SHARE)[x.itemsize]
            b0 = bk + int(bk * share) // NT * NT
            for r in range(p):
                if fwd:
                    lt.scan_1d(x2[r], o2[r], T, bk, b0, *k)
                else:
                    _scan_1d(x2[r], o2[r], T, bk, b0, *k, rev, excl)
    return out
