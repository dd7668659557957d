"""``reset=`` of ``associative_scan``: validation, and the (flag, value) elements it scans.

The scan itself is an ordinary scan of :func:`.segmented.segmented` over the
flags prepended to the leaves; see that module for the law and the design.
Here the user's ``reset`` (segment starts in index order) becomes the flags
in *scan* order: for ``reverse=True`` a segment is visited from its end, so
element ``i`` opens a segment exactly when ``i + 1`` starts one in index
order (or ``i`` is the last element).  ``exclusive=True`` is an inclusive
segmented scan of shifted elements: at each segment start the identity,
elsewhere the element before in scan order, so that the result is the
identity at each start and the segment's prefix before ``i`` elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ... import _kinds
from ..monoid import Combine, Monoid
from ..segmented import _ArrayCombine, _SegmentedCallable, segmented
from ._arrays import concat, filled_like, host, own, take, where
from ._identity import of_monoid

Leaves = list[Any]


def wrap(fn: Combine, combine: Any) -> tuple[Any, Any]:
    """The segmented combine over ``(flag, element)`` pairs, and its lifting to leaf lists."""
    if isinstance(fn, Monoid):
        seg = segmented(fn)
        return seg, seg.combine_leaves
    return _SegmentedCallable(fn), _ArrayCombine(combine)


def enter(
    leaves: Leaves,
    *,
    fn: Combine,
    reset: Any,
    kind: str,
    axis: int,
    reverse: bool,
    exclusive: bool,
    identity: Leaves | None,
) -> tuple[Leaves, Callable[[Leaves], Leaves]]:
    """``[flags] + leaves`` for an inclusive scan of :func:`wrap`'s combine, and its undo.

    The undo turns the scan's outputs into the result.  An exclusive scan is
    the inclusive one shifted by one in scan order, with the identity (``identity``, or
    the monoid's own) at each start: shifting the outputs, not the inputs, never
    combines the identity with an element (``e . x == x`` fails in IEEE arithmetic for
    an inf or a NaN in ``x``).
    """
    shape = tuple(int(d) for d in leaves[0].shape)
    n = shape[axis]
    r = _checked(reset, shape, axis, kind)
    if n > 0:
        r = _scan_order(r, axis, reverse, kind)
    if exclusive and identity is None:
        identity = of_monoid(fn, leaves, axis)  # type: ignore[arg-type]
    start = identity

    def undo(out: Leaves) -> Leaves:
        out = out[1:]  # the flags
        if not (exclusive and n > 0 and start is not None):
            return out
        return [_shifted(x, e, r, axis, reverse, kind) for x, e in zip(out, start)]

    if isinstance(fn, Monoid):
        return [filled_like(r, leaves[0], kind)] + list(leaves), undo
    return [own(r, kind)] + list(leaves), undo


def _checked(reset: Any, shape: tuple[int, ...], axis: int, kind: str) -> Any:
    """``reset`` as an array of ``ndim == len(shape)`` (bool), still in its own library."""
    if _kinds.array_kind(reset) is None:
        reset = np.asarray(reset)
    dtype = str(reset.dtype)
    if dtype not in ("bool", "torch.bool"):
        raise TypeError(
            f"reset has dtype {dtype}; it must be bool, True where a segment starts "
            "(e.g. reset=seq_idx[1:] != seq_idx[:-1] padded with True, or x.astype(bool))"
        )
    rs = tuple(int(d) for d in reset.shape)
    n, nd = shape[axis], len(shape)
    if rs == (n,) and nd > 1:
        reset = reset.reshape((1,) * axis + (n,) + (1,) * (nd - axis - 1))
    elif not (len(rs) == nd and rs[axis] == n and all(a in (1, b) for a, b in zip(rs, shape))):
        raise ValueError(
            f"reset has shape {rs}; expected ({n},) (along axis {axis}) or a shape that "
            f"broadcasts to the elements' {shape} with length {n} on axis {axis}"
        )
    return reset


def _scan_order(r: Any, axis: int, reverse: bool, kind: str) -> Any:
    """Segment starts in scan order: for ``reverse``, ``i`` opens one if ``i + 1`` starts one."""
    r = own(r, kind)
    if not reverse:
        return r
    last = take(r, 0, 1, None, axis) | True
    return concat([take(r, 1, None, None, axis), last], axis)


def _shifted(x: Any, e: Any, r: Any, axis: int, reverse: bool, kind: str) -> Any:
    """The element before in scan order, and the identity ``e`` at each segment start."""
    n = x.shape[axis]
    if kind == _kinds.CUDA:  # numba device arrays: one small kernel, no host copy of x
        from . import _cuda

        shape = tuple(int(d) for d in x.shape)
        one = shape[:axis] + (1,) + shape[axis + 1 :]
        starts = np.broadcast_to(host(r), shape)
        return _cuda.shift(x, starts, np.broadcast_to(host(e), one), axis, reverse)
    e = own(e, kind, x) if kind != _kinds.NUMPY else np.asarray(e)
    if reverse:
        prev = concat([take(x, 1, None, None, axis), e], axis)
    else:
        prev = concat([e, take(x, 0, n - 1, None, axis)], axis)
    out = where(own(r, kind, x), e, prev)
    return out.rechunk(x.chunks) if kind == _kinds.DASK else out  # the caller's chunks
