"""One token of generation for Mamba-2's multi-head state, and cached-state indexing.

mamba_ssm's ``selective_state_update`` with heads: the state is
(batch, nheads, headdim, dstate); ``dt``, ``dt_bias``, ``D`` and ``A`` are
given per head (the Mamba-2 layer) or per (head, channel[, state]) (the
general form), and ``B``, ``C`` per group of heads.  With
``state_batch_indices`` the state is a cache with one slot per
conversation, and row ``i`` of the batch reads and writes slot
``state_batch_indices[i]`` (continuous batching).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _checks


def check_indices(idx: Any, batch: int, slots: int) -> np.ndarray:
    """``state_batch_indices`` as int64 numpy: (batch,), in range, no slot twice."""
    if type(idx).__module__.startswith("torch"):
        idx = idx.detach().cpu().numpy()
    a = np.asarray(idx)
    if a.dtype.kind not in "iu":
        raise TypeError(f"state_batch_indices has dtype {a.dtype}; expected integers")
    if a.shape != (batch,):
        raise ValueError(f"state_batch_indices has shape {a.shape}; expected (batch,) = "
                         f"({batch},), one state slot per row of x")  # fmt: skip
    if batch and (a.min() < 0 or a.max() >= slots):
        raise ValueError(f"state_batch_indices holds {int(a.min())}..{int(a.max())}; slots "
                         f"are 0..{slots - 1} (state.shape[0] = {slots})")  # fmt: skip
    if len(np.unique(a)) != batch:
        raise ValueError("state_batch_indices names a slot twice; each row of the batch "
                         "needs its own state")  # fmt: skip
    return a.astype(np.int64)


def shapes_heads(state: Any, x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any, z: Any,
                 dt_bias: Any, batch: int) -> None:  # fmt: skip
    """mamba_ssm's shapes for a (slots, nheads, headdim, dstate) state."""
    rows = "batch" if int(state.shape[0]) == batch else None  # not with state_batch_indices
    heads: tuple[_checks.Layout, ...] = (
        (("nheads",), "(nheads,)"),
        (("nheads", "headdim"), "(nheads, headdim)"),
    )
    bhp: tuple[_checks.Layout, ...] = (
        (("batch", "nheads", "headdim"), "(batch, nheads, headdim)"),
    )
    bgn: tuple[_checks.Layout, ...] = ((("batch", None, "dstate"), "(batch, ngroups, dstate)"),)
    size = _checks.agree([
        ("state", state, (((rows, "nheads", "headdim", "dstate"),
                           "(slots, nheads, headdim, dstate)"),)),
        ("x", x, bhp),
        ("dt", dt, ((("batch", "nheads"), "(batch, nheads)"), *bhp)),
        ("A", A, ((("nheads",), "(nheads,)"),
                  (("nheads", "headdim", "dstate"), "(nheads, headdim, dstate)"))),
        ("B", B, bgn),
        ("C", C, bgn),
        ("D", D, heads),
        ("z", z, bhp),
        ("dt_bias", dt_bias, heads),
    ])  # fmt: skip
    H = size["nheads"]
    for name, M in (("B", B), ("C", C)):
        if M.shape[1] < 1 or H % M.shape[1]:
            raise ValueError(f"{name} has shape {tuple(M.shape)}; expected (batch, ngroups, "
                             f"dstate) with ngroups dividing nheads={H}")  # fmt: skip


def update_heads(s: Any, a: dict[str, Any], softplus: bool, kind: str) -> tuple[Any, Any]:
    """New states (batch, nheads, headdim, dstate) and outputs (batch, nheads, headdim).

    ``s``: the rows' current states; ``a``: the arguments in the compute dtype.
    """
    xp = np if kind == "numpy" else __import__("torch")
    x = a["x"]
    H = x.shape[1]

    def per_channel(v: Any) -> Any:  # (H,) or (H, P) -> broadcastable to (batch, H, P)
        return v[:, None] if v.ndim == 1 else v

    d = a["dt"] if a["dt"].ndim == 3 else a["dt"][:, :, None]  # (batch, H, 1 or P)
    if a["dt_bias"] is not None:
        d = d + per_channel(a["dt_bias"])
    if softplus:
        d = xp.where(d <= 20, xp.log1p(xp.exp(xp.clip(d, None, 20))), d)
    A = a["A"][:, None, None] if a["A"].ndim == 1 else a["A"]  # (H, 1 or P, 1 or N)

    def per_head(M: Any) -> Any:  # (batch, G, N) -> (batch, H, 1, N)
        rep = H // M.shape[1]
        M = xp.repeat(M, rep, 1) if kind == "numpy" else M.repeat_interleave(rep, 1)
        return M[:, :, None, :]

    new = xp.exp(d[..., None] * A) * s + (d * x)[..., None] * per_head(a["B"])
    y = (new * per_head(a["C"])).sum(-1)
    if a["D"] is not None:
        y = y + per_channel(a["D"]) * x
    if a["z"] is not None:
        y = y * (a["z"] / (1 + xp.exp(-a["z"])))
    return new, y
