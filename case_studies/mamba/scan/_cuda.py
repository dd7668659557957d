"""The fused selective scan as a numba.cuda kernel (imported lazily).

One thread per (batch, channel, state): a block holds ``128 // d_state``
channels (one channel for ``d_state >= 128``), each with its ``d_state``
states in the registers of consecutive threads, and walks the sequence in
chunks of ``TOKENS`` tokens:

1. the block computes each (channel, token)'s ``dt`` (bias, softplus) and
   ``dt u`` once, into shared memory, reading along the tokens (coalesced);
2. every thread updates its state for the chunk's tokens and leaves
   ``h C`` in shared memory (B and C are read across the states: coalesced);
3. the block sums each (channel, token)'s ``d_state`` terms, adds the D
   skip, applies the z gate and writes the outputs along the tokens.

So the sequential depth is the sequence length, as in a thread-per-channel
walk, but with ``d_state`` times the threads, and no state in local memory.
In CI it runs on numba's CUDA simulator; on a GPU it takes torch CUDA
tensors directly (through ``__cuda_array_interface__``, no copies).
Training on CUDA tensors uses the differentiable parallel path.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np
from numba import cuda

#: Largest d_state the kernel's per-thread state array holds (mamba_ssm's limit).
MAX_STATE = 256

#: Threads per block (at least d_state).
THREADS = 128

#: Tokens per chunk: the shared buffers take 32 KB (48 KB is a block's static limit).
TOKENS = {"float32": 16, "float64": 8}


@cuda.jit(device=True)
def _pair(j, tok, first, span, pairs, D):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Batch, channel, token and block-local channel of a block's j-th (channel, token) pair.

    The batch is -1 past the sequence's end or the last channel.
    """
    jc = j // tok
    jt = j - jc * tok
    g = first + jc
    if jt >= span or g >= pairs:
        return -1, 0, jt, jc
    jb = g // D
    return jb, g - jb * D, jt, jc


@cache
def _kernel(dtype_name: str) -> Any:
    dtype = np.dtype(dtype_name)
    zero, one, twenty = dtype.type(0), dtype.type(1), dtype.type(20)
    tok = TOKENS[dtype_name]
    pairs = tok * THREADS  # (channel, token) pairs of a chunk: at most THREADS channels
    terms_size = tok * MAX_STATE  # (token, thread) terms: at most MAX_STATE threads

    @cuda.jit
    def fwd(u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z, scale_b, h0, out, last, starts):  # type: ignore[no-untyped-def]
        nb, D, L = u.shape
        N = A.shape[1]
        tid = cuda.threadIdx.x
        per = cuda.blockDim.x // N  # channels in this block
        first = cuda.blockIdx.x * per
        cl = tid // N
        n = tid - cl * N
        c = first + cl  # this thread's (batch, channel), flattened
        mine = cl < per and c < nb * D
        b = c // D
        d = c - b * D
        dts = cuda.shared.array(pairs, dtype)
        dus = cuda.shared.array(pairs, dtype)
        terms = cuda.shared.array(terms_size, dtype)
        h = zero
        a_dn = zero
        if mine:
            h = h0[b, d, n]
            a_dn = A[d, n]
        bb = b if Bg.shape[0] > 1 else 0
        gb = d // (D // Bg.shape[1])
        bc = b if Cg.shape[0] > 1 else 0
        gc = d // (D // Cg.shape[1])
        packed = starts.shape[0] > 0
        for t0 in range(0, L, tok):
            span = min(tok, L - t0)
            # 1. dt and dt * u of the block's (channel, token) pairs, tokens fastest
            for j in range(tid, per * tok, cuda.blockDim.x):
                jb, jd, jt, jc = _pair(j, tok, first, span, nb * D, D)
                if jb >= 0:
                    dt = delta[jb, jd, t0 + jt] + bias[jd]
                    if softplus and dt <= twenty:
                        dt = math.log1p(math.exp(dt))
                    ut = u[jb, jd, t0 + jt]
                    dts[j] = dt
                    dus[j] = dt * ut if scale_b else ut
            cuda.syncthreads()
            # 2. each state through the chunk's tokens
            if mine:
                for jt in range(span):
                    t = t0 + jt
                    if packed and starts[b, t]:  # a packed sequence starts: from zero
                        h = zero
                    tb = t if Bg.shape[2] > 1 else 0
                    tc = t if Cg.shape[2] > 1 else 0
                    k = cl * tok + jt
                    h = math.exp(dts[k] * a_dn) * h + dus[k] * Bg[bb, gb, tb, n]
                    terms[jt * cuda.blockDim.x + tid] = h * Cg[bc, gc, tc, n]
            cuda.syncthreads()
            # 3. the outputs: the sum over the states, D skip and z gate
            for j in range(tid, per * tok, cuda.blockDim.x):
                jb, jd, jt, jc = _pair(j, tok, first, span, nb * D, D)
                if jb >= 0:
                    y = zero
                    row = jt * cuda.blockDim.x + jc * N
                    for m in range(N):
                        y += terms[row + m]
                    ut = u[jb, jd, t0 + jt]
                    o = y + Dv[jd] * ut
                    if has_z:
                        zt = z[jb, jd, t0 + jt]
                        o = o * zt / (one + math.exp(-zt))
                    out[jb, jd, t0 + jt] = o
            cuda.syncthreads()
        if mine:
            last[b, d, n] = h

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
    N = A.shape[1]
    per = max(1, THREADS // N)  # channels per block, each with N threads
    blocks = -(-pairs // per)
    if starts is None:
        starts = cuda.to_device(np.zeros((0, 0), np.uint8))
    _kernel(dtype)[blocks, per * N](u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z,
                                    scale_b, h0, out, last, starts)  # fmt: skip


def scan_torch(u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any,
               softplus: bool, initial_state: Any, scale_b: bool,
               starts: Any = None) -> tuple[Any, Any]:  # fmt: skip
    """Forward on torch CUDA tensors; returns (out in the compute dtype, last state)."""
    import torch

    from .._checks import complex_cuda_error

    err = complex_cuda_error(dict(A=A, B=B, C=C, initial_state=initial_state))
    if err is not None:  # the kernel is real only
        raise err

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
