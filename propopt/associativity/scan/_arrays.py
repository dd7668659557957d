"""The one array namespace of the scan: the few operations its transforms and generic paths
need, in the library of the arrays they get (NumPy, torch, dask, CUDA device arrays)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import _kinds


def is_torch(x: Any) -> bool:
    return type(x).__module__.split(".", 1)[0] == "torch"


def _is_dask(x: Any) -> bool:
    return _kinds.array_kind(x) == _kinds.DASK


def take(x: Any, start: int | None, stop: int | None, step: int | None, axis: int) -> Any:
    """``x[start:stop:step]`` along ``axis`` (a view where the library allows)."""
    return x[(slice(None),) * axis + (slice(start, stop, step),)]


def concat(xs: Sequence[Any], axis: int) -> Any:
    if is_torch(xs[0]):
        import torch

        return torch.cat(list(xs), dim=axis)
    if _is_dask(xs[0]):
        import dask.array as da

        return da.concatenate(list(xs), axis=axis)
    return np.concatenate(xs, axis=axis)


def where(m: Any, a: Any, b: Any) -> Any:
    """``a`` where ``m``, else ``b``, in the library of ``a``."""
    if is_torch(a):
        import torch

        return torch.where(m, a, b)
    if _is_dask(a):
        import dask.array as da

        return da.where(m, a, b)
    return np.where(m, a, b)


def flip(x: Any, axis: int) -> Any:
    if is_torch(x):
        return x.flip(axis)
    return np.flip(x, axis)


def broadcast_to(x: Any, shape: tuple[int, ...], like: Any) -> Any:
    """Broadcast scalar or array ``x`` to ``shape`` in ``like``'s library and dtype."""
    if is_torch(like):
        import torch

        t = torch.as_tensor(x, dtype=like.dtype, device=like.device)
        return t.expand(shape)
    return np.broadcast_to(np.asarray(x, dtype=like.dtype), shape)


def expand(x: Any, shape: tuple[int, ...]) -> Any:
    """A broadcast view of ``x`` with ``shape`` (no copy)."""
    if is_torch(x):
        return x.expand(shape)
    return np.broadcast_to(x, shape)


def host(x: Any) -> np.ndarray:
    """``x`` as a host NumPy array (computed, for dask; copied off the GPU)."""
    k = _kinds.array_kind(x)
    if k in (_kinds.TORCH, _kinds.TORCH_CUDA):
        return np.asarray(x.detach().cpu().numpy())
    if k == _kinds.CUDA:
        return np.asarray(x.copy_to_host())
    if k == _kinds.DASK:
        return np.asarray(x.compute())
    return np.asarray(x)


def own(x: Any, kind: str, like: Any = None) -> Any:
    """``x`` in the library of arrays of ``kind`` (host NumPy for CUDA device arrays), on
    ``like``'s device where given."""
    xk = _kinds.array_kind(x)
    if kind == _kinds.DASK:
        import dask.array as da

        return x if xk == _kinds.DASK else da.asarray(host(x))
    if kind in (_kinds.TORCH, _kinds.TORCH_CUDA):
        import torch

        t = x if xk in (_kinds.TORCH, _kinds.TORCH_CUDA) else torch.as_tensor(host(x))
        return t if like is None else t.to(like.device)
    return host(x)


def filled_like(x: Any, like: Any, kind: str) -> Any:
    """``x`` broadcast to ``like``'s shape, cast to its dtype, contiguous (for the kernels)."""
    shape = tuple(like.shape)
    if kind == _kinds.DASK:
        import dask.array as da

        return da.broadcast_to(own(x, kind), shape).astype(like.dtype).rechunk(like.chunks)
    if kind in (_kinds.TORCH, _kinds.TORCH_CUDA):
        return own(x, kind, like).to(like.dtype).expand(shape).contiguous()
    out = np.broadcast_to(host(x), shape).astype(np.dtype(like.dtype))
    if kind == _kinds.CUDA:
        from numba import cuda

        return cuda.to_device(out)
    return out


def interleave(even: Any, odd: Any, axis: int) -> Any:
    """Merge ``even`` (positions 0, 2, ...) and ``odd`` (1, 3, ...) along ``axis``."""
    n_even, n_odd = even.shape[axis], odd.shape[axis]
    shape = list(even.shape)
    shape[axis] = n_even + n_odd
    if is_torch(even):
        import torch

        head = take(even, 0, n_odd, None, axis)
        pairs = torch.stack([head, odd], dim=axis + 1)
        merged = pairs.reshape(shape[:axis] + [2 * n_odd] + shape[axis + 1 :])
        if n_even > n_odd:
            merged = torch.cat([merged, take(even, n_odd, None, None, axis)], dim=axis)
        return merged
    dtype = np.result_type(even, odd)
    out = np.empty(shape, dtype)
    out[(slice(None),) * axis + (slice(0, None, 2),)] = even
    out[(slice(None),) * axis + (slice(1, None, 2),)] = odd
    return out
