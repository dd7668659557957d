"""Baselines and references: the chapter's loop, and a float64 sequential scan.

:func:`naive` is the capstone chapter's ``mamba_scan_naive`` as written: a
Python loop over tokens issuing torch tensor ops (one exp, two products and
a sum of shape (batch, d_model, d_state) per token).  It is the baseline the
speedups are measured against.

:func:`reference` is the obviously-correct scan with mamba_ssm's
``selective_scan_ref`` semantics, a loop over tokens in the array library of
its inputs (numpy or torch, so it is differentiable by torch); the tests run
it in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from propopt.arrays import array_module, flag


def naive(x: Any, A: Any, B: Any, C: Any, delta: Any) -> Any:
    """The chapter's sequential loop (torch tensors, layout (batch, L, d_model)).

    ``h_t = exp(delta_t A) * h_{t-1} + B_t x_t``, ``y_t = C_t . h_t``.  Note that,
    unlike mamba_ssm, the chapter does not scale ``B`` by ``delta``.
    """
    import torch

    batch, seq_len, d_model = x.shape
    d_state = A.shape[1]
    h = torch.zeros(batch, d_model, d_state, dtype=x.dtype, device=x.device)
    outputs = []
    for t in range(seq_len):
        A_bar = torch.exp(delta[:, t, :, None] * A)  # (batch, d_model, d_state)
        h = A_bar * h + B[:, t, None, :] * x[:, t, :, None]
        y = (C[:, t, None, :] * h).sum(dim=-1)  # (batch, d_model)
        outputs.append(y)
    if not outputs:
        return x.new_zeros(batch, 0, d_model)
    return torch.stack(outputs, dim=1)


def _expand(M: Any, dim: int, xp: Any) -> Any:
    """B or C as (batch or 1, dim, d_state, L or 1)."""
    if M.ndim == 2:  # (dim, N): shared by every token
        return M[None, :, :, None]
    if M.ndim == 3:  # (batch, N, L)
        return M[:, None, :, :]
    rep = dim // M.shape[1]  # (batch, G, N, L): channel d uses group d // rep
    return xp.repeat(M, rep, 1) if xp.__name__ == "numpy" else M.repeat_interleave(rep, 1)


def is_complex(x: Any) -> bool:
    return str(x.dtype).replace("torch.", "").startswith("complex")


def complex_pairs(M: Any, dtype: Any) -> Any:
    """A per-token B or C for complex A, (..., 2 L) real (mamba_ssm's layout), as
    (..., L) complex of ``dtype``: element ``t`` is ``M[..., 2t] + 1j M[..., 2t+1]``.

    Shared ``(dim, d_state)`` and already complex arrays are cast to ``dtype``.
    Differentiable for torch tensors (the gradient comes back as (real, imag) pairs).
    """
    if M.ndim == 2 or is_complex(M):
        return M.astype(dtype) if isinstance(M, np.ndarray) else M.to(dtype)
    if isinstance(M, np.ndarray):
        real = np.float64 if np.dtype(dtype) == np.complex128 else np.float32
        return np.ascontiguousarray(M, dtype=real).view(dtype)
    import torch

    real = torch.float64 if dtype == torch.complex128 else torch.float32
    pairs = M.to(real).reshape(*M.shape[:-1], M.shape[-1] // 2, 2).contiguous()
    return torch.view_as_complex(pairs)


def reference(
    u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any = None, z: Any = None,
    delta_bias: Any = None, delta_softplus: bool = False, initial_state: Any = None,
    scale_b: bool = True, starts: Any = None,
) -> tuple[Any, Any]:  # fmt: skip
    """Sequential selective scan in the inputs' dtype; returns (out, last_state).

    ``h_t = exp(dt_t A) h_{t-1} + dt_t B_t u_t``, ``out_t = (C_t . h_t + D u_t) silu(z_t)``
    with ``dt = softplus(delta + delta_bias)`` (softplus(x) = x above 20, as
    mamba_ssm).  Layout (batch, dim, L).  ``scale_b=False`` drops the ``dt``
    in front of ``B`` (the chapter's recurrence).  ``starts`` (batch, L), bool:
    the state is zero before each token where it is set (packed sequences).

    Complex ``A`` (S4D-Lin), as mamba_ssm's ``selective_scan_ref``: the state
    is complex (``A``'s dtype), a per-token ``B`` or ``C`` is real with
    (real, imag) pairs on its last axis, 2 L numbers (:func:`complex_pairs`;
    complex (..., L) is taken as is), and ``C_t . h_t`` becomes
    ``2 Re(C_t . h_t)``.
    """
    delta_softplus, scale_b = flag("delta_softplus", delta_softplus), flag("scale_b", scale_b)
    xp = array_module(u)
    batch, dim, L = u.shape
    if delta_bias is not None:
        delta = delta + delta_bias[:, None]
    if delta_softplus:
        delta = xp.where(delta <= 20, xp.log1p(xp.exp(delta.clip(max=20))), delta)
    cplx = is_complex(A)
    if cplx:
        B, C = complex_pairs(B, A.dtype), complex_pairs(C, A.dtype)
    Bx, Cx = _expand(B, dim, xp), _expand(C, dim, xp)
    N = A.shape[1]
    h0_dtype = A.dtype if cplx else u.dtype
    h = xp.zeros((batch, dim, N), dtype=h0_dtype) if initial_state is None else initial_state
    ys = []
    for t in range(L):
        dt = delta[:, :, t, None]
        bt = Bx[..., t if Bx.shape[-1] > 1 else 0]
        ct = Cx[..., t if Cx.shape[-1] > 1 else 0]
        drive = dt * u[:, :, t, None] if scale_b else u[:, :, t, None]
        if starts is not None:  # selected, not multiplied: 0 * nan is nan
            h = xp.where(starts[:, t, None, None], 0.0, h)
        h = xp.exp(dt * A) * h + drive * bt
        y = (h * ct).sum(-1)
        ys.append(2 * y.real if cplx else y)
    y = xp.stack(ys, -1) if L else u * 0
    out = y if D is None else y + D[:, None] * u
    if z is not None:
        out = out * (z / (1 + xp.exp(-z)))
    return out, h
