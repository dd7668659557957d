"""``fn`` as a combine of leaf lists: a monoid checked against the elements, a plain
callable lifted to pytrees (its results checked once per shape of the batches)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ... import _kinds, _pytree, _validate
from ..._kinds import half_name
from ..monoid import Monoid

Leaves = list[Any]


def check_monoid(m: Monoid, leaves: Leaves, paths: Sequence[str]) -> None:
    if len(leaves) != m.arity:
        raise ValueError(
            f"monoid {m.name!r} combines elements of {m.arity} array(s) but elems has "
            f"{len(leaves)} leaves ({', '.join(paths)}); pass a pytree of {m.arity} arrays"
        )
    shape, dtype = tuple(leaves[0].shape), leaves[0].dtype
    for leaf, path in zip(leaves, paths):
        if tuple(leaf.shape) != shape or leaf.dtype != dtype:
            raise ValueError(
                f"monoid {m.name!r} needs leaves of one shape and dtype: {paths[0]} is "
                f"{_kinds.describe(leaves[0])} but {path} is {_kinds.describe(leaf)}; "
                "broadcast and cast them first (np.broadcast_arrays, .astype)"
            )
    if half_name(dtype) is not None:
        if "f" in m.kinds:
            return  # widened to float32 by the caller
        raise TypeError(
            f"monoid {m.name!r} cannot combine elems of dtype {dtype}: half precision is "
            f"widened to float32 only for monoids over floats, and it accepts "
            f"{_kinds_text(m.kinds)}; cast elems to one of those first"
        )
    np_dtype = _validate.np_dtype(dtype)
    if np_dtype is None or not m.accepts(np_dtype):
        cast = ".to(torch.float64)" if str(dtype).startswith("torch.") else ".astype(np.float64)"
        if "f" not in m.kinds and "i" in m.kinds:
            cast = ".to(torch.int64)" if cast.startswith(".to") else ".astype(np.int64)"
        raise TypeError(
            f"monoid {m.name!r} cannot combine elems of dtype {dtype}; it accepts "
            f"{_kinds_text(m.kinds)}: cast elems first (e.g. elems{cast})"
        )


def _kinds_text(kinds: str) -> str:
    names = {"i": "signed integers", "u": "unsigned integers", "f": "floats", "c": "complex"}
    return ", ".join(names[k] for k in kinds if k in names)


def lift(fn: Callable[[Any, Any], Any], treedef: _pytree.TreeDef) -> Any:
    """Lift ``fn`` on pytrees to a function on leaf lists, checking what it returns."""

    checked: set[tuple[tuple[int, ...], ...]] = set()

    def combine(a: Leaves, b: Leaves) -> Leaves:
        key = tuple(tuple(x.shape) for x in a)
        if key in checked:  # checked once per shape of the batches
            res = fn(_pytree.unflatten(treedef, a), _pytree.unflatten(treedef, b))
            return _pytree.flatten(res, "the result of fn")[0]
        out = _pytree.apply(fn, treedef, a, b)
        checked.add(key)
        return out

    return combine
