"""The chunked SSD scan in torch operations: ``method='ops'`` of :func:`.ssd_scan`.

The same three phases as :mod:`._host`, written with torch tensor
operations so that autograd differentiates them and they run on any torch
device.  Within a chunk it uses the explicit per-head mask
``L[i, j] = exp(cs_i - cs_j)`` (no range limit).  The carry across chunks is
one pass over the chunks, ``H_c = a_c H_{c-1} + S_c`` (on CPU a numba kernel
with an explicit adjoint, :mod:`._carry`).  :func:`propopt.associative_scan` with
:data:`propopt.linear_recurrence` (``method='generic'``, which autograd also
differentiates) was tried first: at the 2.7B shape (64 chunks of 32 x 64 x
128 states) it took 2.5 s of a 2.6 s forward, its log-depth passes copying
and concatenating the 64 MiB of states (``aten::cat`` 1.4 s, ``mul``/``add``
1.7 s of CPU time); with 64 elements to scan there is nothing for the
parallel depth to win.

Sequence starts (``seq_idx`` / ``cu_seqlens``) enter as masks: two tokens of
a chunk interact only within one *run* (no start between them), the carried
state reaches only the chunk's first run, only the last run feeds the
chunk's end state, and a chunk that holds a start passes no state on
(``a_c = 0``): a segmented scan expressed through the monoid's own zero.  A
token whose decay ``exp(dt A)`` is exactly zero (``dt A`` below
``_cpu.CUT_BELOW``, ``A = -inf`` included) ends its head's run the
same way, and its ``dt A`` is taken as 0 in the cumulative sums, so that no
two infinities are subtracted (``-inf - -inf`` is nan where the recurrence
has ``exp(-inf) = 0``), and ``dt A`` is formed in float64 (a float32
``dt A`` overflows to ``-inf`` from ``A = -1e38``).  Every mask is a
selection: the exponent is set to ``-inf`` before the ``exp``, never a
product with 0 after it, so neither values nor gradients meet ``0 * inf``.
Non-finite inputs are zeroed before the scan and their sequences
recomputed afterwards (:mod:`._nonfinite`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ._carry import CarryFn
from ._cpu import CUT_BELOW
from ._nonfinite import bad_tokens, finite_or_zero

#: Run the carry pass as one numba kernel each way (:class:`._carry.CarryFn`)
#: for CPU tensors; other devices (and tests of that path) use torch operations.
NUMBA_CARRY = True


def forward(x: Any, dt: Any, A: Any, B: Any, C: Any, Q: int, D: Any, z: Any, dt_bias: Any,
            softplus: bool, dt_limit: tuple[float, float], h0: Any, starts: Any,
            cu_seqlens: Any) -> tuple[Any, Any, Any, Any]:  # fmt: skip
    """Returns ``(y, final_states, varlen_states or None, bad)``; tensors of one dtype.

    ``starts`` (b, l) bool marks sequence starts; ``h0`` (b, h, p, n) or None.
    ``bad`` (b, l, h) bool: the tokens whose inputs were not finite (taken as
    zero here; the caller recomputes their sequences, :func:`._nonfinite.repair`).
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
    bad = bad_tokens(x, dt, A, B, C, h0, starts)
    if bool(bad.any()):
        x, B, C, h0 = (finite_or_zero(v) for v in (x, B, C, h0))
        dt = torch.where(bad, 0.0, dt)
    # dt A in float64, zero at a cut (selected: its gradient is 0, not 0 * inf)
    with torch.no_grad():
        cut = dt.double() * A.double() < CUT_BELOW
    A_fin = torch.where(torch.isfinite(A), A, 0.0)
    la = torch.where(cut, 0.0, dt.double() * A_fin.double())

    def chunks(t: Any) -> Any:  # pad the length with zeros, then (b, c, Q, ...)
        if pad:
            t = F.pad(t, (0, 0) * (t.ndim - 2) + (0, pad))
        return t.reshape(nb, nck, Q, *t.shape[2:])

    X, dtc, Bc, Cc = chunks(x), chunks(dt), chunks(B), chunks(C)  # pads: dt = 0, no effect
    # run of each token inside its chunk, per head: sequence starts and cuts
    # both only increase along the chunk, so equal sums mean equal both
    hid = chunks(starts).cumsum(2)[..., None] + chunks(cut).cumsum(2)  # (b, c, Q, h)
    causal = torch.ones(Q, Q, dtype=torch.bool, device=x.device).tril()
    hidh = hid.permute(0, 1, 3, 2)
    same_run = (hidh[..., :, None] == hidh[..., None, :]) & causal  # (b, c, h, Q, Q)
    first_run = hid == 0  # reached by the carried state
    last_run = hid == hid[:, :, -1:]  # feeds the chunk's end state
    keeps = hid[:, :, -1] == 0  # (b, c, h): the chunk passes its carry on

    # Chunk-local cumulative sums of dt A in float64 (their differences are
    # exponentiated), (b, c, Q, h); exp in the compute dtype.
    G64 = torch.cumsum(chunks(la), dim=2)
    Gh = G64.permute(0, 1, 3, 2)  # (b, c, h, Q)
    diff = Gh[..., :, None] - Gh[..., None, :]
    Lmat = torch.exp(diff.masked_fill(~same_run, -torch.inf).to(x.dtype))

    # 1. each chunk alone: diagonal blocks and the end state from zero.
    # States are kept as (b, c, g, n, heads of g * p): GEMM-ready, no copies.
    CB = torch.einsum("bcign,bcjgn->bcgij", Cc, Bc).repeat_interleave(hg, dim=2)
    M = CB * Lmat * dtc.permute(0, 1, 3, 2)[..., None, :]
    Yd = M @ X.permute(0, 1, 3, 2, 4)  # (b, c, h, Q, p)
    if Yd.requires_grad:
        # Its gradient arrives as a permuted view of y's; torch's batched
        # matmul backward then multiplies matrix by matrix with copies (13.8 s
        # at the 2.7B shape).  A contiguous gradient keeps it one MKL call.
        Yd.register_hook(lambda g: None if g is None else g.contiguous())
    end = (G64[:, :, -1:] - G64).masked_fill(~last_run, -torch.inf)
    w = torch.exp(end).to(x.dtype) * dtc  # (b, c, Q, h)
    Xw = (X * w[..., None]).reshape(nb, nck, Q, G, hg * P)
    S = torch.einsum("bcqgn,bcqgw->bcgnw", Bc, Xw)

    # 2. the carries, H_c = a_c H_{c-1} + S_c: one pass over the chunks
    a = torch.exp(G64[:, :, -1].masked_fill(~keeps, -torch.inf)).to(x.dtype)
    a = a.reshape(nb, nck, G, hg)
    if h0 is None:
        h = x.new_zeros(nb, G, N, hg, P)
    else:
        h = h0.reshape(nb, G, hg, P, N).permute(0, 1, 4, 2, 3)
    S = S.reshape(nb, nck, G, N, hg, P)
    if x.device.type == "cpu" and NUMBA_CARRY:
        Hprev, h = CarryFn.apply(a, S, h)
    else:
        before = []
        for c in range(nck):
            before.append(h)
            h = a[:, c, :, None, :, None] * h + S[:, c]
        Hprev = torch.stack(before, 1)
    # Hprev (b, c, g, n, hg, p): the state before chunk c
    final = h.permute(0, 1, 3, 4, 2).reshape(nb, H, P, N)

    # 3. each chunk from its carry
    carry = torch.exp(G64.masked_fill(~first_run, -torch.inf)).to(x.dtype)  # (b, c, Q, h)
    Yo = torch.einsum("bcqgn,bcgnw->bcqgw", Cc, Hprev.reshape(nb, nck, G, N, hg * P))
    Yo = Yo.reshape(nb, nck, Q, H, P) * carry[..., None]
    y = (Yd.permute(0, 1, 3, 2, 4) + Yo).reshape(nb, nck * Q, H, P)[:, :L]
    if D is not None:
        y = y + (D[:, None] if D.ndim == 1 else D) * x
    if z is not None:
        y = y * F.silu(z)
    varlen = None
    if cu_seqlens is not None:
        varlen = _varlen(X, dtc, Bc, G64, hid, Hprev, cu_seqlens, Q)
    return y, final, varlen, bad


