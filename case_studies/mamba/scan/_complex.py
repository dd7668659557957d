"""Complex selective scan (S4D-Lin: complex ``A``, ``B``, ``C``) on CPU threads.

mamba_ssm's ``selective_scan_ref`` semantics for complex ``A``: per
(batch, channel) and token ``t``::

    dt   = softplus(delta[t] + bias)          (or without softplus / bias)
    h[n] = exp(dt A[n]) h[n] + dt u[t] B[t, n]      (complex)
    y    = 2 Re(sum_n C[t, n] h[n])
    out  = (y + D u[t]) silu(z[t])

A per-token ``B`` or ``C`` arrives as real (..., 2 L) (real, imag) pairs and
is viewed as complex (..., L) before it gets here
(:func:`._reference.complex_pairs`).  The kernels keep the state as real
and imaginary parts, one (batch, channel) pair per task of a parallel loop,
walking the tokens in order; the backward is the reverse scan of the
adjoint ``g_t = dL/dRe h_t + i dL/dIm h_t`` (torch's convention for complex
gradients)::

    g_t = conj(a_{t+1}) g_{t+1} + 2 dy_t conj(C_t)      (a_t = exp(dt_t A))

with the states recomputed chunk by chunk from checkpoints, as
:mod:`._cpu`'s real backward.

``exp(dt A) = fexp(dt Re A) (cos(dt Im A) + i sin(dt Im A))``: the real
factor is :mod:`._exp`'s vectorizable exp, the rotation libm's cos and sin,
which take most of the time (12-15x the real kernel's time at 1024 channels,
2048 tokens, d_state 16, float32).

numba keys its on-disk cache on this file only: change this line when
editing what the kernels compile in from ``_cpu`` (``_dt``) or ``_exp``
(``fexp``, ``fsoftplus``).
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba import njit, prange

from propopt import threads

from .._compute import FASTMATH
from .._exp import fexp
from ._cpu import (
    CHUNK,
    _dt,
    channel,
    gate_grad,
    sizes,
    through_softplus,
    token,
)
from ._host import Prepared, grad_buffers, gradients, options, token_major


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def forward(u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z, h0, out, last, ckpt, T,
            one, starts):  # type: ignore[no-untyped-def]  # fmt: skip
    """Complex forward; ``ckpt`` (batch, dim, ceil(L/T), N) gets the state entering
    every T-th token when it has room."""
    nb, D, L, N, _, vb, vc, packed = sizes(u, A, Bg, Cg, starts, T)
    save = ckpt.shape[2] > 0
    zero = one - one
    for i in prange(nb * D):
        b, d, bb, gb, bc, gc = channel(i, D, Bg, Cg)
        hr = np.empty(N, dtype=u.dtype)
        hi = np.empty(N, dtype=u.dtype)
        for n in range(N):
            hr[n] = h0[b, d, n].real
            hi[n] = h0[b, d, n].imag
        bias_d = bias[d]
        dsk = Dv[d]
        for t in range(L):
            if save and t % T == 0:
                for n in range(N):
                    ckpt[b, d, t // T, n] = hr[n] + 1j * hi[n]
            if packed and starts[b, t]:
                for n in range(N):
                    hr[n] = zero
                    hi[n] = zero
            dt = _dt(delta[b, d, t] + bias_d, softplus)
            ut = u[b, d, t]
            dub = dt * ut
            tb = t if vb else 0
            tc = t if vc else 0
            y = zero
            for n in range(N):
                a = A[d, n]
                er = fexp(dt * a.real)
                th = dt * a.imag
                ar = er * math.cos(th)
                ai = er * math.sin(th)
                bv = Bg[bb, gb, tb, n]
                xr = ar * hr[n] - ai * hi[n] + dub * bv.real
                xi = ar * hi[n] + ai * hr[n] + dub * bv.imag
                hr[n] = xr
                hi[n] = xi
                cv = Cg[bc, gc, tc, n]
                y += xr * cv.real - xi * cv.imag
            o = y + y + dsk * ut
            if has_z:
                zt = z[b, d, t]
                o = o * (zt / (one + fexp(-zt)))
            out[b, d, t] = o
        for n in range(N):
            last[b, d, n] = hr[n] + 1j * hi[n]


@njit(fastmath=FASTMATH, cache=True, inline="always")
def readout_complex(hr, hi, Cg, bc, gc, tc, zero):  # type: ignore[no-untyped-def]
    """``y = Re(C_t . h)`` from the state's real and imaginary parts (N,) each."""
    y = zero
    for n in range(hr.shape[0]):
        cv = Cg[bc, gc, tc, n]
        y += hr[n] * cv.real - hi[n] * cv.imag
    return y


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def backward(u, delta, A, Bg, Cg, Dv, z, bias, softplus, has_z, ckpt, T, dout, dlast,
             du, ddelta, dz, dA_p, dB_p, dC_p, dD_p, dbias_p, dh0, one,
             starts):  # type: ignore[no-untyped-def]  # fmt: skip
    """Reverse scan of the complex adjoint, recomputing states chunk by chunk.

    ``dA_p`` (threads, D, N), ``dB_p``/``dC_p`` (threads, *Bg.shape),
    ``dD_p``/``dbias_p`` (threads, D) are per-thread slabs, zeroed by the
    caller; complex gradients are ``dL/dRe + i dL/dIm``.
    """
    nb, D, L, N, nck, vb, vc, packed = sizes(u, A, Bg, Cg, starts, T)
    zero = one - one
    for i in prange(nb * D):
        tid = numba.get_thread_id()
        b, d, bb, gb, bc, gc = channel(i, D, Bg, Cg)
        hr = np.empty((T + 1, N), dtype=u.dtype)  # row 0: the state entering the chunk
        hi = np.empty((T + 1, N), dtype=u.dtype)
        ar_ = np.empty((T, N), dtype=u.dtype)
        ai_ = np.empty((T, N), dtype=u.dtype)
        gr = np.empty(N, dtype=u.dtype)
        gi = np.empty(N, dtype=u.dtype)
        for n in range(N):
            gr[n] = dlast[b, d, n].real
            gi[n] = dlast[b, d, n].imag
        dAr = np.zeros(N)
        dAi = np.zeros(N)
        bias_d = bias[d]
        dsk = Dv[d]
        dD_acc = 0.0
        dbias_acc = 0.0
        for c in range(nck - 1, -1, -1):
            t0 = c * T
            t1 = min(L, t0 + T)
            for n in range(N):
                hr[0, n] = ckpt[b, d, c, n].real
                hi[0, n] = ckpt[b, d, c, n].imag
            for t in range(t0, t1):  # recompute the chunk's states
                k = t - t0
                dt = _dt(delta[b, d, t] + bias_d, softplus)
                dub = dt * u[b, d, t]
                tb = t if vb else 0
                rs = packed and starts[b, t]  # then the state entering t is zero
                for n in range(N):
                    a = A[d, n]
                    er = fexp(dt * a.real)
                    th = dt * a.imag
                    ar = er * math.cos(th)
                    ai = er * math.sin(th)
                    ar_[k, n] = ar
                    ai_[k, n] = ai
                    pr = zero if rs else hr[k, n]
                    pi = zero if rs else hi[k, n]
                    bv = Bg[bb, gb, tb, n]
                    hr[k + 1, n] = ar * pr - ai * pi + dub * bv.real
                    hi[k + 1, n] = ar * pi + ai * pr + dub * bv.imag
            for t in range(t1 - 1, t0 - 1, -1):  # walk it in reverse
                k = t - t0
                x, dt, ut, go, tb, tc = token(b, d, t, delta, bias_d, softplus, u, dout, vb, vc)
                if has_z:
                    y = readout_complex(hr[k + 1], hi[k + 1], Cg, bc, gc, tc, zero)
                    dz[b, d, t], dy = gate_grad(go, y + y + dsk * ut, z[b, d, t], one)
                else:
                    dy = go
                dD_acc += dy * ut
                dy2 = dy + dy
                sA = zero
                sB = zero
                dub = dt * ut
                rs = packed and starts[b, t]
                for n in range(N):
                    cv = Cg[bc, gc, tc, n]
                    bv = Bg[bb, gb, tb, n]
                    # y = 2 Re(C h): dL/dh gets 2 dy conj(C), dL/dC gets 2 dy conj(h)
                    gnr = gr[n] + dy2 * cv.real
                    gni = gi[n] - dy2 * cv.imag
                    dC_p[tid, bc, gc, tc, n] += dy2 * hr[k + 1, n] - 1j * (dy2 * hi[k + 1, n])
                    # h = a h_prev + dub B
                    dB_p[tid, bb, gb, tb, n] += gnr * dub + 1j * (gni * dub)
                    sB += gnr * bv.real + gni * bv.imag  # dL/d(dub) = Re(g conj(B))
                    pr = zero if rs else hr[k, n]
                    pi = zero if rs else hi[k, n]
                    ar = ar_[k, n]
                    ai = ai_[k, n]
                    gar = gnr * pr + gni * pi  # dL/da = g conj(h_prev)
                    gai = gni * pr - gnr * pi
                    gwr = gar * ar + gai * ai  # dL/d(dt A) = dL/da conj(a)
                    gwi = gai * ar - gar * ai
                    a = A[d, n]
                    sA += gwr * a.real + gwi * a.imag  # dL/d dt = Re(dL/d(dt A) conj(A))
                    dAr[n] += gwr * dt
                    dAi[n] += gwi * dt
                    gr[n] = gnr * ar + gni * ai  # dL/dh_prev = g conj(a)
                    gi[n] = gni * ar - gnr * ai
                if rs:  # nothing flows back past a start
                    for n in range(N):
                        gr[n] = zero
                        gi[n] = zero
                ddt = sA + sB * ut
                du[b, d, t] = dy * dsk + sB * dt
                ddt = through_softplus(ddt, x, softplus, one)
                ddelta[b, d, t] = ddt
                dbias_acc += ddt
        for n in range(N):
            dA_p[tid, d, n] += dAr[n] + 1j * dAi[n]
            dh0[b, d, n] = gr[n] + 1j * gi[n]
        dD_p[tid, d] += dD_acc
        dbias_p[tid, d] += dbias_acc


