"""The Mamba-2 recurrence token by token: ``method='reference'`` of :func:`.ssd_scan`.

For every batch row, head ``h``, head channel ``p`` and state ``n``::

    dt_t   = clamp(softplus(dt_t + dt_bias[h]), *dt_limit)
    s_t    = exp(dt_t A[h]) s_{t-1} + dt_t B_t[g(h)] x_t[h]        (s = 0 at a sequence start)
    y_t[h] = (C_t[g(h)] . s_t + D[h] x_t[h]) silu(z_t[h])

A loop over tokens in the array library of the inputs (numpy, or torch,
which makes it differentiable); slow, and obviously right.
"""

from __future__ import annotations

from typing import Any

from propopt.arrays import array_module


def ssd_reference(x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any = None, z: Any = None,
                  dt_bias: Any = None, dt_softplus: bool = False,
                  dt_limit: tuple[float, float] = (0.0, float("inf")),
                  initial_states: Any = None, starts: Any = None,
                  cu_seqlens: Any = None) -> tuple[Any, Any, Any]:  # fmt: skip
    """Sequential scan; returns ``(y, final_states, varlen_states or None)``.

    ``starts`` (batch, L), bool, marks the tokens where the state resets to
    zero: selected, not multiplied by zero, so that an inf or nan stays in
    its own sequence (``0 * nan`` is nan).
    """
    xp = array_module(x)
    nb, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    rep = H // G
    if dt_bias is not None:
        dt = dt + dt_bias
    if dt_softplus:
        dt = xp.where(dt <= 20, xp.log1p(xp.exp(xp.clip(dt, None, 20))), dt)
    dt = xp.clip(dt, dt_limit[0], dt_limit[1])
    if xp.__name__ == "numpy":
        Bh, Ch = xp.repeat(B, rep, 2), xp.repeat(C, rep, 2)  # (b, l, h, n)
    else:
        Bh, Ch = B.repeat_interleave(rep, 2), C.repeat_interleave(rep, 2)
    if initial_states is None:
        s = xp.zeros((nb, H, P, N), dtype=x.dtype)
    else:
        s = initial_states
    ends = set() if cu_seqlens is None else {int(e) - 1 for e in cu_seqlens[1:]}
    at_end = {}
    ys = []
    for t in range(L):
        keep = xp.exp(dt[:, t] * A)[:, :, None, None]  # (b, h, 1, 1)
        drive = (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        if starts is None:
            s = keep * s + drive
        else:
            s = xp.where(starts[:, t, None, None, None], drive, keep * s + drive)
        ys.append((s * Ch[:, t, :, None, :]).sum(-1))
        if t in ends:
            at_end[t] = s[0]
    y = xp.stack(ys, 1) if L else x * 0
    if D is not None:
        y = y + (D[:, None] if D.ndim == 1 else D) * x
    if z is not None:
        y = y * (z / (1 + xp.exp(-z)))
    varlen = None
    if cu_seqlens is not None:
        zero = xp.zeros((H, P, N), dtype=x.dtype)
        varlen = xp.stack([at_end[int(cu_seqlens[i + 1]) - 1]
                           if cu_seqlens[i + 1] > cu_seqlens[i] else zero
                           for i in range(len(cu_seqlens) - 1)])  # fmt: skip
    return y, s, varlen