def _varlen(X: Any, dtc: Any, Bc: Any, G64: Any, hid: Any, Hprev: Any, cu: Any,
            Q: int) -> Any:  # fmt: skip
    """State after each packed sequence's last token (batch 1); zeros for empty ones.

    ``hid`` (b, c, Q, h): each token's run of the head in its chunk;
    ``Hprev`` (b, c, g, n, hg, p); returns (nseq, h, p, n).
    """
    H, P = X.shape[3], X.shape[4]
    G, N = Bc.shape[3], Bc.shape[4]
    hg = H // G
    states = []
    for s in range(len(cu) - 1):
        if int(cu[s + 1]) <= int(cu[s]):
            states.append(X.new_zeros(H, P, N))
            continue
        t = int(cu[s + 1]) - 1
        c, i = divmod(t, Q)
        run = hid[0, c, : i + 1] == hid[0, c, i]  # (i + 1, h): t's run of the head, up to t
        gap = (G64[0, c, i] - G64[0, c, : i + 1]).masked_fill(~run, -torch.inf)
        wt = torch.exp(gap).to(X.dtype) * dtc[0, c, : i + 1]  # (i + 1, h)
        Xs = (X[0, c, : i + 1] * wt[..., None]).reshape(i + 1, G, hg, P)
        st = torch.einsum("qgn,qgkp->gkpn", Bc[0, c, : i + 1], Xs).reshape(H, P, N)
        reach = torch.exp(G64[0, c, i].masked_fill(hid[0, c, i] != 0, -torch.inf))  # (h,)
        carry = Hprev[0, c].permute(0, 2, 3, 1).reshape(H, P, N)
        states.append(st + reach.to(X.dtype)[:, None, None] * carry)
    return torch.stack(states)
