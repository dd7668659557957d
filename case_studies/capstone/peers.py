"""The strongest fair peers the capstone and the benchmarks compare with, written in torch.

Each is written here from its published definition, so that no peer library
becomes a dependency:

* :func:`selective_scan_ref` - mamba_ssm's reference selective scan
  (``mamba_ssm.ops.selective_scan_interface.selective_scan_ref``), what CPU
  users of mamba_ssm run today: layout (batch, dim, L), ``exp(delta A)`` and
  ``delta B u`` formed for all tokens by ``einsum``, then a loop over tokens.
* :func:`hf_mixer_scan` - the scan of the Hugging Face ``MambaMixer``'s CPU
  path (``slow_forward``): the same discretization formed for all tokens,
  then a loop that reads out each token with a matrix product.

Both take mamba_ssm's arguments with time-varying ``B`` and ``C`` of shape
(batch, d_state, L), as the capstone's workload has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor


def _prepare(u: Any, delta: Any, delta_bias: Any, delta_softplus: bool) -> tuple[Any, Any]:
    import torch
    import torch.nn.functional as F

    # mamba_ssm computes in float32 (half precision is upcast); float64 inputs
    # stay float64 here, so that the tests can hold the peers to 1e-12
    dt = torch.promote_types(u.dtype, torch.float32)
    u, delta = u.to(dt), delta.to(dt)
    if delta_bias is not None:
        delta = delta + delta_bias[..., None].to(dt)
    if delta_softplus:
        delta = F.softplus(delta)
    return u, delta


def _finish(y: Any, u: Any, D: Any, z: Any, dtype: Any) -> Any:
    import torch.nn.functional as F

    out = y if D is None else y + u * D[:, None]
    if z is not None:
        out = out * F.silu(z)
    return out.to(dtype)


def _mamba_peer(loop: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """A peer with mamba_ssm's arguments around ``loop(u, delta, A, B, C)`` (the scan proper):
    the bias, the softplus, the float32 compute, ``D``, the gate ``z`` and the result's dtype."""

    def peer(
        u: Tensor,
        delta: Tensor,
        A: Tensor,
        B: Tensor,
        C: Tensor,
        D: Tensor | None = None,
        z: Tensor | None = None,
        delta_bias: Tensor | None = None,
        delta_softplus: bool = False,
    ) -> Tensor:
        dtype = u.dtype
        u, delta = _prepare(u, delta, delta_bias, delta_softplus)
        return _finish(loop(u, delta, A, B, C), u, D, z, dtype)

    peer.__name__ = peer.__qualname__ = loop.__name__
    peer.__doc__ = loop.__doc__
    return peer


@_mamba_peer
def selective_scan_ref(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor) -> Tensor:
    """mamba_ssm's reference: ``h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t``, ``y_t = C_t h_t``.

    Takes ``(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False)``.
    ``u, delta, z``: (batch, dim, L); ``A``: (dim, N); ``B, C``: (batch, N, L);
    ``D``: (dim,).  Returns (batch, dim, L) in ``u``'s dtype.
    """
    import torch

    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    deltaB_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    h = A.new_zeros((u.shape[0], A.shape[0], A.shape[1]))
    ys = []
    for i in range(u.shape[2]):
        h = deltaA[:, :, i] * h + deltaB_u[:, :, i]
        ys.append(torch.einsum("bdn,bn->bd", h, C[:, :, i]))
    return torch.stack(ys, dim=2) if ys else u.new_zeros(u.shape)


@_mamba_peer
def hf_mixer_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor) -> Tensor:
    """The Hugging Face ``MambaMixer`` CPU scan: discretize every token, then loop with matmuls.

    Same arguments and result as :func:`selective_scan_ref`.
    """
    import torch

    discrete_A = torch.exp(A[None, :, None, :] * delta[:, :, :, None])  # (b, d, L, N)
    discrete_B = delta[:, :, :, None] * B[:, None, :, :].transpose(2, 3).to(u.dtype)  # (b,d,L,N)
    deltaB_u = discrete_B * u[:, :, :, None]
    h = torch.zeros(u.shape[0], A.shape[0], A.shape[1], dtype=u.dtype)
    ys = []
    Ct = C.transpose(1, 2).to(u.dtype)  # (b, L, N)
    for i in range(u.shape[2]):
        h = discrete_A[:, :, i, :] * h + deltaB_u[:, :, i, :]
        ys.append(torch.matmul(h, Ct[:, i, :].unsqueeze(-1))[:, :, 0])
    return torch.stack(ys, dim=-1) if ys else u.new_zeros(u.shape)


_loop: Any = None


def sequential_recurrence(a: Any, b: Any) -> Any:
    """``h_t = a_t h_{t-1} + b_t`` by a sequential loop, compiled by numba: the chapter's loop
    on one thread with no Python overhead (the baseline of the linear recurrence)."""
    global _loop
    if _loop is None:
        import numba
        import numpy as np

        @numba.njit(cache=True)
        def loop(a: Any, b: Any) -> Any:
            out = np.empty_like(b)
            h = b.dtype.type(0)
            for i in range(b.shape[0]):
                h = a[i] * h + b[i]
                out[i] = h
            return out

        _loop = loop
    return _loop(a, b)
