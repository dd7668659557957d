"""Scan for any vectorized combine function, with NumPy or torch arrays.

Inside a block: the recursive odd/even scheme of Blelloch (as in
``jax.lax.associative_scan``): combine neighbouring pairs, scan the
half-length result recursively, then fill in the even positions; ``O(n)``
work in ``O(log n)`` calls of ``fn``, each on a whole batch.

Across blocks: the three phases again, sequentially.  Each block of about
``BLOCK_BYTES`` per leaf is scanned on its own and then fixed up with the
carry of the blocks before it (one more call of ``fn``), so that the many
temporaries NumPy makes for an unfused ``fn`` live in cache rather than main
memory.  Measured on the 2-core development machine, linear recurrence in
float32 at N = 2^24: 137 ms unblocked, 246 / 117 / 83 ms with blocks of
2^14 / 2^16 / 2^18 elements (jax.lax.associative_scan, jitted: 150 ms).

Only slicing, concatenation and ``fn`` itself touch the data, so torch
autograd differentiates through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..._memory import settle_allocator
from ._arrays import broadcast_to, concat, expand, flip, interleave, is_torch, take
from ._plan import ScanPlan

Leaves = list[Any]

#: Below this length, combine sequentially (fewer, larger calls do not pay).
SEQUENTIAL_BELOW = 4

#: Bytes per leaf in one cache block; 1 MiB (2^18 float32) measured best of
#: 64 KiB .. 1 MiB for the linear recurrence at N = 2^24 (see module notes).
BLOCK_BYTES = 1 << 20


def scan(plan: ScanPlan) -> Leaves:
    """Scan the plan's leaves along its axis; see ``_reference.scan`` for the semantics."""
    combine, leaves, axis = plan.combine, plan.leaves, plan.axis
    reverse, exclusive = plan.reverse, plan.exclusive
    identity = plan.identity_leaves() if exclusive else None
    xs = [flip(x, axis) for x in leaves] if reverse else list(leaves)
    out = _blocked(combine, xs, axis)
    if exclusive:
        assert identity is not None
        n = out[0].shape[axis]
        out = [
            concat([broadcast_to(e, _one(x.shape, axis), x), take(x, 0, n - 1, None, axis)], axis)
            for e, x in zip(identity, out)
        ]
    return [flip(x, axis) for x in out] if reverse else out


def _one(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return shape[:axis] + (1,) + shape[axis + 1 :]


def _blocked(combine: Callable[[Leaves, Leaves], Leaves], xs: Leaves, axis: int) -> Leaves:
    n = xs[0].shape[axis]
    per_step = sum(x.element_size() if is_torch(x) else x.itemsize for x in xs)
    per_step *= max(1, _numel(xs[0]) // max(n, 1))
    block = max(SEQUENTIAL_BELOW, BLOCK_BYTES * len(xs) // max(per_step, 1))
    if n <= block or getattr(xs[0], "is_cuda", False):
        # (on a GPU there is no cache to block for, and each block would cost
        # dozens of kernel launches)
        return _inclusive(combine, xs, axis)
    settle_allocator()
    # NumPy: write blocks into one output, so block temporaries reuse memory
    # (collecting blocks and concatenating cost 50% more here).  torch: keep
    # the blocks and concatenate, which autograd can follow.
    parts: list[Leaves] = [[] for _ in xs]
    outs: Leaves | None = None
    carry: Leaves | None = None
    for s in range(0, n, block):
        local = _inclusive(combine, [take(x, s, s + block, None, axis) for x in xs], axis)
        if carry is not None:
            local = combine([expand(c, tuple(v.shape)) for c, v in zip(carry, local)], local)
        m = local[0].shape[axis]
        carry = [take(v, m - 1, m, None, axis) for v in local]
        if is_torch(local[0]):
            for p, v in zip(parts, local):
                p.append(v)
            continue
        if outs is None:
            outs = [np.empty(_with_len(v.shape, axis, n), v.dtype) for v in local]
        for o, v in zip(outs, local):
            o[(slice(None),) * axis + (slice(s, s + m),)] = v
    return outs if outs is not None else [concat(p, axis) for p in parts]


def _with_len(shape: tuple[int, ...], axis: int, n: int) -> tuple[int, ...]:
    return shape[:axis] + (n,) + shape[axis + 1 :]


def _numel(x: Any) -> int:
    n = 1
    for d in x.shape:
        n *= int(d)
    return n


def _inclusive(combine: Callable[[Leaves, Leaves], Leaves], xs: Leaves, axis: int) -> Leaves:
    n = xs[0].shape[axis]
    if n < SEQUENTIAL_BELOW:
        acc = [take(x, 0, 1, None, axis) for x in xs]
        parts = [[a] for a in acc]
        for i in range(1, n):
            acc = combine(acc, [take(x, i, i + 1, None, axis) for x in xs])
            for p, a in zip(parts, acc):
                p.append(a)
        return [concat(p, axis) if len(p) > 1 else p[0] for p in parts]
    # pairs (x0 . x1), (x2 . x3), ...: their scan gives the odd positions
    reduced = combine(
        [take(x, 0, n - 1, 2, axis) for x in xs], [take(x, 1, n, 2, axis) for x in xs]
    )
    odd = _inclusive(combine, reduced, axis)
    # even positions 2, 4, ...: the prefix ending just before, then x itself
    n_odd = odd[0].shape[axis]
    prev = odd if n % 2 else [take(o, 0, n_odd - 1, None, axis) for o in odd]
    even_tail = combine(prev, [take(x, 2, None, 2, axis) for x in xs])
    even = [concat([take(x, 0, 1, None, axis), t], axis) for x, t in zip(xs, even_tail)]
    return [interleave(e, o, axis) for e, o in zip(even, odd)]
