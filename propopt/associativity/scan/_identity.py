"""The identity of a scan: where an exclusive scan starts, what a masked element counts
as, and what a segment of a segmented scan restarts from.

A :class:`~propopt.Monoid` brings its own (:func:`of_monoid`), so that every
backend gives the same answer; ``identity=`` with a monoid must equal it
(:func:`check_own`).  A plain callable needs ``identity=`` for an exclusive
scan (:func:`given`, one value per leaf, broadcast to one element).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _kinds, _pytree, _validate
from ..._kinds import half_name
from ..monoid import Monoid
from ._arrays import broadcast_to

Leaves = list[Any]


def require(fn: Any, exclusive: bool, identity: Any) -> None:
    """An exclusive scan of a plain callable needs ``identity=``."""
    if exclusive and identity is None and not isinstance(fn, Monoid):
        raise ValueError(
            "exclusive=True needs identity= when fn is a plain callable (the value e "
            "with fn(e, x) == x, e.g. identity=0 for addition), or pass a Monoid"
        )


def check_own(m: Monoid, given: Leaves, leaves: Leaves, ax: int) -> None:
    """Refuse an ``identity=`` that is not the monoid's own identity."""
    own = of_monoid(m, leaves, ax)
    for g, o in zip(given, own):
        g_np = np.asarray(g.detach().cpu() if hasattr(g, "detach") else g)
        o_np = np.asarray(o.detach().cpu() if hasattr(o, "detach") else o)
        same = np.array_equal(g_np, o_np, equal_nan=True)
        if not same:
            flat = g_np.ravel()
            value = flat[0].item() if flat.size and np.all(flat == flat[0]) else g_np.tolist()
            dtype = _validate.np_dtype(leaves[0].dtype)
            mine = [np.asarray(v, dtype=dtype).item() for v in m.identity(dtype)]
            raise ValueError(
                f"identity={value!r} is not the identity of monoid {m.name!r} "
                f"({', '.join(map(repr, mine))}), which every method uses; drop identity=, "
                "or to start the scan from a value, put it in front of elems"
            )


def of_monoid(m: Monoid, leaves: Leaves, ax: int) -> Leaves:
    dtype = _validate.np_dtype(leaves[0].dtype)
    assert dtype is not None
    shape = tuple(leaves[0].shape)
    one = shape[:ax] + (1,) + shape[ax + 1 :]
    return [broadcast_to(v, one, leaf) for v, leaf in zip(m.identity(dtype), leaves)]


def given(identity: Any, treedef: _pytree.TreeDef, leaves: Leaves, ax: int) -> Leaves:
    if treedef.kind == "leaf" or not isinstance(identity, (tuple, list, dict)):
        ids = [identity] if treedef.kind == "leaf" else [identity] * len(leaves)
    else:
        ids, td = _pytree.flatten(identity, "identity")
        if td != treedef:
            raise ValueError(
                f"identity has structure {td.describe()} but elems has {treedef.describe()}; "
                "give one identity value per leaf, in the same container"
            )
    out = []
    for v, leaf in zip(ids, leaves):
        shape = tuple(leaf.shape)
        one = shape[:ax] + (1,) + shape[ax + 1 :]
        vv = v.detach().cpu() if _kinds.array_kind(v) in ("torch", "torch-cuda") else v
        if half_name(getattr(vv, "dtype", None)) == "bfloat16":  # no NumPy bfloat16 in torch
            vv = vv.float() if hasattr(vv, "detach") else np.asarray(vv, np.float32)
        vv = vv.numpy() if hasattr(vv, "detach") else vv
        try:
            out.append(broadcast_to(vv, one, leaf))
        except (ValueError, RuntimeError) as err:
            raise ValueError(
                f"identity value of shape {np.shape(vv)} does not broadcast to one element "
                f"of shape {one}; give a scalar or an array of that shape"
            ) from err
    return out
