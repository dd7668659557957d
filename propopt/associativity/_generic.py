"""Scan for any vectorized combine function, with NumPy or torch arrays.

The recursive odd/even scheme of Blelloch (as in ``jax.lax.associative_scan``):
combine neighbouring pairs, scan the half-length result recursively, then
fill in the even positions.  ``O(N)`` calls' worth of work in ``O(log N)``
calls of ``fn``, each on a whole batch, so the cost is that of the array
library's kernels.  Only slicing, concatenation and ``fn`` itself touch the
data, so torch autograd differentiates through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._arrays import broadcast_to, concat, flip, interleave, take

Leaves = list[Any]

#: Below this length, combine sequentially (fewer, larger calls do not pay).
SEQUENTIAL_BELOW = 4


def scan(
    combine: Callable[[Leaves, Leaves], Leaves],
    leaves: Sequence[Any],
    axis: int,
    reverse: bool,
    exclusive: bool,
    identity: Leaves | None,
) -> Leaves:
    """Scan ``leaves`` along ``axis``; see ``_reference.scan`` for the semantics."""
    xs = [flip(x, axis) for x in leaves] if reverse else list(leaves)
    out = _inclusive(combine, xs, axis)
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
