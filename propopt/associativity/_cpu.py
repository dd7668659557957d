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

The kernel source depends on the monoid's arity, so it is generated
(``_cpu_source.py``) and compiled once per (monoid, dtype); see ``_jit.py``.
Which in-block form runs is chosen in ``_cpu_forms.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import numpy as np

from .. import _jit, threads
from .._memory import scan_result_empty, settle_allocator
from ..arrays import frozen
from ._cpu_forms import MonoidLike, may_raise, tile_elements, tree_for, vector_op
from ._cpu_source import _source

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
    spliced = _jit.splice(monoid.scalar, "_py_combine", _jit.KERNEL_HELPER)
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
    spliced = _jit.splice(monoid.scalar, "_py_combine", _jit.KERNEL_HELPER)
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
        if p * n <= 2 * bk or how.serial:
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
        if how.serial:
            _cols_here(mod, xs, os_, rev, excl, ident)
            return _results(shape, kept, os_, out)
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
    serial: bool  # the combine may raise: the calling thread only (:func:`may_raise`)


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
    k, size = monoid.arity, dtype.itemsize
    setup = _Setup(mod, identity(monoid, dtype), block_elements(k, size, tree),
                   tile_elements(k, size, tree), may_raise(monoid))  # fmt: skip
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


def _cols_here(mod: Any, xs: list[np.ndarray], os_: list[np.ndarray], rev: bool, excl: bool,
               ident: tuple[Any, ...]) -> None:  # fmt: skip
    """Each (N, Q) row of the column scan on the calling thread."""
    p, n, q = xs[0].shape
    for r in range(p):
        carries = [np.full(q, e, xs[0].dtype) for e in ident]
        mod._cols(*(x[r] for x in xs), *(o[r] for o in os_), 0, n, n, 0, q, rev, excl, True,
                  True, *carries)  # fmt: skip


def elementwise(monoid: MonoidLike, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """Apply the scalar combine elementwise to NumPy arrays (with broadcasting)."""
    arrays = np.broadcast_arrays(*[np.asarray(v) for v in (*a, *b)])
    dtype = np.result_type(*arrays)
    shape = arrays[0].shape
    flat = [frozen(np.ascontiguousarray(v, dtype=dtype).reshape(-1)) for v in arrays]
    outs = [np.empty(flat[0].shape, dtype) for _ in range(monoid.arity)]
    with _jit.user_code(f"combine {monoid.name!r}", FIX, runs=True):
        how = _setup(monoid, dtype, False, False, ())
        (how.mod.elementwise_here if how.serial else how.mod.elementwise)(*flat, *outs)
    return [o.reshape(shape) for o in outs]
