"""Flatten and rebuild the containers that ``elems`` may come in.

A pytree here is a leaf (any array) or a tuple, list, dict or namedtuple of
pytrees.  Dict keys are visited in sorted order, as in JAX, so that the leaf
order does not depend on insertion order.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TreeDef:
    """The shape of a container with its leaves taken out."""

    kind: str  # "leaf", "tuple", "list", "dict" or "namedtuple"
    children: tuple[TreeDef, ...] = ()
    keys: tuple[Any, ...] = ()
    cls: type | None = None

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def describe(self) -> str:
        """A short human-readable description, used in error messages."""
        if self.kind == "leaf":
            return "array"
        inner = ", ".join(c.describe() for c in self.children)
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c.describe()}" for k, c in zip(self.keys, self.children))
            return "{" + inner + "}"
        if self.kind == "list":
            return "[" + inner + "]"
        if self.kind == "namedtuple":
            assert self.cls is not None
            return f"{self.cls.__name__}({inner})"
        return "(" + inner + ("," if len(self.children) == 1 else "") + ")"


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


LEAF = TreeDef("leaf")


def flatten(tree: Any, name: str = "elems") -> tuple[list[Any], TreeDef]:
    """Return the leaves of ``tree`` in a fixed order and its structure.

    A dict whose keys cannot be sorted (``{1: x, "a": y}``) raises a one-line
    ``ValueError`` naming the argument ``name``, as JAX refuses such keys.
    """
    if not isinstance(tree, (tuple, list, dict)):  # a single array: the common case
        return [tree], LEAF
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves, name)


def _sorted_keys(tree: dict, name: str) -> tuple[Any, ...]:
    try:
        return tuple(sorted(tree))
    except TypeError:
        kinds = sorted({type(k).__name__ for k in tree})
        raise ValueError(
            f"{name} is a dict with keys {list(tree)[:4]!r} that cannot be ordered "
            f"({', '.join(kinds)}): use keys of one type (all str, say), as JAX requires"
        ) from None


def _flatten(tree: Any, leaves: list[Any], name: str) -> TreeDef:
    if _is_namedtuple(tree):
        kids = tuple(_flatten(c, leaves, name) for c in tree)
        return TreeDef("namedtuple", kids, cls=type(tree))
    if isinstance(tree, tuple):
        return TreeDef("tuple", tuple(_flatten(c, leaves, name) for c in tree))
    if isinstance(tree, list):
        return TreeDef("list", tuple(_flatten(c, leaves, name) for c in tree))
    if isinstance(tree, dict):
        keys = _sorted_keys(tree, name)
        return TreeDef("dict", tuple(_flatten(tree[k], leaves, name) for k in keys), keys=keys)
    leaves.append(tree)
    return LEAF


def unflatten(treedef: TreeDef, leaves: Sequence[Any]) -> Any:
    """Inverse of :func:`flatten`."""
    it = iter(leaves)
    out = _unflatten(treedef, it)
    return out


def _unflatten(td: TreeDef, it: Any) -> Any:
    if td.kind == "leaf":
        return next(it)
    kids = [_unflatten(c, it) for c in td.children]
    if td.kind == "tuple":
        return tuple(kids)
    if td.kind == "list":
        return kids
    if td.kind == "dict":
        return dict(zip(td.keys, kids))
    assert td.cls is not None
    return td.cls(*kids)


@functools.lru_cache(maxsize=256)
def leaf_paths(treedef: TreeDef, prefix: str = "elems") -> tuple[str, ...]:
    """Names such as ``elems[0]`` or ``elems['a']`` for each leaf, for messages (cached)."""
    if treedef.kind == "leaf":
        return (prefix,)
    out: list[str] = []
    for i, c in enumerate(treedef.children):
        key = treedef.keys[i] if treedef.kind == "dict" else i
        out.extend(leaf_paths(c, f"{prefix}[{key!r}]"))
    return tuple(out)


def apply(fn: Any, treedef: TreeDef, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """``fn`` on two leaf lists of structure ``treedef``, returning leaves; its result is checked.

    ``fn`` must return the structure of its inputs, leaf by leaf of their
    shapes (an elementwise combine): anything else is a one-line error.
    """
    out, td = flatten(fn(unflatten(treedef, a), unflatten(treedef, b)))
    if td != treedef:
        raise ValueError(
            f"fn returned {td.describe()} for elements of structure {treedef.describe()}; "
            "fn must return the structure of its inputs"
        )
    for i, (o, x) in enumerate(zip(out, a)):
        if tuple(getattr(o, "shape", ())) != tuple(x.shape):
            raise ValueError(
                f"fn returned leaf {i} of shape {tuple(getattr(o, 'shape', ()))} for inputs "
                f"of shape {tuple(x.shape)}; fn must combine elementwise and keep the shape"
            )
    return out
