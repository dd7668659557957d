"""A monoid's CPU kernels, compiled by numba: the multi-threaded scan and the elementwise combine.

One algorithm at two scales inside a machine.  An array is scanned in three
phases: reduce each piece to its total, scan the (few) totals sequentially,
then scan each piece again starting from its carry.  The pieces are

* *tiles* inside one thread (a plain ``h = a*h + b`` loop is bound by the
  4-cycle latency of one FMA): for elements of at most 4 bytes and arity at
  most 2 whose combine is dear (it calls a function) or compares (``max``)
  (:func:`tree_for`), a tile of at most 2048 elements is scanned
  as a tree whose levels are counted loops that vectorize to the SIMD width
  (``_cpu_tile.py``); otherwise it is cut into ``L`` contiguous lanes
  scanned in one interleaved loop, ``L`` independent chains in flight
  (``_cpu_lanes.py``), which keep a cheap combine at memory's pace;
* *threads*: the array is walked in super-blocks of ``T * block`` elements;
  each thread reduces its block, the ``T`` totals are scanned, and each
  thread scans its block again while it is still in its L2 cache.  Main
  memory is read once and written once, as in a copy.

When the scan axis is not the last one (elements are vectors of length
``Q > 1``), the innermost loop runs over ``Q`` independent scans and
vectorizes with SIMD; the three phases then run over chunks of the scan axis
when there are too few independent rows to fill the threads.

The kernel source depends on the monoid's arity, so it is generated from the
templates below and compiled once per (monoid, dtype); see ``_jit.py``.
"""

from __future__ import annotations

import dis
import functools
import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol, cast

import numpy as np

from .. import _jit, threads
from .._memory import scan_result_empty, settle_allocator
from ..arrays import frozen
from . import _cpu_ftz, _cpu_vector
from ._cpu_lanes import lane_lines, lane_total_lines, lanes_for
from ._cpu_tile import reduce_then_scan_source, tile_source


class MonoidLike(Protocol):
    """What the kernels take from a :class:`propopt.Monoid` (whose module imports this one)."""

    name: Any
    arity: int
    flush: tuple[int, ...]

    def scalar(self, *args: Any) -> Any: ...

    def identity(self, dtype: Any) -> tuple[Any, ...]: ...


#: Bytes of input each thread scans per super-block; blocks 1.. are fixed up
#: while still in cache (L2/L3).  Each super-block costs one parallel region
#: and one barrier, and with 2 cores any other busy thread stalls a barrier:
#: 2 MiB measured 10.6 ms for float32 add at N = 2^24 against 11.5 ms at
#: 128 KiB on a quiet machine, and was much less disturbed by other threads.
BLOCK_BYTES = 2048 * 1024

#: Thread 0 of each super-block starts from the running carry and so needs no
#: fix-up pass; it scans ``1 + LEAD_SHARE`` times as many elements as each of
#: the other threads, so that all of them reach the barrier together.
LEAD_SHARE = 0.3

#: Elements per lane of the lane form of the in-block scan (``_cpu_lanes.py``):
#: a compile-time constant, so that every lane is addressed from one base
#: pointer.  Not a power of two: with 512 float32 lanes every other lane sat a
#: multiple of 4 KiB from another, and on an AVX-512 Xeon one thread's lane
#: pass ran at the sequential loop's speed (docs/associativity.md).
LANE = 1040

#: The lane form prefetches its next tile for elements of at most this many
#: bytes (``_cpu_lanes.lane_lines`` gives the figures).
PREFETCH_ITEMSIZE = 4

#: Bytes of input in one in-block tile (``_cpu_tile.py``), at most 2048
#: elements: its levels are kept in scratch of the same size, which with the
#: tile's input and output stays in the L1 and L2 caches.  Float32 linear
#: recurrence at 2^22 on one thread: 9.2 ms with 512-element tiles, 9.0 ms
#: with 2048, each run beside the sequential loop's 7.6 ms.
TILE_BYTES = 16384

#: ``LEAD_SHARE`` for scans that leave outputs out (``_cpu_tile.reduce_then_scan_source``):
#: threads 1.. reduce a block and scan another in each parallel region, thread 0 scans one.
REDUCE_LEAD_SHARE = 0.6

#: Column-block width for scans whose elements are vectors (axis not last).
COL_BLOCK = 256

#: dtypes the CPU kernels are compiled for.
SUPPORTED = frozenset(
    np.dtype(t)
    for t in (
        np.int8, np.int16, np.int32, np.int64,
        np.uint8, np.uint16, np.uint32, np.uint64,
        np.float32, np.float64, np.complex64, np.complex128,
    )
)  # fmt: skip


