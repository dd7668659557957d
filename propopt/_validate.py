"""Argument checks shared by the verbs and the audits (a low module: it imports no verb)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .arrays import shown

Leaves = list[Any]


def axis_in_range(axis: Any, name: str, shape: tuple[int, ...]) -> int:
    """An int ``axis`` of an array ``name`` of ``shape`` as ``0 .. nd - 1``, or a one-line error."""
    nd = len(shape)
    if not -nd <= axis < nd:
        raise ValueError(
            f"axis={axis} is out of range for {name} with {nd} dimension(s) "
            f"(shape {shape}); use -{nd} <= axis < {nd}"
        )
    return int(axis) % nd


def check_axis(axis: Any, leaves: Leaves, paths: Sequence[str]) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int, got {shown(axis)}")
    nd = len(leaves[0].shape)
    if nd == 0:
        raise ValueError(f"{paths[0]} is 0-dimensional; a scan needs at least one axis")
    ax = axis_in_range(axis, paths[0], tuple(leaves[0].shape))
    n = leaves[0].shape[ax]
    for leaf, path in zip(leaves, paths):
        shape = tuple(leaf.shape)
        if len(shape) <= ax:
            raise ValueError(
                f"axis={axis} is out of range for {path} with shape {shape}; every leaf "
                f"needs an axis {ax}"
            )
        if shape[ax] != n:
            raise ValueError(
                f"leaves differ in length along axis {ax}: {paths[0]} has {n} "
                f"(shape {tuple(leaves[0].shape)}) but {path} has {shape[ax]} (shape "
                f"{shape}); every leaf must have the same length along the scanned axis"
            )
    return ax


def np_dtype(dtype: Any) -> np.dtype | None:
    """NumPy dtype for a NumPy or torch dtype (None if it has none)."""
    if isinstance(dtype, np.dtype):
        return dtype
    name = str(dtype).replace("torch.", "")
    try:
        return np.dtype(name)
    except TypeError:
        return None  # e.g. torch.bfloat16


def name_of(fn: Any, qualified: bool = False) -> str:
    """A function's name for messages and reports: a monoid's ``name``, else ``__name__``.

    ``qualified`` gives ``module:qualname`` (an import path, for the audit table).
    """
    name = getattr(fn, "name", None)
    if isinstance(name, str) and hasattr(fn, "arity"):  # a Monoid
        return name
    if qualified:
        mod = getattr(fn, "__module__", None)
        qual = str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn)))
        return f"{mod}:{qual}" if mod else qual
    return str(getattr(fn, "__name__", None) or type(fn).__name__)
