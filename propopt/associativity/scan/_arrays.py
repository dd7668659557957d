"""Array-library-neutral helpers (NumPy and torch) used by the generic paths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def is_torch(x: Any) -> bool:
    return type(x).__module__.split(".", 1)[0] == "torch"


def take(x: Any, start: int | None, stop: int | None, step: int | None, axis: int) -> Any:
    """``x[start:stop:step]`` along ``axis`` (a view where the library allows)."""
    return x[(slice(None),) * axis + (slice(start, stop, step),)]


def concat(xs: Sequence[Any], axis: int) -> Any:
    if is_torch(xs[0]):
        import torch

        return torch.cat(list(xs), dim=axis)
    return np.concatenate(xs, axis=axis)


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
