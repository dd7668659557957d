"""The oracle: a sequential left fold, one element at a time.

Slow and obviously correct; every fast path is tested against it (in float64).
"""

from __future__ import annotations

from typing import Any

from ._arrays import concat, take
from ._plan import ScanPlan

Leaves = list[Any]


def scan(plan: ScanPlan) -> Leaves:
    """Scan the plan's leaves along its axis by folding ``combine`` over the elements.

    Forward: ``out[i] = e[0] . e[1] . ... . e[i]``.  Reverse, as in
    ``jax.lax.associative_scan``: ``out[i] = e[n-1] . ... . e[i]``, i.e. the
    accumulated suffix is always the left operand.  Exclusive results omit
    ``e[i]`` and start from ``identity``.
    """
    combine, leaves, axis = plan.combine, plan.leaves, plan.axis
    reverse, exclusive = plan.reverse, plan.exclusive
    identity = plan.identity_leaves() if exclusive else None
    n = leaves[0].shape[axis]
    order = range(n - 1, -1, -1) if reverse else range(n)
    pieces: list[Leaves] = [[None] * n for _ in leaves]
    acc: Leaves | None = None
    for i in order:
        elem = [take(x, i, i + 1, None, axis) for x in leaves]
        if exclusive:
            assert identity is not None
            cur = identity if acc is None else acc
            for j, v in enumerate(cur):
                pieces[j][i] = v
            acc = elem if acc is None else combine(acc, elem)
        else:
            acc = elem if acc is None else combine(acc, elem)
            for j, v in enumerate(acc):
                pieces[j][i] = v
    return [concat(p, axis) for p in pieces]
