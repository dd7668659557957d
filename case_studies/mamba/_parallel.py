"""The chapter's derivation, composed from propopt's public scan.

Each token of each (channel, state) is the affine map ``h -> a_t h + b_t`` with
``a_t = exp(dt_t A)`` and ``b_t = dt_t B_t u_t``; maps compose associatively,
so :func:`propopt.associative_scan` with :data:`propopt.linear_recurrence`
computes every ``h_t`` in parallel.  Its first output, the running product of
``a``, carries an initial state: ``h_t = h_t|_{h0=0} + (a_0 ... a_t) h0``.

This path materializes ``a``, ``b`` and ``h`` of shape (batch, dim, L,
d_state) (what the fused kernel avoids); it works for numpy and torch (CPU
or CUDA) and is differentiable by torch autograd, since
``associative_scan`` falls back to torch operations when a tensor requires
grad.  Packed sequences are its segmented scan (``reset=``): each sequence
start cuts the composition of maps, so every sequence starts from zero.
"""

from __future__ import annotations

from typing import Any

import propopt
from propopt.arrays import array_module as _xp

from ._reference import _expand


def scan(
    u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any,
    softplus: bool, initial_state: Any, scale_b: bool = True, starts: Any = None,
) -> tuple[Any, Any]:  # fmt: skip
    """Selective scan by associative scan; arrays already in the compute dtype."""
    xp = _xp(u)
    batch, dim, L = u.shape
    N = A.shape[1]
    dt = delta if delta_bias is None else delta + delta_bias[:, None]
    if softplus:
        dt = xp.where(dt <= 20, xp.log1p(xp.exp(dt.clip(max=20))), dt)
    Bx = _expand(B, dim, xp).swapaxes(-1, -2)  # (batch|1, dim, L|1, N)
    Cx = _expand(C, dim, xp).swapaxes(-1, -2)
    a = xp.exp(dt[..., None] * A[:, None, :])  # (batch, dim, L, N)
    drive = dt * u if scale_b else u
    b = drive[..., None] * Bx
    if L == 0:
        h0 = xp.zeros((batch, dim, N), dtype=u.dtype) if initial_state is None else initial_state
        return u * 0, h0 + 0
    reset = None if starts is None else starts[:, None, :, None]
    acum, h = propopt.associative_scan(propopt.linear_recurrence, (a, b), axis=2, reset=reset)
    if initial_state is not None:
        h0 = initial_state[:, :, None, :]
        if reset is None:
            h = h + acum * h0
        else:  # the initial state reaches only the tokens before any start; selected on
            # both sides of the product, so that neither the values nor the gradients
            # see 0 * nan (an inf or nan in one sequence stays in it)
            reach = reset.cumsum(2) == 0
            h = h + xp.where(reach, acum * xp.where(reach, h0, 0.0), 0.0)
    y = (h * Cx).sum(-1)
    out = y if D is None else y + D[:, None] * u
    if z is not None:
        out = out * (z / (1 + xp.exp(-z)))
    return out, h[:, :, -1]
