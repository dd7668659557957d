"""Scan of dask arrays: the three phases across chunks, as a lazy task graph.

Each chunk along the scanned axis is a piece, and the pieces are finished
from their carries exactly as the blocks of the CPU and generic backends:

1. *Local scans.*  Every block is scanned on its own, in parallel, by the
   backend the scan table (``_backends``) picks for its NumPy arrays (the
   numba CPU kernel for a :class:`~propopt.Monoid`, the generic path for a
   plain callable).
2. *Scan of the totals.*  The total of a chunk is the last element of its
   local inclusive scan, in scan order (the first element of the block when
   ``reverse=True``, where chunks are visited from the end); a small task
   next to each block cuts it out.  The carries -- the combination of all
   chunks visited before -- form a chain of small tasks, one per chunk, each
   combining the previous carry with a total: ``carry_{p+1} = carry_p .
   total_p``.  The chain is the only sequential part, and it moves one
   element per chunk (one row of the block in the other axes), never a block.
3. *Fix-up.*  Each block's result is ``combine(carry, local)``, the carry
   broadcast along the axis; the first chunk visited has no carry and is its
   local scan.  For ``exclusive=True`` the result is then shifted by one in
   scan order, the carry (or, for the first chunk, the identity) filling the
   vacated first position (the chunk's last element in scan order only feeds
   the next carry).

The accumulated prefix (suffix, in reverse) is always the *left* operand of
the combine, as in ``jax.lax.associative_scan``, so commutativity is never
assumed.  Every combination of block indices in the other axes has its own
independent chain.  Nothing is computed when the graph is built (only, for
a plain callable, one call of ``fn`` on empty arrays to learn the result
dtypes, as dask does for ``map_blocks``).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..monoid import BUILTINS, Monoid
from ..segmented import Segmented, segmented
from ._arrays import concat, expand, take
from ._plan import ScanPlan

Leaves = list[Any]


def check_chunks(leaves: Sequence[Any], paths: Sequence[str]) -> None:
    """Refuse dask arrays whose chunk sizes are unknown (the scan needs each chunk's length)."""
    for leaf, path in zip(leaves, paths):
        if any(np.isnan(d) for d in leaf.shape):
            raise ValueError(
                f"{path} has unknown chunk sizes (shape {leaf.shape}); call "
                "x.compute_chunk_sizes() first"
            )


def scan(plan: ScanPlan, local: Callable[..., Leaves]) -> Leaves:
    """Scan the plan's dask arrays along its axis; lazy dask arrays of the results.

    See ``_reference.scan`` for the semantics.  ``plan.combine`` is ``fn`` on
    lists of leaves; ``plan.identity_leaves()`` (needed with ``exclusive``) holds NumPy arrays
    that broadcast to one element (the shape of a leaf with ``axis`` of length 1).
    ``local(fn, combine, blocks, axis, reverse)`` scans one chunk in memory: the
    scan table's choice for NumPy blocks (a module-level function, so that it
    pickles to the workers by name).
    """
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    fn, combine, leaves, axis = plan.fn, plan.combine, plan.leaves, plan.axis
    reverse, exclusive = plan.reverse, plan.exclusive
    identity = plan.identity_leaves() if exclusive else None
    xs = _align(list(leaves), axis)
    if isinstance(fn, Monoid):
        ops = _Ops(_Shipped(fn), None, local)
        dtypes = [np.dtype(x.dtype) for x in xs]
    else:
        ops = _Ops(None, combine, local)
        dtypes = _callable_dtypes(combine, xs, axis)
    if xs[0].shape[axis] == 0:
        return [x.astype(dt) for x, dt in zip(xs, dtypes)]

    token = tokenize(
        ops, [x.name for x in xs], axis, reverse, exclusive, identity, [str(d) for d in dtypes]
    )
    local_name = f"associative-scan-local-{token}"
    total_name = f"associative-scan-total-{token}"
    carry_name = f"associative-scan-carry-{token}"
    fix_name = f"associative-scan-fixup-{token}"
    out_names = [f"associative-scan-{n}-{token}" for n in range(len(xs))]
    spec = _Spec(ops, axis, reverse, exclusive, tuple(dtypes))

    sizes = xs[0].chunks[axis]
    k_chunks = len(sizes)
    order = range(k_chunks - 1, -1, -1) if reverse else range(k_chunks)
    same_grid = all(x.numblocks == xs[0].numblocks for x in xs)
    first = xs[0]
    if same_grid:
        others = [range(nb) for d, nb in enumerate(first.numblocks) if d != axis]
        combos: list[tuple[int, ...]] = list(itertools.product(*others))
    else:  # _align gave every leaf one block in the other axes
        combos = [()]

    def block_index(x: Any, j: int, combo: tuple[int, ...]) -> tuple[int, ...]:
        if same_grid:
            return combo[:axis] + (j,) + combo[axis:]
        return (0,) * axis + (j,) + (0,) * (x.ndim - axis - 1)

    local_dsk: dict[Any, Any] = {}
    total_dsk: dict[Any, Any] = {}
    carry_dsk: dict[Any, Any] = {}
    fix_dsk: dict[Any, Any] = {}
    out_dsks: list[dict[Any, Any]] = [{} for _ in xs]
    for combo in combos:
        carry_key: tuple[Any, ...] | None = None  # the carry into the next chunk visited
        for j in order:
            local_key = (local_name, j, *combo)
            idx = [block_index(x, j, combo) for x in xs]
            local_dsk[local_key] = (
                _local,
                spec,
                [(x.name, *i) for x, i in zip(xs, idx)],
            )
            start = None
            if exclusive and carry_key is None:
                assert identity is not None
                start = [_block_identity(e, x, i, axis) for e, x, i in zip(identity, xs, idx)]
            fix_key = (fix_name, j, *combo)
            fix_dsk[fix_key] = (_fixup, spec, local_key, carry_key, start)
            for n, (out, name, i) in enumerate(zip(out_dsks, out_names, idx)):
                out_key = (name, *i)
                out[out_key] = (operator.getitem, fix_key, n)
            if sizes[j] > 0:  # an empty chunk passes the carry on unchanged
                # the total is cut out where the block lives, so that the chain
                # of carries moves one element per chunk, never a whole block
                total_key = (total_name, j, *combo)
                total_dsk[total_key] = (_total, spec, local_key)
                if carry_key is None:
                    carry_key = total_key
                else:
                    new_key = (carry_name, j, *combo)
                    carry_dsk[new_key] = (_carry, spec, carry_key, total_key)
                    carry_key = new_key

    layers: dict[str, Any] = {}
    deps: dict[str, set[str]] = {}
    in_layers: set[str] = set()
    for x in xs:
        g = x.__dask_graph__()
        if not isinstance(g, HighLevelGraph):
            g = HighLevelGraph.from_collections(x.name, dict(g), dependencies=())
        layers.update(g.layers)
        deps.update(g.dependencies)
        in_layers.update(x.__dask_layers__())
    layers[local_name] = local_dsk
    deps[local_name] = in_layers
    layers[total_name] = total_dsk
    deps[total_name] = {local_name}
    layers[carry_name] = carry_dsk
    deps[carry_name] = {total_name}
    layers[fix_name] = fix_dsk
    deps[fix_name] = {local_name, total_name, carry_name}

    outs = []
    for name, x, dt, out_dsk in zip(out_names, xs, dtypes, out_dsks):
        graph = HighLevelGraph({**layers, name: out_dsk}, {**deps, name: {fix_name}})
        meta = np.empty((0,) * x.ndim, dtype=dt)
        outs.append(da.Array(graph, name, x.chunks, dtype=dt, meta=meta))
    return outs


# ------------------------------------------------------------ graph building
def _align(xs: Leaves, axis: int) -> Leaves:
    """Leaves with one chunk structure: the first leaf's, where shapes allow."""
    for x in xs:
        if any(math.isnan(c) for cs in x.chunks for c in cs):
            raise ValueError(
                f"dask array {x.name!r} has unknown chunk sizes {x.chunks}; call "
                "x.compute_chunk_sizes() before scanning it"
            )
    first = xs[0]
    if all(x.shape == first.shape for x in xs):
        return [first] + [
            x if x.chunks == first.chunks else x.rechunk(first.chunks) for x in xs[1:]
        ]
    # Leaves of different shapes (a plain callable allows it): share the chunks
    # along the axis and keep one block in every other axis, so that blocks pair up.
    out = []
    for x in xs:
        want = {d: (first.chunks[axis] if d == axis else -1) for d in range(x.ndim)}
        out.append(x.rechunk(want))
    return out


def _callable_dtypes(combine: Callable[[Leaves, Leaves], Leaves], xs: Leaves, axis: int) -> list:
    """Result dtypes of the generic scan: inputs promoted with what ``fn`` returns.

    ``fn`` is called once on empty arrays (no data is computed); if it cannot
    take them, the input dtypes are assumed.
    """
    metas = [np.empty(_with_len(x.shape, axis, 0), dtype=x.dtype) for x in xs]
    try:
        with np.errstate(all="ignore"):
            res = combine(metas, metas)
        if len(res) != len(xs):
            raise ValueError
        return [np.result_type(x.dtype, np.asarray(r).dtype) for x, r in zip(xs, res)]
    except Exception:
        return [np.dtype(x.dtype) for x in xs]


def _block_identity(e: Any, x: Any, idx: tuple[int, ...], axis: int) -> np.ndarray:
    """The part of identity ``e`` (one element of leaf ``x``) over block ``idx``."""
    sl = []
    for d, (cs, i) in enumerate(zip(x.chunks, idx)):
        if d == axis:
            sl.append(slice(None))
        else:
            lo = sum(cs[:i])
            sl.append(slice(lo, lo + cs[i]))
    return np.array(np.broadcast_to(e, _with_len(x.shape, axis, 1))[tuple(sl)])


def _with_len(shape: tuple[int, ...], axis: int, n: int) -> tuple[int, ...]:
    return tuple(shape[:axis]) + (n,) + tuple(shape[axis + 1 :])


# ------------------------------------------------------- what the tasks run
def _builtin_monoid(name: str) -> _Shipped:
    return _Shipped(BUILTINS[name])


def _segmented_monoid(inner: _Shipped) -> _Shipped:
    return _Shipped(segmented(inner.monoid))


def _copied_monoid(cls: type[Monoid], state: dict[str, Any]) -> _Shipped:
    m = cls.__new__(cls)
    m.__dict__.update(state)
    return _Shipped(m)


class _Shipped:
    """A monoid as it travels to dask workers.

    A built-in monoid goes by name, so a worker keeps one instance and its
    compiled kernels across tasks.  Any other goes as a copy (its compiled
    kernels are kept beside it, in :func:`propopt._jit.kernel_cache`, and
    stay behind); the worker compiles (or loads from numba's disk cache) its
    own.
    """

    def __init__(self, monoid: Monoid) -> None:
        self.monoid = monoid

    def _is_builtin(self) -> bool:
        return BUILTINS.get(str(self.monoid.name)) is self.monoid

    def _state(self) -> dict[str, Any]:
        return dict(self.monoid.__dict__)

    def __reduce__(self) -> tuple[Any, ...]:
        m = self.monoid
        if self._is_builtin():
            return (_builtin_monoid, (m.name,))
        if isinstance(m, Segmented):  # rebuilt from its monoid (its combine is generated)
            return (_segmented_monoid, (_Shipped(m.inner),))
        return (_copied_monoid, (type(m), self._state()))

    def __dask_tokenize__(self) -> Any:
        from dask.base import normalize_token

        m = self.monoid
        if self._is_builtin():
            return ("propopt-builtin-monoid", m.name)
        if isinstance(m, Segmented):
            return ("propopt-segmented-monoid", _Shipped(m.inner).__dask_tokenize__())
        state = self._state()
        return (
            "propopt-monoid",
            type(m).__qualname__,
            normalize_token([(k, state[k]) for k in sorted(state)]),
        )


class _Ops:
    """The local scan and the combine of one scan, picklable for workers."""

    def __init__(
        self,
        shipped: _Shipped | None,
        combine: Callable[[Leaves, Leaves], Leaves] | None,
        local: Callable[..., Leaves],
    ) -> None:
        self.shipped = shipped
        self.fn_combine = combine
        self.local_scan = local

    def combine(self, a: Leaves, b: Leaves) -> Leaves:
        if self.shipped is not None:
            return self.shipped.monoid.combine_leaves(a, b)
        assert self.fn_combine is not None
        return self.fn_combine(a, b)

    def local(self, blocks: Leaves, axis: int, reverse: bool) -> Leaves:
        """A block's inclusive scan, by the backend the table picks for NumPy blocks."""
        fn: Any = self.shipped.monoid if self.shipped is not None else self.fn_combine
        return self.local_scan(fn, self.combine, list(blocks), axis, reverse)

    def __dask_tokenize__(self) -> Any:
        from dask.base import normalize_token

        return ("propopt-scan-ops", normalize_token(self.shipped), normalize_token(self.fn_combine))


class _Spec:
    """The static arguments of every task (one literal in the graph)."""

    def __init__(
        self, ops: _Ops, axis: int, reverse: bool, exclusive: bool, dtypes: tuple[np.dtype, ...]
    ) -> None:
        self.ops = ops
        self.axis = axis
        self.reverse = reverse
        self.exclusive = exclusive
        self.dtypes = dtypes


def _local(spec: _Spec, blocks: Leaves) -> Leaves:
    """Phase 1: the inclusive scan of one block on its own."""
    blocks = [np.asarray(b) for b in blocks]
    if blocks[0].shape[spec.axis] == 0:
        return blocks
    return spec.ops.local(blocks, spec.axis, spec.reverse)


def _total(spec: _Spec, local: Leaves) -> Leaves:
    """Phase 2, where the block lives: its total, the last element in scan order."""
    ax = spec.axis
    i = 0 if spec.reverse else local[0].shape[ax] - 1
    return [np.array(take(v, i, i + 1, None, ax)) for v in local]


def _carry(spec: _Spec, prev: Leaves, total: Leaves) -> Leaves:
    """Phase 2: the carry into the next chunk visited, ``prev . total``."""
    return [np.asarray(v) for v in spec.ops.combine(prev, total)]


def _fixup(spec: _Spec, local: Leaves, carry: Leaves | None, start: Leaves | None) -> Leaves:
    """Phase 3: ``carry . local`` for every element, shifted by one if exclusive."""
    ax = spec.axis
    m = local[0].shape[ax]
    if m == 0:
        return [np.asarray(v).astype(dt) for v, dt in zip(local, spec.dtypes)]
    if spec.exclusive:
        # the last element in scan order is not needed: it only feeds the next carry
        body = [
            take(v, 1, None, None, ax) if spec.reverse else take(v, 0, m - 1, None, ax)
            for v in local
        ]
    else:
        body = local
    if carry is not None and body[0].shape[ax] > 0:
        body = spec.ops.combine([expand(c, tuple(v.shape)) for c, v in zip(carry, body)], body)
    if spec.exclusive:
        first = carry if carry is not None else start
        assert first is not None
        parts = [(b, f) if spec.reverse else (f, b) for b, f in zip(body, first)]
        body = [
            concat([np.asarray(p, dtype=dt) for p in pair], ax)
            for pair, dt in zip(parts, spec.dtypes)
        ]
    out = []
    for v, dt in zip(body, spec.dtypes):
        v = np.asarray(v)
        out.append(v.astype(dt, copy=not v.flags.writeable))
    return out
