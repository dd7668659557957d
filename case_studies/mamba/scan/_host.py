"""Host-side driving of the CPU kernels: layouts, buffers, gradient reduction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from propopt import threads
from propopt.arrays import mapped_empty

from . import _cpu


@dataclass
class Prepared:
    """Kernel-ready arrays (numpy, compute dtype) and the shapes to map back."""

    u: np.ndarray
    delta: np.ndarray
    A: np.ndarray
    Bg: np.ndarray
    Cg: np.ndarray
    Dv: np.ndarray
    z: np.ndarray
    bias: np.ndarray
    h0: np.ndarray
    has_z: bool
    softplus: bool
    scale_b: bool
    B_ndim: int
    C_ndim: int
    starts: np.ndarray  # uint8 (batch, L): sequence starts; (0, 0) when not packed


def token_major(M: np.ndarray, dim: int) -> np.ndarray:
    """B or C as (batch or 1, groups, L or 1, d_state), contiguous in d_state."""
    if M.ndim == 2:  # (dim, N): one group per channel, shared by all tokens
        return np.ascontiguousarray(M[None, :, None, :])
    if M.ndim == 3:  # (batch, N, L)
        return np.ascontiguousarray(M.transpose(0, 2, 1)[:, None])
    return np.ascontiguousarray(M.transpose(0, 1, 3, 2))  # (batch, G, N, L)


def from_token_major(G: np.ndarray, ndim: int) -> np.ndarray:
    """Inverse of :func:`token_major` (for gradients)."""
    if ndim == 2:
        return G[0, :, 0, :]
    if ndim == 3:
        return G[:, 0].transpose(0, 2, 1)
    return G.transpose(0, 1, 3, 2)


def prepare(
    u: np.ndarray, delta: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray,
    D: np.ndarray | None, z: np.ndarray | None, delta_bias: np.ndarray | None,
    initial_state: np.ndarray | None, softplus: bool, scale_b: bool, dtype: np.dtype,
    starts: np.ndarray | None = None,
) -> Prepared:  # fmt: skip
    """Cast to ``dtype`` and lay out for :mod:`._cpu` (u, delta, z keep their strides)."""
    batch, dim, _ = u.shape
    N = A.shape[1]

    def cast(x: np.ndarray) -> np.ndarray:
        return x if x.dtype == dtype else x.astype(dtype)

    zeros_d = np.zeros(dim, dtype)
    return Prepared(
        u=_strided(cast(u)),
        delta=_strided(cast(delta)),
        A=np.ascontiguousarray(cast(A)),
        Bg=token_major(cast(B), dim),
        Cg=token_major(cast(C), dim),
        Dv=zeros_d if D is None else np.ascontiguousarray(cast(D)),
        z=np.zeros((1, 1, 1), dtype) if z is None else _strided(cast(z)),
        bias=zeros_d if delta_bias is None else np.ascontiguousarray(cast(delta_bias)),
        h0=np.zeros((batch, dim, N), dtype)
        if initial_state is None
        else np.ascontiguousarray(cast(initial_state)),
        **options(z, softplus, scale_b, B, C, starts),
    )


def options(z: Any, softplus: bool, scale_b: bool, B: Any, C: Any,
            starts: np.ndarray | None) -> dict[str, Any]:  # fmt: skip
    """The fields of a :class:`Prepared` that are flags and shapes, not arrays to scan."""
    packed = starts is not None and bool(starts.any())
    none = np.zeros((0, 0), np.uint8)
    return dict(
        has_z=z is not None,
        softplus=bool(softplus),
        scale_b=scale_b,
        B_ndim=B.ndim,
        C_ndim=C.ndim,
        starts=np.ascontiguousarray(starts, dtype=np.uint8) if packed else none,
    )


def _strided(x: np.ndarray) -> np.ndarray:
    # Channel-first contiguous, or the transposed view of a (batch, L, dim)
    # array (the chapter's layout) which the kernel reads in place; anything
    # else is copied to channel-first.
    if x.flags.c_contiguous:
        return x
    if x.transpose(0, 2, 1).flags.c_contiguous:
        return x
    return np.ascontiguousarray(x)


def _tm(x: np.ndarray) -> np.ndarray:
    """The C-contiguous (batch, L, dim) array behind a transposed view (or a dummy as is)."""
    if x.shape == (1, 1, 1):
        return x
    t = x.transpose(0, 2, 1)
    return t if t.flags.c_contiguous else np.ascontiguousarray(t)


def segment_length(pairs: int, L: int) -> int:
    """Tokens per sequence segment: all of L unless there are too few channels."""
    threads = numba.get_num_threads()
    want = _cpu.SEQ_SPLIT_PAIRS_PER_THREAD * threads
    if pairs >= want or L < 2 * _cpu.CHUNK:
        return max(L, 1)
    segments = -(-want // max(pairs, 1))
    seg = -(-L // segments)
    return -(-seg // _cpu.CHUNK) * _cpu.CHUNK


RUN_STATE_BYTES = 256 * 1024
"""Most states and A of one task of the lane kernel (``2 N W`` values per
block of ``W`` channels): 32 blocks of 64 channels at d_state 16 in float32,
which stays in L2."""


@threads.parallel
def forward(p: Prepared, save: bool, out: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Run the fused forward; returns (out, last_state, checkpoints)."""
    batch, dim, L = p.u.shape
    N = p.A.shape[1]
    target = None
    if out is not None and p.u.flags.c_contiguous and not out.flags.c_contiguous:
        # the kernels write C-order rows beside C-order inputs: into a buffer, then
        # copied (one compiled kernel per dtype instead of one per output layout)
        target, out = out, None
    if out is None and not p.u.flags.c_contiguous:  # the chapter's layout: out in it too
        out = mapped_empty((batch, L, dim), p.u.dtype).transpose(0, 2, 1)
    elif out is None:  # (mapped_empty: mapped here, not by the kernel's threads at once)
        out = mapped_empty((batch, dim, L), p.u.dtype)
    last = np.empty((batch, dim, N), p.u.dtype)
    nck = -(-L // _cpu.CHUNK) if save else 0
    ckpt = np.empty((batch, dim, nck, N), p.u.dtype)
    one = p.u.dtype.type(1)
    seg = segment_length(batch * dim, L)
    per_token = p.Bg.shape[2] == L and p.Cg.shape[2] == L and L > 1
    gb, gc = dim // p.Bg.shape[1], dim // p.Cg.shape[1]
    threads = numba.get_num_threads()
    fits = [w for w in _cpu.LANES if gb % w == 0 and gc % w == 0 and batch * dim // w >= threads]
    if fits and seg >= L and per_token:
        W = fits[0]
        tm = not p.u.flags.c_contiguous  # the chapter's layout: pass (batch, L, dim) arrays
        u, delta, z, o = (_tm(x) if tm else x for x in (p.u, p.delta, p.z, out))
        # Runs of blocks per sequence: batch * runs tasks, a multiple of the
        # threads, each holding at most RUN_STATE_BYTES of states and A (L2).
        nblk = dim // W
        base = threads // math.gcd(batch, threads)
        need = -(-nblk * 2 * N * W * p.u.dtype.itemsize // RUN_STATE_BYTES)
        runs = min(nblk, base * -(-need // base))
        _cpu.forward_lanes(u, delta, p.A, p.Bg, p.Cg, p.Dv, z, p.bias, p.softplus, p.has_z,
                           p.scale_b, p.h0, o, last, ckpt, _cpu.CHUNK, W, one, tm,
                           _cpu.TILE if tm else _cpu.TILE_CHANNEL_MAJOR, runs,
                           p.starts)  # fmt: skip
    else:
        _cpu.forward(p.u, p.delta, p.A, p.Bg, p.Cg, p.Dv, p.z, p.bias, p.softplus, p.has_z,
                     p.scale_b, p.h0, out, last, ckpt, _cpu.CHUNK,
                     seg, one, p.starts)  # fmt: skip
    if target is not None:
        target[...] = out
        out = target
    return out, last, ckpt


def grad_buffers(p: Prepared, rdt: np.dtype, cdt: np.dtype) -> list[np.ndarray]:
    """The backward kernels' outputs, in their argument order.

    ``du, ddelta, dz, dA, dB, dC, dD, dbias, dh0``: the gradients shared by
    channels (``dA`` .. ``dbias``) get one slice per thread, summed by
    :func:`gradients`.  ``cdt`` is the dtype of ``A``, ``B``, ``C`` and the
    state (complex for S4D-Lin), ``rdt`` that of the rest.
    """
    batch, dim, L = p.u.shape
    N = p.A.shape[1]
    th = numba.get_num_threads()
    return [
        np.empty((batch, dim, L), rdt),
        np.empty((batch, dim, L), rdt),
        np.zeros((batch, dim, L) if p.has_z else (1, 1, 1), rdt),
        np.zeros((th, dim, N), cdt),
        np.zeros((th, *p.Bg.shape), cdt),
        np.zeros((th, *p.Cg.shape), cdt),
        np.zeros((th, dim), rdt),
        np.zeros((th, dim), rdt),
        np.empty((batch, dim, N), cdt),
    ]


def gradients(p: Prepared, bufs: list[np.ndarray]) -> dict[str, Any]:
    """Every input's gradient from :func:`grad_buffers`, in the inputs' shapes."""
    du, ddelta, dz, dA_p, dB_p, dC_p, dD_p, dbias_p, dh0 = bufs
    return {
        "u": du,
        "delta": ddelta,
        "A": dA_p.sum(0),
        "B": from_token_major(dB_p.sum(0), p.B_ndim),
        "C": from_token_major(dC_p.sum(0), p.C_ndim),
        "D": dD_p.sum(0),
        "z": dz if p.has_z else None,
        "delta_bias": dbias_p.sum(0),
        "initial_state": dh0,
    }


@threads.parallel
def backward(p: Prepared, ckpt: np.ndarray, dout: np.ndarray, dlast: np.ndarray) -> dict[str, Any]:
    """Gradients of every input, in the compute dtype and the inputs' shapes."""
    dt = p.u.dtype
    bufs = grad_buffers(p, dt, dt)
    dout = np.ascontiguousarray(dout, dtype=dt)
    dlast = np.ascontiguousarray(dlast, dtype=dt)
    _cpu.backward(p.u, p.delta, p.A, p.Bg, p.Cg, p.Dv, p.z, p.bias, p.softplus, p.has_z,
                  p.scale_b, ckpt, _cpu.CHUNK, dout, dlast, *bufs, dt.type(1),
                  p.starts)  # fmt: skip
    return gradients(p, bufs)