def complex_dtype(real: np.dtype) -> np.dtype:
    return np.dtype(np.complex128 if real == np.float64 else np.complex64)


def prepare(u: np.ndarray, delta: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray,
            D: np.ndarray | None, z: np.ndarray | None, delta_bias: np.ndarray | None,
            initial_state: np.ndarray | None, softplus: bool, dtype: np.dtype,
            starts: np.ndarray | None = None) -> Prepared:  # fmt: skip
    """Kernel-ready arrays: real ones in ``dtype``, A, B, C and the state complex.

    ``B`` and ``C`` are complex already: ``(dim, d_state)``, ``(batch, d_state, L)``
    or ``(batch, groups, d_state, L)``.
    """
    batch, dim, _ = u.shape
    N = A.shape[1]
    cdt = complex_dtype(dtype)

    def real(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x, dtype=dtype)

    def cplx(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x, dtype=cdt)

    zeros_d = np.zeros(dim, dtype)
    return Prepared(
        u=real(u),
        delta=real(delta),
        A=cplx(A),
        Bg=token_major(cplx(B), dim),
        Cg=token_major(cplx(C), dim),
        Dv=zeros_d if D is None else real(D),
        z=np.zeros((1, 1, 1), dtype) if z is None else real(z),
        bias=zeros_d if delta_bias is None else real(delta_bias),
        h0=np.zeros((batch, dim, N), cdt) if initial_state is None else cplx(initial_state),
        **options(z, softplus, True, B, C, starts),
    )


