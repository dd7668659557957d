"""The chunked SSD scan in torch operations: ``method='torch'`` of :func:`.ssd_scan`.

The same three phases as :mod:`._ssd_host`, written with torch tensor
operations so that autograd differentiates them and they run on any torch
device.  Within a chunk it uses the explicit per-head mask
``L[i, j] = exp(cs_i - cs_j)`` (no range limit); the carry across chunks is
:func:`propopt.associative_scan` with :data:`propopt.linear_recurrence` over
the chunk states (``method='generic'``: vectorized torch calls, which
autograd differentiates).

Sequence starts (``seq_idx`` / ``cu_seqlens``) enter as masks: two tokens of
a chunk interact only within one *run* (no start between them), the carried
state reaches only the chunk's first run, only the last run feeds the
chunk's end state, and a chunk that holds a start passes no state on
(``a_c = 0``): a segmented scan expressed through the monoid's own zero.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from propopt import associative_scan, linear_recurrence


def forward(x: Any, dt: Any, A: Any, B: Any, C: Any, Q: int, D: Any, z: Any, dt_bias: Any,
            softplus: bool, dt_limit: tuple[float, float], h0: Any, starts: Any,
            cu_seqlens: Any) -> tuple[Any, Any, Any]:  # fmt: skip
    """Returns ``(y, final_states, varlen_states or None)``; tensors of one dtype.

    ``starts`` (b, l) bool marks sequence starts; ``h0`` (b, h, p, n) or None.
    """
    nb, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    hg = H // G
    nck = -(-L // Q)
    pad = nck * Q - L
    if dt_bias is not None:
        dt = dt + dt_bias
    if softplus:
        dt = F.softplus(dt)  # x itself above 20, as mamba_ssm
    dt = dt.clamp(dt_limit[0], dt_limit[1])

    def chunks(t: Any) -> Any:  # pad the length with zeros, then (b, c, Q, ...)
        t = F.pad(t, (0, 0) * (t.ndim - 2) + (0, pad))
        return t.reshape(nb, nck, Q, *t.shape[2:])

    X, dtc, Bc, Cc = chunks(x), chunks(dt), chunks(B), chunks(C)  # pads: dt = 0, no effect
    st = F.pad(starts, (0, pad)).reshape(nb, nck, Q)
    rid = st.cumsum(-1)  # run of each token inside its chunk
    causal = torch.ones(Q, Q, dtype=torch.bool, device=x.device).tril()
    same_run = (rid[..., :, None] == rid[..., None, :]) & causal  # (b, c, Q, Q)
    first_run = (rid == 0).to(x.dtype)  # reached by the carried state
    last_run = (rid == rid[..., -1:]).to(x.dtype)  # feeds the chunk's end state
    keeps = (~st.any(-1)).to(x.dtype)  # the chunk passes its carry on

    # Chunk-local cumulative sums of dt A, in float64 (differences of them
    # are exponentiated); (b, c, h, Q).
    G64 = torch.cumsum((dtc * A).to(torch.float64), dim=2).permute(0, 1, 3, 2)
    diff = G64[..., :, None] - G64[..., None, :]
    Lmat = torch.exp(diff.masked_fill(~same_run[:, :, None], -torch.inf)).to(x.dtype)
    dtj = dtc.permute(0, 1, 3, 2)  # (b, c, h, Q)

    # 1. each chunk alone: diagonal blocks and the end state from zero
    CB = torch.einsum("bcign,bcjgn->bcgij", Cc, Bc).repeat_interleave(hg, dim=2)
    M = CB * Lmat * dtj[..., None, :]
    Yd = M @ X.permute(0, 1, 3, 2, 4)  # (b, c, h, Q, p)
    w = torch.exp(G64[..., -1:] - G64).to(x.dtype) * dtj * last_run[:, :, None, :]
    Xg = X.reshape(nb, nck, Q, G, hg, P)
    S = torch.einsum("bcqgn,bcgkq,bcqgkp->bcgkpn", Bc, w.reshape(nb, nck, G, hg, Q), Xg)
    S = S.reshape(nb, nck, H, P, N)

    # 2. the carries: h0 then the chunks, scanned by the linear-recurrence monoid
    a = torch.exp(G64[..., -1]).to(x.dtype) * keeps[..., None]  # (b, c, h)
    a = torch.cat([torch.zeros_like(a[:, :1]), a], 1)[..., None, None]
    a = a.expand(nb, nck + 1, H, P, N).contiguous()
    start = torch.zeros_like(S[:, :1]) if h0 is None else h0[:, None]
    _, Hs = associative_scan(linear_recurrence, (a, torch.cat([start, S], 1)), axis=1,
                             method="generic")  # fmt: skip
    Hprev, final = Hs[:, :-1], Hs[:, -1]  # Hprev[:, c] = state before chunk c

    # 3. each chunk from its carry
    carry = torch.exp(G64).to(x.dtype) * first_run[:, :, None, :]  # (b, c, h, Q)
    Yo = torch.einsum("bcqgn,bcgkpn->bcqgkp", Cc, Hprev.reshape(nb, nck, G, hg, P, N))
    Yo = Yo.reshape(nb, nck, Q, H, P) * carry.permute(0, 1, 3, 2)[..., None]
    y = (Yd.permute(0, 1, 3, 2, 4) + Yo).reshape(nb, nck * Q, H, P)[:, :L]
    if D is not None:
        y = y + (D[:, None] if D.ndim == 1 else D) * x
    if z is not None:
        y = y * F.silu(z)
    varlen = None
    if cu_seqlens is not None:
        varlen = _varlen(X, dtj, Bc, G64, rid, Hprev, cu_seqlens, Q)
    return y, final, varlen


def _varlen(X: Any, dtj: Any, Bc: Any, G64: Any, rid: Any, Hprev: Any, cu: Any,
            Q: int) -> Any:  # fmt: skip
    """State after each packed sequence's last token (batch 1); zeros for empty ones."""
    H, P = X.shape[3], X.shape[4]
    G, N = Bc.shape[3], Bc.shape[4]
    hg = H // G
    states = []
    for s in range(len(cu) - 1):
        if int(cu[s + 1]) <= int(cu[s]):
            states.append(torch.zeros_like(Hprev[0, 0]))
            continue
        t = int(cu[s + 1]) - 1
        c, i = divmod(t, Q)
        run = rid[0, c, : i + 1] == rid[0, c, i]  # tokens of t's run up to t
        wt = torch.exp(G64[0, c, :, i : i + 1] - G64[0, c, :, : i + 1]).to(X.dtype)
        wt = wt * dtj[0, c, :, : i + 1] * run.to(X.dtype)  # (h, i + 1)
        Xs = X[0, c, : i + 1].reshape(i + 1, G, hg, P)
        st = torch.einsum("qgn,gkq,qgkp->gkpn", Bc[0, c, : i + 1], wt.reshape(G, hg, -1), Xs)
        st = st.reshape(H, P, N)
        if bool(rid[0, c, i] == 0):
            st = st + torch.exp(G64[0, c, :, i]).to(X.dtype)[:, None, None] * Hprev[0, c]
        states.append(st)
    return torch.stack(states)
