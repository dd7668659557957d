"""The carry pass of the SSD scan over chunks, with its adjoint, for torch autograd on CPU.

Forward, per state entry: ``H_c = a_c H_{c-1} + S_c``, returning every
``H_{c-1}`` (the state entering chunk ``c``) and ``H_last``.  The adjoint is
the same recurrence run backwards::

    G_last = dL/dH_last;   for c = last .. 0:
        dS_c = G_c,   da_c = <G_c, H_{c-1}>,   G_{c-1} = a_c G_c + dL/dH_{c-1}

and ``dL/dh0 = G_{-1}``.  Both directions are one numba pass, parallel over
the state entries.  Written as torch operations, the 64 steps of the 2.7B
shape were 128 small parallel tensor operations whose thread hand-offs
dominated (13 ms each on the shared 2-core machine, 1.9 s in all, plus
0.5 s to stack the states); this pass is one parallel region each way.

Layout: ``a`` (b, c, g, hg), states (b, c, g, n, hg, p) and ``h0`` (b, g, n, hg, p).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numba import njit, prange

from propopt import threads

from .._compute import FASTMATH


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def carry_forward(a, S, h0, Hprev, final):  # type: ignore[no-untyped-def]
    nb, nck, G, N, hg, P = S.shape
    for task in prange(nb * G * N):
        b = task // (G * N)
        r = task - b * (G * N)
        g = r // N
        n = r - g * N
        st = h0[b, g, n].copy()
        for c in range(nck):
            for k in range(hg):
                ak = a[b, c, g, k]
                for p in range(P):
                    Hprev[b, c, g, n, k, p] = st[k, p]
                    st[k, p] = ak * st[k, p] + S[b, c, g, n, k, p]
        for k in range(hg):
            for p in range(P):
                final[b, g, n, k, p] = st[k, p]


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def carry_backward(a, Hprev, dHprev, dfinal, dS, da_part, dh0):  # type: ignore[no-untyped-def]
    nb, nck, G, N, hg, P = Hprev.shape
    for task in prange(nb * G * N):
        b = task // (G * N)
        r = task - b * (G * N)
        g = r // N
        n = r - g * N
        gr = dfinal[b, g, n].copy()
        for c in range(nck - 1, -1, -1):
            for k in range(hg):
                ak = a[b, c, g, k]
                acc = gr[k, 0] * 0
                for p in range(P):
                    gp = gr[k, p]
                    dS[b, c, g, n, k, p] = gp
                    acc += gp * Hprev[b, c, g, n, k, p]
                    gr[k, p] = ak * gp + dHprev[b, c, g, n, k, p]
                da_part[b, g, n, c, k] = acc
        for k in range(hg):
            for p in range(P):
                dh0[b, g, n, k, p] = gr[k, p]


def _np(t: Any) -> np.ndarray:
    return t.detach().contiguous().numpy()


class CarryFn(torch.autograd.Function):
    """``(a, S, h0) -> (Hprev, H_last)`` on CPU tensors, differentiable in all three."""

    @staticmethod
    def forward(ctx: Any, a: Any, S: Any, h0: Any) -> tuple[Any, Any]:  # type: ignore[override]
        an, Sn, hn = _np(a), _np(S), _np(h0)
        Hprev = np.empty_like(Sn)
        final = np.empty_like(hn)
        with threads.sized():
            carry_forward(an, Sn, hn, Hprev, final)
        Ht = torch.from_numpy(Hprev)
        ctx.save_for_backward(a, Ht)
        return Ht, torch.from_numpy(final)

    @staticmethod
    def backward(ctx: Any, dHprev: Any, dfinal: Any) -> tuple[Any, Any, Any]:  # type: ignore[override]
        a, Hprev = ctx.saved_tensors
        Hn = Hprev.numpy()
        nb, nck, G, N, hg, P = Hn.shape
        dHn = np.zeros_like(Hn) if dHprev is None else _np(dHprev)
        dfn = np.zeros((nb, G, N, hg, P), Hn.dtype) if dfinal is None else _np(dfinal)
        dS = np.empty_like(Hn)
        da_part = np.empty((nb, G, N, nck, hg), Hn.dtype)
        dh0 = np.empty_like(dfn)
        with threads.sized():
            carry_backward(_np(a), Hn, dHn, dfn, dS, da_part, dh0)
        da = torch.from_numpy(da_part.sum(2).transpose(0, 2, 1, 3).copy())  # (b, c, g, hg)
        return da, torch.from_numpy(dS), torch.from_numpy(dh0)
