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
from ._arrays import take

Leaves = list[Any]


def prepare(
    fn: Combine,
    combine: Any,
    leaves: Leaves,
    reset: Any,
    kind: str,
    axis: int,
    reverse: bool,
    exclusive: bool,
    identity: Leaves | None,
) -> tuple[Any, Any, Leaves, Callable[[Leaves], Leaves]]:
    """The segmented combine, its lifting to leaf lists, ``[flags] + leaves``, and a finish.

    The first three replace ``fn``, ``combine`` and the leaves in an inclusive
    scan; ``finish`` turns its outputs into the result.  An exclusive scan is
    the inclusive one shifted by one in scan order, with the identity at each
    start: shifting the outputs, not the inputs, never combines the identity
    with an element (``e . x == x`` fails in IEEE arithmetic for an inf or a
    NaN in ``x``).
    """
    shape = tuple(int(d) for d in leaves[0].shape)
    n = shape[axis]
    r = _checked(reset, shape, axis, kind)
    lib = _Lib(kind)
    if n > 0:
        r = _scan_order(r, axis, reverse, lib)

    def finish(out: Leaves) -> Leaves:
        out = out[1:]  # the flags
        if exclusive and n > 0:
            assert identity is not None
            out = [_shifted(x, e, r, axis, reverse, lib) for x, e in zip(out, identity)]
        return out

    if isinstance(fn, Monoid):
        seg = segmented(fn)
        return seg, seg.combine_leaves, [lib.flags_like(r, leaves[0])] + list(leaves), finish
    return _SegmentedCallable(fn), _ArrayCombine(combine), [lib.bools(r)] + list(leaves), finish


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


class _Lib:
    """The few array operations needed here, in the elements' library."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def own(self, r: Any, like: Any = None) -> Any:
        """``r`` converted to the elements' library (host NumPy for CUDA device arrays)."""
        rk = _kinds.array_kind(r)
        if self.kind == _kinds.DASK:
            import dask.array as da

            return r if rk == _kinds.DASK else da.asarray(_host(r))
        if self.kind in (_kinds.TORCH, _kinds.TORCH_CUDA):
            import torch

            dev = like.device if like is not None else None
            t = r if rk in (_kinds.TORCH, _kinds.TORCH_CUDA) else torch.as_tensor(_host(r))
            return t if dev is None else t.to(dev)
        return _host(r)

    def concat(self, xs: list[Any], axis: int) -> Any:
        if self.kind == _kinds.DASK:
            import dask.array as da

            return da.concatenate(xs, axis=axis)
        if self.kind in (_kinds.TORCH, _kinds.TORCH_CUDA):
            import torch

            return torch.cat(xs, dim=axis)
        return np.concatenate(xs, axis=axis)

    def where(self, m: Any, a: Any, b: Any) -> Any:
        if self.kind == _kinds.DASK:
            import dask.array as da

            return da.where(m, a, b)
        if self.kind in (_kinds.TORCH, _kinds.TORCH_CUDA):
            import torch

            return torch.where(m, a, b)
        return np.where(m, a, b)

    def bools(self, r: Any) -> Any:
        return self.own(r)

    def flags_like(self, r: Any, like: Any) -> Any:
        """The flags as a contiguous array of ``like``'s shape and dtype (for the kernels)."""
        shape = tuple(like.shape)
        if self.kind == _kinds.DASK:
            import dask.array as da

            return da.broadcast_to(self.own(r), shape).astype(like.dtype).rechunk(like.chunks)
        if self.kind in (_kinds.TORCH, _kinds.TORCH_CUDA):
            return self.own(r, like).to(like.dtype).expand(shape).contiguous()
        host = np.broadcast_to(_host(r), shape).astype(_np_dtype(like.dtype))
        if self.kind == _kinds.CUDA:
            from numba import cuda

            return cuda.to_device(host)
        return host


def _np_dtype(dtype: Any) -> np.dtype:
    return np.dtype(dtype)


def _host(r: Any) -> np.ndarray:
    k = _kinds.array_kind(r)
    if k in (_kinds.TORCH, _kinds.TORCH_CUDA):
        return np.asarray(r.detach().cpu().numpy())
    if k == _kinds.CUDA:
        return np.asarray(r.copy_to_host())
    if k == _kinds.DASK:
        return np.asarray(r.compute())
    return np.asarray(r)


def _scan_order(r: Any, axis: int, reverse: bool, lib: _Lib) -> Any:
    """Segment starts in scan order: for ``reverse``, ``i`` opens one if ``i + 1`` starts one."""
    r = lib.own(r)
    if not reverse:
        return r
    last = take(r, 0, 1, None, axis) | True
    return lib.concat([take(r, 1, None, None, axis), last], axis)


def _shifted(x: Any, e: Any, r: Any, axis: int, reverse: bool, lib: _Lib) -> Any:
    """The element before in scan order, and the identity ``e`` at each segment start."""
    n = x.shape[axis]
    if lib.kind == _kinds.CUDA:  # numba device arrays: one small kernel, no host copy of x
        from . import _cuda

        shape = tuple(int(d) for d in x.shape)
        one = shape[:axis] + (1,) + shape[axis + 1 :]
        starts = np.broadcast_to(_host(r), shape)
        return _cuda.shift(x, starts, np.broadcast_to(_host(e), one), axis, reverse)
    e = lib.own(e, x) if lib.kind != _kinds.NUMPY else np.asarray(e)
    if reverse:
        prev = lib.concat([take(x, 1, None, None, axis), e], axis)
    else:
        prev = lib.concat([e, take(x, 0, n - 1, None, axis)], axis)
    out = lib.where(lib.own(r, x), e, prev)
    return out.rechunk(x.chunks) if lib.kind == _kinds.DASK else out  # the caller's chunks