def uses_tree(arity: int, itemsize: int) -> bool:
    """Whether the in-block scan can be the tree of ``_cpu_tile.py`` (else the lanes of
    ``_cpu_lanes.py``): for elements of at most 4 bytes and arity at most 2."""
    return arity <= 2 and itemsize <= 4


def selects(monoid: MonoidLike) -> bool:
    """Whether the combine compares its arguments (``max``, ``min``): a select per element.

    The lanes run each combine as scalar code, the tree as whole vectors: float32
    ``maximum`` at 2^22 (two threads, a 2-core AMD EPYC, ``znver2``) took 3.0-3.4 ms
    as the tree against 3.8-4.0 ms as lanes (a copy of ``x``: 1.8 ms); int32's
    ``maximum``, with no NaN to test, kept the lanes' pace better (2.4-2.6 ms
    against 2.7-2.8 ms as the tree).
    """
    fn = getattr(monoid.scalar, "py_func", monoid.scalar)
    code = getattr(fn, "__code__", None)
    return code is not None and any(i.opname == "COMPARE_OP" for i in dis.get_instructions(code))


def calls(monoid: MonoidLike) -> bool:
    """Whether the combine calls a function or reads a global (``math.exp``, a helper).

    The tree pays where the combine is dear: float32 ``logaddexp`` at 2^22
    ran 13.6 ms as the tree against 31.7 ms as lanes (two threads; one
    thread 20.8 against 49.9 ms).  Where it is a few arithmetic operations
    the lanes keep pace with memory on fewer instructions: ``add`` at 2^24
    14.2-14.5 ms as lanes against 15.1-15.6 ms as the tree, float32
    ``linear_recurrence`` at 2^22 5.0-5.1 against 5.3-5.7 ms (one thread
    18.0-18.7 against 20.8-21.3 ms and 7.95 against 8.3-8.5 ms), measured
    side by side on a 2-core AMD EPYC (znver2).
    """
    fn = getattr(monoid.scalar, "py_func", monoid.scalar)
    code = getattr(fn, "__code__", None)
    return code is None or bool(code.co_names)


def tree_for(monoid: MonoidLike, itemsize: int, keep: Sequence[int] = (), kind: str = "f") -> bool:
    """Whether the scan of ``monoid`` writing the components ``keep`` (all when empty)
    runs the tree: a dear combine (:func:`calls`) or a float combine that compares
    (:func:`selects`).  ``kind``: the dtype's kind.  A scan that leaves outputs out runs
    the lanes too, the others kept a tile at a time (``_cpu_lanes.lane_lines``)."""
    del keep
    dear = calls(monoid) or (kind in "fc" and selects(monoid))
    return uses_tree(monoid.arity, itemsize) and dear


def vector_op(monoid: MonoidLike, dtype: np.dtype, keep: Sequence[int] = ()) -> str:
    """``"max"`` or ``"min"`` where the in-block scan is the vector form of
    ``_cpu_vector.py`` (the built-in float :data:`~propopt.maximum` and
    :data:`~propopt.minimum`), else ``""``."""
    if dtype.kind != "f" or len(keep) not in (0, monoid.arity):
        return ""
    fn = getattr(monoid.scalar, "py_func", monoid.scalar)
    if getattr(fn, "__module__", None) != f"{__package__}.monoid":  # (monoid.py imports this one)
        return ""
    return {"_max": "max", "_min": "min"}.get(getattr(fn, "__qualname__", ""), "")


