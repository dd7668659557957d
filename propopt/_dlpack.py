"""Arrays of other libraries through DLPack: jax and CuPy in, the same library out.

propopt's kernels take NumPy arrays, torch tensors, CUDA device arrays and
dask arrays.  A jax array on the CPU goes in as a NumPy view of its buffer
(``np.from_dlpack``: no copy, read-only), one on a GPU as a torch tensor
(``torch.from_dlpack``); a CuPy array as a torch CUDA tensor where torch is
installed (without torch, :func:`propopt._kinds.foreign_kind` leaves it to numba,
which reads its ``__cuda_array_interface__``, and the result is a numba
device array).
The results go back through DLPack to the caller's library and device
(``jax.dlpack.from_dlpack``, ``cupy.from_dlpack``), sharing the buffer where
the library takes it as it is: jax takes a host buffer without a copy when
it is 64-byte aligned (:func:`aligned_empty` allocates such).  Two
exceptions copy: NumPy has no DLPack code for ``bfloat16``, so a jax
``bfloat16`` array crosses by ``np.asarray`` and comes back by
``jnp.asarray``; and jax without ``jax_enable_x64`` turns 64-bit results
(``topk``'s int64 indices) into 32-bit ones, as ``jnp.asarray`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _kinds

Leaves = list[Any]

#: jax puts a host buffer in an array without a copy at this alignment
ALIGN = 64


def to_native(x: Any, kind: str) -> Any:
    """``x`` (of foreign ``kind``) as an array propopt's kernels take, without a copy."""
    if kind == _kinds.JAX:
        try:
            return np.from_dlpack(x)
        except (BufferError, RuntimeError, TypeError):  # bfloat16: no DLPack code in NumPy
            return np.asarray(x)
    import torch  # a jax array on a GPU, or a CuPy array

    return torch.from_dlpack(x)


def to_caller(y: Any, kind: str) -> Any:
    """A result ``y`` in the caller's library (``kind``), on the device it is on."""
    if kind in (_kinds.JAX, _kinds.JAX_CUDA):
        import jax

        try:
            return jax.dlpack.from_dlpack(y)  # shares y's buffer where jax takes it
        except (BufferError, RuntimeError, TypeError, ValueError):  # bfloat16
            return jax.numpy.asarray(y)
    import cupy

    return cupy.from_dlpack(y) if hasattr(y, "__dlpack__") else cupy.asarray(y)


def enter(leaves: Sequence[Any], *, kind: str) -> tuple[Leaves, Callable[[Leaves], Leaves]]:
    """The leaves as arrays the kernels take, and the undo that hands results back."""
    return [to_native(x, kind) for x in leaves], lambda out: [to_caller(y, kind) for y in out]


def refuse_out(kind: str, out: Any) -> None:
    """``out=`` has no meaning for jax arrays, which are immutable."""
    if out is not None and kind in (_kinds.JAX, _kinds.JAX_CUDA):
        raise ValueError(
            "out= cannot receive jax arrays, which are immutable; drop out= and use the "
            "returned arrays"
        )


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialized C-contiguous array whose buffer jax can take without a copy."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = np.empty(n + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + n].view(dt).reshape(shape)
