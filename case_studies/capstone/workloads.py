"""The benchmark workload: the chapter's inputs with a stable (negative) A.

The chapter draws ``A = randn`` and ``delta = |randn|``; with positive
entries of ``A`` the state grows like ``exp(delta A t)`` and overflows float32
within a few hundred tokens.  Mamba parametrizes ``A = -exp(A_log)``; we
draw ``A_log = randn``, keep the chapter's ``delta = |randn|`` and ``x``, ``B``,
``C`` ~ randn, float32.
"""

from __future__ import annotations

from typing import Any


def chapter_inputs(
    L: int, d_model: int, d_state: int = 16, batch: int = 1, seed: int = 0, dtype: Any = None
) -> tuple[Any, ...]:
    """``(x, A, B, C, delta)`` as torch tensors in the chapter's layout."""
    import torch

    g = torch.Generator().manual_seed(seed)
    dt = torch.float32 if dtype is None else dtype
    x = torch.randn(batch, L, d_model, generator=g, dtype=dt)
    A = -torch.exp(torch.randn(d_model, d_state, generator=g, dtype=dt))
    B = torch.randn(batch, L, d_state, generator=g, dtype=dt)
    C = torch.randn(batch, L, d_state, generator=g, dtype=dt)
    delta = torch.randn(batch, L, d_model, generator=g, dtype=dt).abs()
    return x, A, B, C, delta


def mamba_inputs(
    L: int, d_model: int, d_state: int = 16, batch: int = 1, seed: int = 0
) -> dict[str, Any]:
    """The same draws in mamba_ssm's channel-first layout (contiguous)."""
    x, A, B, C, delta = chapter_inputs(L, d_model, d_state, batch, seed)
    cf = [v.transpose(1, 2).contiguous() for v in (x, delta, B, C)]
    return dict(u=cf[0], delta=cf[1], A=A, B=cf[2], C=cf[3])


def mambapy_selective_scan(x: Any, delta: Any, A: Any, B: Any, C: Any) -> Any:
    """mambapy's ``MambaBlock.selective_scan`` without D: exp, B*x, pscan, C-projection.

    Layout (batch, L, d_model) and (batch, L, d_state), as mambapy.
    """
    from mambapy.pscan import pscan

    deltaA = (delta.unsqueeze(-1) * A).exp()  # (B, L, ED, N)
    BX = delta.unsqueeze(-1) * B.unsqueeze(2) * x.unsqueeze(-1)
    hs = pscan(deltaA, BX)
    return (hs @ C.unsqueeze(-1)).squeeze(3)
