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

import itertools
from typing import Any

import numpy as np

import propopt
from propopt.arrays import array_module as _xp

from .._reference import _expand, complex_pairs, is_complex


def scan(
    u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any,
    softplus: bool, initial_state: Any, scale_b: bool = True, starts: Any = None,
) -> tuple[Any, Any]:  # fmt: skip
    """Selective scan by associative scan; arrays already in the compute dtype.

    Complex ``A`` (S4D-Lin) as :func:`._reference.reference`: complex maps
    and state, ``y = 2 Re(C . h)``.
    """
    xp = _xp(u)
    batch, dim, L = u.shape
    N = A.shape[1]
    cplx = is_complex(A)
    if cplx:
        B, C = complex_pairs(B, A.dtype), complex_pairs(C, A.dtype)
    dt = delta if delta_bias is None else delta + delta_bias[:, None]
    if softplus:
        dt = xp.where(dt <= 20, xp.log1p(xp.exp(dt.clip(max=20))), dt)
    Bx = _expand(B, dim, xp).swapaxes(-1, -2)  # (batch|1, dim, L|1, N)
    Cx = _expand(C, dim, xp).swapaxes(-1, -2)
    a = xp.exp(dt[..., None] * A[:, None, :])  # (batch, dim, L, N)
    drive = dt * u if scale_b else u
    b = drive[..., None] * Bx
    if L == 0:
        h0 = (xp.zeros((batch, dim, N), dtype=A.dtype if cplx else u.dtype)
              if initial_state is None else initial_state)  # fmt: skip
        return u * 0, h0 + 0
    reset = None if starts is None else starts[:, None, :, None]
    if reset is None:
        acum, h = propopt.associative_scan(propopt.linear_recurrence, (a, b), axis=2)
    else:
        acum, h = _segmented(a, b, starts)
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
    if cplx:
        y = 2 * y.real
    out = y if D is None else y + D[:, None] * u
    if z is not None:
        out = out * (z / (1 + xp.exp(-z)))
    return out, h[:, :, -1]


def _segmented(a: Any, b: Any, starts: Any) -> tuple[Any, Any]:
    """The segmented scan of the maps ``(a, b)``, restarting at every ``starts[batch, t]``.

    The segmented monoid selects between a pair's combination and its right
    element, so its values keep an inf or nan in its sequence; but torch's
    gradient of that selection multiplies the unselected combination's
    partials by zero, and ``0 * nan`` is nan: a nan ``a`` in one sequence
    would make the gradients of the sequences before it nan.  So when
    ``a`` or ``b`` holds one, the scan runs with them taken as zero, and
    each sequence that held one is scanned again on its own and written over.
    """
    xp = _xp(a)
    reset = starts[:, None, :, None]
    fin = xp.isfinite(a) & xp.isfinite(b)
    if bool(fin.all()):
        return propopt.associative_scan(propopt.linear_recurrence, (a, b), axis=2, reset=reset)
    elems = (xp.where(fin, a, 0.0), xp.where(fin, b, 0.0))
    acum, h = propopt.associative_scan(propopt.linear_recurrence, elems, axis=2, reset=reset)
    bad = ~fin.all(3).all(1)  # (batch, L)
    if xp is np:
        st = starts
    else:
        bad, st = bad.cpu().numpy(), starts.cpu().numpy()
        acum, h = acum.clone(), h.clone()
    L = a.shape[2]
    for row in range(a.shape[0]):
        bounds = [0, *(np.flatnonzero(st[row, 1:]) + 1).tolist(), L]
        for s0, s1 in itertools.pairwise(bounds):
            if bad[row, s0:s1].any():
                part = (a[row : row + 1, :, s0:s1], b[row : row + 1, :, s0:s1])
                ac, hh = propopt.associative_scan(propopt.linear_recurrence, part, axis=2)
                acum[row : row + 1, :, s0:s1] = ac
                h[row : row + 1, :, s0:s1] = hh
    return acum, h