def tile_elements(arity: int, itemsize: int, tree: bool | None = None) -> int:
    """Elements of one in-block tile: a power of two near ``TILE_BYTES`` for the tree,
    ``LANE`` per lane for the lanes (``tree``: by :func:`uses_tree` when None)."""
    if tree is None:
        tree = uses_tree(arity, itemsize)
    if not tree:
        return LANE * lanes_for(arity)
    return max(256, min(2048, 1 << (TILE_BYTES // (arity * itemsize)).bit_length() - 1))


# ------------------------------------------------------------------ codegen
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
    a ``<name>`` that sets the flush bit around it and puts the register back (``hw``)."""
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
            f"    r = {name}_k({params})",
            "    ftz_leave(m)",
            "    return r",
            "",
        ]
    return body + "\n".join(lines) + "\n"


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
        return _with_flush_bit("\n".join(out) + "\n", hw)
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
    B = _v("b", k)
    w("@numba.njit(parallel=True, nogil=True, cache=CACHE)")
    w(f"def elementwise({_j(X)}, {_j(B)}, {_j(O)}):")
    w("    for q in prange(x0.shape[0]):")
    w("        u = np.uintp(q)")
    w(f"        {_j(_v('r', k))}, = combs({_j(A + [f'b{i}[u]' for i in range(k)])})")
    w("        " + "; ".join(f"o{i}[u] = r{i}" for i in range(k)))
    return _with_flush_bit("\n".join(out) + "\n", hw)


def kernels(
    monoid: MonoidLike,
    dtype: np.dtype,
    rev: bool = False,
    excl: bool = False,
    keep: tuple[int, ...] = (),
) -> Any:
    """The compiled-on-demand kernel module for ``monoid``, ``dtype`` and one direction.

    ``keep``: the components the scan writes (all when empty); a module
    that leaves some out has the row kernels only (``scan_rows``,
    ``scan_1d``, ``_block``).

    Keyed by what the combine computes (:func:`propopt._jit.splice`), not by
    the monoid object: a monoid made afresh around the same code shares the
    module, in this process and, through numba's disk cache, in the next.
    """
    keep = () if len(keep) == monoid.arity else tuple(keep)
    key = (np.dtype(dtype), bool(rev), bool(excl), keep)
    cache = _jit.kernel_cache(monoid, "cpu")
    if key in cache:
        return cache[key]
    dt = key[0]
    spliced = _jit.splice(monoid.scalar, "_py_combine")
    tag = f"cpu_{monoid.name}_{dt.name}".replace("-", "_")
    vector = vector_op(monoid, dt, keep)
    tree = not vector and tree_for(monoid, dt.itemsize, keep, dt.kind)
    src = _source(monoid.arity, dt, spliced.source, spliced.namespace is None, key[1], key[2],
                  tuple(monoid.flush), keep, tree, vector)  # fmt: skip
    mod = _jit.load_spliced(spliced, src, tag)
    if spliced.stable:  # nothing it reads can be rebound: keep it with the monoid
        cache[key] = mod
    return mod


def inspectable(monoid: MonoidLike, dtype: np.dtype, rev: bool = False, excl: bool = False,
                tree: bool | None = None) -> Any:  # fmt: skip
    """The kernels of :func:`kernels`, compiled afresh and kept off the disk cache.

    For reading their machine code (``mod._block.inspect_asm(...)`` after a
    call): numba does not inspect code it loaded from its cache.  ``tree``:
    the in-block form (by :func:`vector_op` and :func:`tree_for` when None).
    """
    import types

    dt = np.dtype(dtype)
    spliced = _jit.splice(monoid.scalar, "_py_combine")
    vector = vector_op(monoid, dt) if tree is None else ""
    if tree is None:
        tree = not vector and tree_for(monoid, dt.itemsize, kind=dt.kind)
    src = _source(monoid.arity, dt, spliced.source, False, bool(rev), bool(excl),
                  tuple(monoid.flush), (), tree, vector)  # fmt: skip
    ns: dict[str, Any] = dict(spliced.namespace or {})
    exec(compile(src, f"<propopt cpu kernels {monoid.name}>", "exec"), ns)
    return types.SimpleNamespace(**ns)


def identity(monoid: MonoidLike, dtype: np.dtype) -> tuple[Any, ...]:
    """The monoid's identity as scalars of ``dtype``, as the kernels take it."""
    return tuple(dtype.type(v) for v in monoid.identity(dtype))


def block_elements(arity: int, itemsize: int, tree: bool | None = None) -> int:
    """Elements per thread per super-block for ``BLOCK_BYTES`` of input."""
    tile = tile_elements(arity, itemsize, tree)
    return max(tile, BLOCK_BYTES // (arity * itemsize) // tile * tile)


#: What a combine must be, said when numba cannot compile one.
FIX = (
    "a Monoid's combine takes 2k scalars and returns k of them, using only what numba "
    "supports (math, arithmetic, if)"
)


def scan(
    monoid: MonoidLike,
    leaves: Sequence[np.ndarray],
    axis: int,
    reverse: bool,
    exclusive: bool,
    *,
    block: int | None = None,
    out: Sequence[np.ndarray | None] | None = None,
    keep: tuple[int, ...] = (),
    init: Sequence[np.ndarray] | None = None,
) -> list[Any]:
    """Scan NumPy arrays of one shape and dtype along ``axis``.

    Short scans (at most two blocks) run on the calling thread; longer ones
    take the threads :func:`propopt.threads.sized` grants the call.  ``out``:
    C-contiguous arrays of the result's shape and dtype, sharing no memory
    with ``leaves``, to write into (returned as the result).  ``keep``: the
    components to write (all when empty); the others come back as ``None``
    and are never stored.  ``init``: each row's carry into its first element,
    ``k`` arrays of the shape of the axes before ``axis``.  ``keep`` and
    ``init`` need ``axis`` to be the last axis.  A combine that numba cannot
    compile, or that raises, gives one line naming it.
    """
    with _jit.user_code(f"combine {monoid.name!r}", FIX, runs=True):
        return _scan(monoid, leaves, axis, reverse, exclusive, block, out, keep, init)


def _scan(
    monoid: MonoidLike,
    leaves: Sequence[np.ndarray],
    axis: int,
    reverse: bool,
    exclusive: bool,
    block: int | None,
    out: Sequence[np.ndarray | None] | None,
    keep: tuple[int, ...] = (),
    init: Sequence[np.ndarray] | None = None,
) -> list[Any]:
    shape = leaves[0].shape
    dtype = leaves[0].dtype
    if len(shape) == 1 and out is None and init is None and not keep:
        how = _setup(monoid, dtype, bool(reverse), bool(exclusive), ())
        if shape[0] <= 2 * (block or how.block):
            return _short(how, leaves, shape[0], dtype, bool(reverse), bool(exclusive))
    n = shape[axis]
    p = math.prod(shape[:axis])
    q = math.prod(shape[axis + 1 :])
    kept = keep or tuple(range(monoid.arity))
    # read-only views: a read-only input (a Dask chunk) uses the same compiled kernels
    xs = [frozen(np.ascontiguousarray(x).reshape(p, n, q)) for x in leaves]
    if out is None and n * p * q * dtype.itemsize >= 1 << 17:  # above glibc's mmap threshold
        settle_allocator()
    os_ = []
    for i in range(monoid.arity):
        given = None if out is None else out[i]
        if i not in kept:  # never written: a placeholder row for each row
            os_.append(np.empty((p, 1, 1), dtype))
        elif given is not None:
            os_.append(given.reshape(p, n, q))  # C-contiguous: views
        else:
            os_.append(scan_result_empty((p, n, q), dtype))  # mapped first, where that pays
    rev, excl = bool(reverse), bool(exclusive)
    how = _setup(monoid, dtype, rev, excl, keep)
    mod, ident = how.mod, how.ident
    fresh = init is None
    if q == 1:
        x2 = [x.reshape(p, n) for x in xs]
        o2 = [o.reshape(p, o.shape[1] * o.shape[2]) for o in os_]  # p may be 0
        bk = block or how.block
        if p * n <= 2 * bk and init is None and p == 1:  # the common short call
            mod._block(*(x[0] for x in x2), *(o[0] for o in o2), ZERO, np.int64(n),
                       np.int64(n), rev, excl, *ident, *ident, True)  # fmt: skip
            return _results(shape, kept, os_, out)
        inits = _inits(ident, init, p, dtype)
        if p * n <= 2 * bk:
            _rows_here(mod, x2, o2, rev, excl, ident, inits, fresh)
        else:
            with threads.sized() as T:
                if T == 1:
                    _rows_here(mod, x2, o2, rev, excl, ident, inits, fresh)
                elif p >= 2 * T or n <= 2 * bk:
                    mod.scan_rows(*x2, *o2, rev, excl, *ident, *inits, fresh)
                else:
                    share = LEAD_SHARE if len(kept) == monoid.arity else REDUCE_LEAD_SHARE
                    b0 = bk + int(bk * share) // how.tile * how.tile
                    for r in range(p):
                        xr, orow = [x[r] for x in x2], [o[r] for o in o2]
                        c0 = [v[r] for v in inits]
                        mod.scan_1d(*xr, *orow, rev, excl, T, bk, b0, *ident, *c0, fresh)
    else:
        if len(kept) < monoid.arity or init is not None:
            raise ValueError(f"keep={keep} and init= need the last axis, got axis={axis}")
        with threads.sized() as T:
            tasks = p * -(-q // COL_BLOCK)
            if tasks >= 2 * T or n < 64 * T or T == 1:
                mod.scan_cols(*xs, *os_, rev, excl, COL_BLOCK, *ident)
            else:
                for r in range(p):
                    xr, orow = [x[r] for x in xs], [o[r] for o in os_]
                    mod.scan_cols_chunked(*xr, *orow, rev, excl, T, *ident)
    return _results(shape, kept, os_, out)


ZERO = np.int64(0)


class _Setup(NamedTuple):
    """What a scan of one (monoid, dtype, direction, kept components) runs with."""

    mod: Any  # the kernels (:func:`kernels`)
    ident: tuple[Any, ...]  # the identity as scalars of the dtype
    block: int  # elements per thread per super-block (:func:`block_elements`)
    tile: int  # elements of one in-block tile (:func:`tile_elements`)


def _setup(monoid: MonoidLike, dtype: np.dtype, rev: bool, excl: bool,
           keep: tuple[int, ...]) -> _Setup:  # fmt: skip
    """The :class:`_Setup` of a scan, kept beside its kernels when they are kept, so that
    a repeated call finds it in one look-up (a short scan costs microseconds in all)."""
    key = ("setup", dtype, rev, excl, keep)
    cache = _jit.kernel_cache(monoid, "cpu")
    got = cache.get(key)
    if got is not None:
        return cast(_Setup, got)
    mod = kernels(monoid, dtype, rev, excl, keep)
    tree = tree_for(monoid, dtype.itemsize, keep or tuple(range(monoid.arity)), dtype.kind)
    setup = _Setup(mod, identity(monoid, dtype), block_elements(monoid.arity, dtype.itemsize, tree),
                   tile_elements(monoid.arity, dtype.itemsize, tree))  # fmt: skip
    full = () if len(keep) == monoid.arity else tuple(keep)
    if cache.get((np.dtype(dtype), rev, excl, full)) is mod:  # the kernels are kept
        cache[key] = setup
    return setup


def _short(how: _Setup, leaves: Sequence[np.ndarray], n: int, dtype: np.dtype, rev: bool,
           excl: bool) -> list[Any]:  # fmt: skip
    """A 1-D scan of at most two blocks: one call of the block kernel on this thread
    (the general path's reshapes and per-row carries cost microseconds per call)."""
    if n * dtype.itemsize >= 1 << 17:  # above glibc's mmap threshold
        settle_allocator()
    xs = [frozen(np.ascontiguousarray(x)) for x in leaves]
    os_ = [scan_result_empty((n,), dtype) for _ in leaves]
    N = np.int64(n)
    how.mod._block(*xs, *os_, ZERO, N, N, rev, excl, *how.ident, *how.ident, True)
    return os_


def _inits(ident: tuple[Any, ...], init: Sequence[np.ndarray] | None, p: int,
           dtype: np.dtype) -> list[np.ndarray]:  # fmt: skip
    """Each row's carry into its first element, one (p,) array per component."""
    if init is None:
        return [np.full(p, e, dtype) for e in ident]
    return [np.ascontiguousarray(v, dtype).reshape(p) for v in init]


def _results(shape: tuple[int, ...], kept: Sequence[int], os_: list[np.ndarray],
             out: Sequence[np.ndarray | None] | None) -> list[Any]:  # fmt: skip
    """The scan's results in ``shape`` (``None`` for the components left out); ``out``'s
    own arrays where it gave them."""
    got = [o.reshape(shape) if i in kept else None for i, o in enumerate(os_)]
    if out is not None:
        got = [o if o is not None and g is not None else g for o, g in zip(out, got)]
    return got


def _rows_here(
    mod: Any,
    x2: list[np.ndarray],
    o2: list[np.ndarray],
    rev: bool,
    excl: bool,
    ident: tuple[Any, ...],
    inits: list[np.ndarray],
    fresh: bool,
) -> None:
    """Each row on the calling thread: no parallel region to wake up, which on a
    busy machine costs more than scanning a short row."""
    n = np.int64(x2[0].shape[1])
    zero = np.int64(0)
    for r in range(x2[0].shape[0]):
        c = [v[r] for v in inits]
        mod._block(
            *(x[r] for x in x2), *(o[r] for o in o2), zero, n, n, rev, excl, *c, *ident, fresh
        )


def elementwise(monoid: MonoidLike, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """Apply the scalar combine elementwise to NumPy arrays (with broadcasting)."""
    arrays = np.broadcast_arrays(*[np.asarray(v) for v in (*a, *b)])
    dtype = np.result_type(*arrays)
    shape = arrays[0].shape
    flat = [frozen(np.ascontiguousarray(v, dtype=dtype).reshape(-1)) for v in arrays]
    outs = [np.empty(flat[0].shape, dtype) for _ in range(monoid.arity)]
    with _jit.user_code(f"combine {monoid.name!r}", FIX, runs=True):
        kernels(monoid, dtype).elementwise(*flat, *outs)
    return [o.reshape(shape) for o in outs]
