"""The minimal SSD of the Mamba-2 paper (``ssd_minimal_discrete``), in pure torch.

The yardstick of :mod:`benchmarks.bench_ssd`.  Written from its published
definition (T. Dao and A. Gu, "Transformers are SSMs", 2024, Listing 1, and
``mamba_ssm/modules/ssd_minimal.py``): the sequence is cut into blocks of
``block_len`` tokens and computed in four einsum steps,

1. the diagonal blocks: ``Y_diag = (C B^T o L) X`` per head, with the decay
   mask ``L = exp(segsum(A))``;
2. each block's final state from zero: ``B^T (decay o X)``;
3. the recurrence over the block states (a ``(c+1) x (c+1)`` decay matrix);
4. the state-to-output term of each block: ``C state o exp(cumsum(A))``.

Inputs are those of the paper's test: ``X = x dt``, ``A = A dt`` (per token
and head), ``B`` and ``C`` given per head (groups expanded), and the length a
multiple of ``block_len``.  Without ``D``, ``z``, ``dt`` processing or
variable-length support.
"""

from __future__ import annotations

from typing import Any


def segsum(x: Any) -> Any:
    """``out[..., i, j] = x[..., j+1] + ... + x[..., i]`` for ``i >= j``, ``-inf`` above.

    Summed by a masked cumulative sum (not as a difference of two prefix
    sums, which loses precision), as the published ``segsum``.
    """
    import torch

    T = x.size(-1)
    xx = x[..., None].expand(*x.shape, T)  # xx[..., i, j] = x[..., i]
    below = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=-1)
    xx = xx.masked_fill(~below, 0)
    out = torch.cumsum(xx, dim=-2)
    keep = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=0)
    return out.masked_fill(~keep, -torch.inf)


def ssd_minimal_discrete(
    X: Any, A: Any, B: Any, C: Any, block_len: int, initial_states: Any = None
) -> tuple[Any, Any]:
    """Chunked SSD: ``X`` (b, l, h, p), ``A`` (b, l, h), ``B``, ``C`` (b, l, h, n).

    Returns ``(Y, final_state)`` with ``Y`` (b, l, h, p) and the state after
    the last token (b, h, p, n).  ``l`` must be a multiple of ``block_len``.
    """
    import torch

    b, l, h, p = X.shape
    if l % block_len:
        raise ValueError(f"length {l} is not a multiple of block_len={block_len}")
    c = l // block_len

    def blocks(t: Any) -> Any:  # (b, l, ...) -> (b, c, block_len, ...)
        return t.reshape(b, c, block_len, *t.shape[2:])

    Xc, Ac, Bc, Cc = blocks(X), blocks(A), blocks(B), blocks(C)
    Ac = Ac.permute(0, 3, 1, 2)  # (b, h, c, block_len)
    A_cumsum = torch.cumsum(Ac, dim=-1)

    # 1. diagonal blocks
    L = torch.exp(segsum(Ac))
    Y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Cc, Bc, L, Xc)

    # 2. each block's state from zero
    decay_states = torch.exp(A_cumsum[..., -1:] - A_cumsum)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bc, decay_states, Xc)

    # 3. recurrence over the block states
    if initial_states is None:
        initial_states = torch.zeros_like(states[:, :1])
    else:
        initial_states = initial_states[:, None]
    states = torch.cat([initial_states, states], dim=1)
    padded = torch.nn.functional.pad(A_cumsum[..., -1], (1, 0))
    decay_chunk = torch.exp(segsum(padded))  # (b, h, c+1, c+1)
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]

    # 4. state -> output within each block
    state_decay_out = torch.exp(A_cumsum)
    Y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Cc, states, state_decay_out)

    return (Y_diag + Y_off).reshape(b, l, h, p), final_state
