"""Half precision (float16, bfloat16) for monoids: widen to float32, narrow once at the end.

A scan in half precision would round every partial combination to 8
(bfloat16) or 11 (float16) significant bits, so a running sum of ``n``
elements could lose up to ``n`` of those roundings.  As jax does for its
reductions (``jnp.sum``, ``jnp.mean``), the elements are widened to float32
at the boundary, the float32 kernels run (no half-precision kernels are
compiled), and the result is rounded to the input dtype once.  (jax's
cumulative reductions accumulate in the half type: ``jax.lax.cumprod`` of
4096 bfloat16 factors near 1 was off by 77% where this is off by 0.4%.)
The error is the float32 scan's error plus one rounding to the half type:
``|out - exact| <= u_half * |s| + |s - exact|`` with ``s`` the float32
result and ``u_half`` the unit roundoff, ``2**-8`` for bfloat16 and
``2**-11`` for float16.

NumPy's bfloat16 comes from ``ml_dtypes`` (the dtype jax uses); it is
recognised by name, so propopt does not import it.  torch tensors are cast
by torch (autograd follows), dask arrays lazily chunk by chunk, and CUDA
device arrays of float16 by a one-line numba.cuda kernel (numba has no
bfloat16 device arrays).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import _kinds
from ..._kinds import half_name

Leaves = list[Any]


def widen(leaves: Sequence[Any], kind: str, what: str) -> Leaves:
    """The leaves as float32 arrays of the same library and device (dask: lazily, per chunk)."""
    if kind in (_kinds.TORCH, _kinds.TORCH_CUDA):
        import torch

        return [x.to(torch.float32) for x in leaves]  # autograd follows the cast
    if kind == _kinds.CUDA:
        if half_name(leaves[0].dtype) != "float16":
            raise TypeError(
                f"{what} takes CUDA device arrays of float16 but not {leaves[0].dtype}; pass "
                "torch CUDA tensors of torch.bfloat16, or cast to float32 on the device"
            )
        from ._cuda import convert

        return [convert(x, np.float32) for x in leaves]
    return [x.astype(np.float32) for x in leaves]


def narrow(outs: Sequence[Any], like: Sequence[Any], kind: str) -> Leaves:
    """Round each float32 result once to the dtype of the matching input leaf."""
    if kind in (_kinds.TORCH, _kinds.TORCH_CUDA):
        return [o.to(x.dtype) for o, x in zip(outs, like)]
    if kind == _kinds.CUDA:
        from ._cuda import convert

        return [convert(o, x.dtype) for o, x in zip(outs, like)]
    return [o.astype(x.dtype) for o, x in zip(outs, like)]


def enter(leaves: Leaves, *, kind: str, what: str) -> tuple[Leaves, Any]:
    """The leaves widened to float32, and the undo that rounds the result to their dtypes."""
    given = list(leaves)
    return widen(given, kind, what), lambda out: narrow(out, given, kind)
