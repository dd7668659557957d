"""The fused selective scan as a numba.cuda kernel (imported lazily).

One thread per (batch, channel) walks the sequence with its state in
registers / local memory (``d_state <= MAX_STATE``), doing the discretize,
state update, C-projection, D skip and z gate of :mod:`._cpu` per token.
Adjacent threads are adjacent channels, so the per-token loads of B and C
(shared by a group's channels) are broadcasts.  In CI it runs on numba's
CUDA simulator; on a GPU it takes torch CUDA tensors directly (through
``__cuda_array_interface__``, no copies).  Training on CUDA tensors uses the
differentiable parallel path.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np
from numba import cuda

#: Largest d_state the kernel's per-thread state array holds (mamba_ssm's limit).
MAX_STATE = 256

#: Threads per block.
THREADS = 128


@cache
def _kernel(dtype_name: str) -> Any:
    dtype = np.dtype(dtype_name)
    zero, one, twenty = dtype.type(0), dtype.type(1), dtype.type(20)

    @cuda.jit
    def fwd(u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z, scale_b, h0, out, last, starts):  # type: ignore[no-untyped-def]
        i = cuda.grid(1)
        nb, D, L = u.shape
        if i >= nb * D:
            return
        b = i // D
        d = i - b * D
        N = A.shape[1]
        h = cuda.local.array(MAX_STATE, dtype)
        for n in range(N):
            h[n] = h0[b, d, n]
        bb = b if Bg.shape[0] > 1 else 0
        gb = d // (D // Bg.shape[1])
        bc = b if Cg.shape[0] > 1 else 0
        gc = d // (D // Cg.shape[1])
        packed = starts.shape[0] > 0
        for t in range(L):
            if packed and starts[b, t]:  # a packed sequence starts: from zero
                for n in range(N):
                    h[n] = zero
            dt = delta[b, d, t] + bias[d]
            if softplus and dt <= twenty:
                dt = math.log1p(math.exp(dt))
            ut = u[b, d, t]
            du = dt * ut if scale_b else ut
            tb = t if Bg.shape[2] > 1 else 0
            tc = t if Cg.shape[2] > 1 else 0
            y = zero
            for n in range(N):
                hn = math.exp(dt * A[d, n]) * h[n] + du * Bg[bb, gb, tb, n]
                h[n] = hn
                y += hn * Cg[bc, gc, tc, n]
            o = y + Dv[d] * ut
            if has_z:
                zt = z[b, d, t]
                o = o * zt / (one + math.exp(-zt))
            out[b, d, t] = o
        for n in range(N):
            last[b, d, n] = h[n]

    return fwd


def launch(u: Any, delta: Any, A: Any, Bg: Any, Cg: Any, Dv: Any, z: Any, bias: Any,
           softplus: bool, has_z: bool, scale_b: bool, h0: Any, out: Any, last: Any,
           dtype: str, starts: Any = None) -> None:  # fmt: skip
    """Run the kernel on CUDA arrays (or numpy arrays in the simulator).

    ``starts``: uint8 (batch, L), nonzero where a packed sequence starts.
    """
    if A.shape[1] > MAX_STATE:
        raise ValueError(f"d_state={A.shape[1]}: the CUDA kernel holds at most {MAX_STATE}")
    pairs = u.shape[0] * u.shape[1]
    if pairs == 0:
        return
    blocks = -(-pairs // THREADS)
    if starts is None:
        starts = cuda.to_device(np.zeros((0, 0), np.uint8))
    _kernel(dtype)[blocks, THREADS](u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z,
                                    scale_b, h0, out, last, starts)  # fmt: skip


def scan_torch(u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any,
               softplus: bool, initial_state: Any, scale_b: bool,
               starts: Any = None) -> tuple[Any, Any]:  # fmt: skip
    """Forward on torch CUDA tensors; returns (out in the compute dtype, last state)."""
    import torch

    cdt = torch.float64 if u.dtype == torch.float64 else torch.float32
    batch, dim, L = u.shape
    N = A.shape[1]

    def c(x: Any) -> Any:
        return x.detach().to(cdt).contiguous()

    def tm(M: Any) -> Any:
        if M.ndim == 2:
            return c(M[None, :, None, :])
        if M.ndim == 3:
            return c(M.transpose(1, 2)[:, None])
        return c(M.transpose(2, 3))

    zeros_d = torch.zeros(dim, dtype=cdt, device=u.device)
    args = [c(u), c(delta), c(A), tm(B), tm(C), zeros_d if D is None else c(D),
            torch.zeros((1, 1, 1), dtype=cdt, device=u.device) if z is None else c(z),
            zeros_d if delta_bias is None else c(delta_bias)]  # fmt: skip
    h0 = (torch.zeros((batch, dim, N), dtype=cdt, device=u.device)
          if initial_state is None else c(initial_state))  # fmt: skip
    out = torch.empty((batch, dim, L), dtype=cdt, device=u.device)
    last = torch.empty((batch, dim, N), dtype=cdt, device=u.device)
    ca = [cuda.as_cuda_array(x) for x in (*args, h0, out, last)]
    st = None
    if starts is not None and bool(starts.any()):
        st = cuda.as_cuda_array(starts.to(device=u.device, dtype=torch.uint8).contiguous())
    launch(*ca[:8], bool(softplus), z is not None, scale_b, *ca[8:],
           dtype="float64" if cdt == torch.float64 else "float32", starts=st)  # fmt: skip
    return out, last
