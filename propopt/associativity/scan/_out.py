"""``out=`` of ``associative_scan``: where the result is written, as ``np.cumsum(out=)``.

The CPU kernels write straight into C-contiguous NumPy arrays and CPU
tensors (:func:`direct`); every other path computes the result and copies
it in (:func:`write`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import _kinds, _pytree

Leaves = list[Any]


def check(out: Any, treedef: _pytree.TreeDef, leaves: Leaves, kind: str,
               paths: Sequence[str]) -> Leaves:  # fmt: skip
    """The leaves of ``out=``, each checked against the result leaf it receives."""
    if kind == _kinds.DASK:
        raise ValueError(
            "out= cannot receive a scan of dask arrays, which are lazy: use the returned "
            "array (or da.store it)"
        )
    for src, path in zip(leaves, paths):
        if getattr(src, "requires_grad", False) and _grad_enabled():
            raise ValueError(
                f"out= cannot carry a gradient and {path} requires grad: drop out= to keep the "
                f"gradient, or pass {path}.detach() (as torch.cumsum(out=) refuses)"
            )
    outs, out_def = _pytree.flatten(out, "out")
    if out_def != treedef:
        raise ValueError(
            f"out= is {out_def.describe()} but elems is {treedef.describe()}: pass arrays "
            "in the structure of elems"
        )
    for dst, src, path in zip(outs, leaves, paths):
        name = "out" + path[len("elems") :]
        if _kinds.array_kind(dst) != kind or _kinds.device_of(dst) != _kinds.device_of(src):
            raise TypeError(
                f"{name} is {_kinds.describe(dst)} but {path} is {_kinds.describe(src)}; "
                "out= takes arrays of the type and device of elems"
            )
        if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
            raise ValueError(
                f"{name} has shape {tuple(dst.shape)} and dtype {dst.dtype} but the result "
                f"has shape {tuple(src.shape)} and dtype {src.dtype}; allocate it with "
                f"np.empty_like({path}) or torch.empty_like({path})"
            )
        if isinstance(dst, np.ndarray) and not dst.flags.writeable:
            raise ValueError(f"{name} is read-only; pass a writable array")
        if getattr(dst, "requires_grad", False):
            raise ValueError(f"{name} requires grad; out= takes tensors outside autograd")
    return outs


def _grad_enabled() -> bool:
    """Whether torch records gradients now (``torch.no_grad()`` turns it off)."""
    import torch

    return bool(torch.is_grad_enabled())


def direct(outs: Leaves, leaves: Leaves) -> Leaves | None:
    """NumPy views of ``outs`` the CPU kernels can write into, or None (copy in after)."""
    views = [_kinds.to_numpy_view(o) for o in outs]
    if not all(v.flags.c_contiguous for v in views):
        return None
    ins = [_kinds.to_numpy_view(x) for x in leaves]
    if any(np.may_share_memory(v, x) for v in views for x in ins):
        return None  # in place: the three phases read an element after writing its block
    return views


def _copy_into(dst: Any, src: Any) -> None:
    if isinstance(dst, np.ndarray):
        np.copyto(dst, src)
    elif _kinds.array_kind(dst) in (_kinds.TORCH, _kinds.TORCH_CUDA):
        import torch

        with torch.no_grad():
            dst.copy_(src)
    elif hasattr(dst, "copy_to_device"):  # numba device array
        dst.copy_to_device(src)
    else:  # CuPy and other __cuda_array_interface__ arrays
        dst[...] = src


def write(outs: Leaves, result: Leaves) -> Leaves:
    """``outs`` holding ``result`` (a leaf the kernels wrote in place is left as it is)."""
    for dst, src in zip(outs, result):
        if dst is not src:
            _copy_into(dst, src)
    return outs
