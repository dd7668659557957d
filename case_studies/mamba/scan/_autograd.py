"""``torch.autograd.Function`` around the fused CPU kernels (real and complex).

The forward keeps only the inputs and one state per ``_cpu.CHUNK`` tokens;
the backward is the reverse linear scan of :func:`._cpu.backward`, which
recomputes each chunk's states.  Nothing of size (batch, d_model, L,
d_state) is stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from . import _complex, _host


def _np(x: torch.Tensor | None, dtype: np.dtype) -> np.ndarray | None:
    if x is None:
        return None
    tdt = torch.float64 if dtype == np.float64 else torch.float32
    return x.detach().to(tdt).numpy()


class SelectiveScanFn(torch.autograd.Function):
    """Differentiable selective scan on CPU tensors (inputs in the order of the kernel)."""

    @staticmethod
    def forward(ctx: Any, u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any,
                delta_bias: Any, initial_state: Any, softplus: bool,
                scale_b: bool, starts: np.ndarray | None = None,
                ) -> tuple[Any, Any]:  # type: ignore[override]  # fmt: skip
        cdt = np.dtype(np.float64 if u.dtype == torch.float64 else np.float32)
        p = _host.prepare(*(_np(x, cdt) for x in (u, delta, A, B, C, D, z, delta_bias,
                                                  initial_state)),
                          softplus, scale_b, cdt, starts)  # type: ignore[arg-type]  # fmt: skip
        out, last, ckpt = _host.forward(p, save=True)
        ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, initial_state)
        ctx.ckpt = ckpt
        ctx.flags = (softplus, scale_b, cdt, starts)
        return torch.from_numpy(out).to(u.dtype), torch.from_numpy(last)

    @staticmethod
    def backward(ctx: Any, dout: Any, dlast: Any) -> tuple[Any, ...]:  # type: ignore[override]
        u, delta, A, B, C, D, z, delta_bias, initial_state = ctx.saved_tensors
        softplus, scale_b, cdt, starts = ctx.flags
        p = _host.prepare(*(_np(x, cdt) for x in (u, delta, A, B, C, D, z, delta_bias,
                                                  initial_state)),
                          softplus, scale_b, cdt, starts)  # type: ignore[arg-type]  # fmt: skip
        batch, dim, L = u.shape
        N = A.shape[1]
        g_out = np.zeros((batch, dim, L), cdt) if dout is None else _np(dout, cdt)
        g_last = np.zeros((batch, dim, N), cdt) if dlast is None else _np(dlast, cdt)
        grads = _host.backward(p, ctx.ckpt, g_out, g_last)  # type: ignore[arg-type]
        names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
        inputs = (u, delta, A, B, C, D, z, delta_bias, initial_state)
        res: list[Any] = []
        for name, x, need in zip(names, inputs, ctx.needs_input_grad):
            g = grads[name]
            res.append(torch.from_numpy(np.ascontiguousarray(g)).to(x.dtype)
                       if need and x is not None and g is not None else None)  # fmt: skip
        return (*res, None, None, None)


def _np_as_is(x: torch.Tensor | None) -> np.ndarray | None:
    return None if x is None else x.detach().numpy()


class ComplexScanFn(torch.autograd.Function):
    """Complex (S4D-Lin) selective scan on CPU tensors: :mod:`._complex`'s numba
    forward and backward.  Inputs in the compute dtypes, ``B`` and ``C`` complex
    (batch, [groups,] d_state, L) or (dim, d_state); gradients of complex inputs
    are ``dL/dRe + i dL/dIm``, torch's convention."""

    @staticmethod
    def forward(ctx: Any, u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any,
                delta_bias: Any, initial_state: Any, softplus: bool,
                starts: np.ndarray | None = None) -> tuple[Any, Any]:  # type: ignore[override]  # fmt: skip
        inputs = (u, delta, A, B, C, D, z, delta_bias, initial_state)
        rdt = np.dtype(np.float64 if u.dtype == torch.float64 else np.float32)
        p = _complex.prepare(*(_np_as_is(x) for x in inputs), softplus, rdt,
                             starts)  # type: ignore[arg-type]  # fmt: skip
        out, last, ckpt = _complex.run_forward(p, save=True)
        ctx.save_for_backward(*inputs)
        ctx.ckpt = ckpt
        ctx.flags = (softplus, rdt, starts)
        return torch.from_numpy(out), torch.from_numpy(last)

    @staticmethod
    def backward(ctx: Any, dout: Any, dlast: Any) -> tuple[Any, ...]:  # type: ignore[override]
        inputs = ctx.saved_tensors
        softplus, rdt, starts = ctx.flags
        p = _complex.prepare(*(_np_as_is(x) for x in inputs), softplus, rdt,
                             starts)  # type: ignore[arg-type]  # fmt: skip
        batch, dim, L = inputs[0].shape
        N = inputs[2].shape[1]
        g_out = np.zeros((batch, dim, L), rdt) if dout is None else _np_as_is(dout)
        g_last = (np.zeros((batch, dim, N), p.A.dtype) if dlast is None
                  else _np_as_is(dlast))  # fmt: skip
        grads = _complex.run_backward(p, ctx.ckpt, g_out, g_last)  # type: ignore[arg-type]
        res: list[Any] = []
        for name, x, need in zip(_complex.NAMES, inputs, ctx.needs_input_grad):
            g = grads[name]
            res.append(torch.from_numpy(np.ascontiguousarray(g)).to(x.dtype)
                       if need and x is not None and g is not None else None)  # fmt: skip
        return (*res, None, None)