@threads.parallel
def run_forward(p: Prepared, save: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out, complex last state, checkpoints: empty unless ``save``)."""
    batch, dim, L = p.u.shape
    N = p.A.shape[1]
    out = np.empty((batch, dim, L), p.u.dtype)
    last = np.empty((batch, dim, N), p.A.dtype)
    nck = -(-L // CHUNK) if save else 0
    ckpt = np.empty((batch, dim, nck, N), p.A.dtype)
    forward(p.u, p.delta, p.A, p.Bg, p.Cg, p.Dv, p.z, p.bias, p.softplus, p.has_z, p.h0,
            out, last, ckpt, CHUNK, p.u.dtype.type(1), p.starts)  # fmt: skip
    return out, last, ckpt


@threads.parallel
def run_backward(p: Prepared, ckpt: np.ndarray, dout: np.ndarray,
                 dlast: np.ndarray) -> dict[str, Any]:  # fmt: skip
    """Gradients of every input (complex ones for A, B, C, initial_state)."""
    rdt, cdt = p.u.dtype, p.A.dtype
    bufs = grad_buffers(p, rdt, cdt)
    backward(p.u, p.delta, p.A, p.Bg, p.Cg, p.Dv, p.z, p.bias, p.softplus, p.has_z, ckpt,
             CHUNK, np.ascontiguousarray(dout, dtype=rdt), np.ascontiguousarray(dlast, dtype=cdt),
             *bufs, rdt.type(1), p.starts)  # fmt: skip
    return gradients(p, bufs)


def scan_numpy(args: dict[str, Any], softplus: bool,
               starts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Forward on NumPy arrays already in the compute dtypes (B, C complex)."""
    p = prepare(*(args[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias",
                                    "initial_state")),
                softplus, args["u"].dtype, starts)  # fmt: skip
    out, last, _ = run_forward(p, save=False)
    return out, last


NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
