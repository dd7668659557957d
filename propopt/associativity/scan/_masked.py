"""Masked arrays, other ndarray subclasses and byte orders in ``associative_scan``.

As in ``np.cumsum`` of an ``np.ma`` array, a masked element counts as the
identity (it contributes nothing to the later outputs) and its own output is
masked.  For a pytree of leaves of one shape (a monoid's ``(a, b)`` pair, for
example) an element is masked when any of its leaves is.  Every other ndarray
subclass (``np.matrix``, ``np.memmap``...) is scanned as the plain ndarray it
holds, so the combine sees elementwise arrays on every backend, and a
non-native byte order (``'>f8'`` on x86) as the same values in native order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..monoid import Monoid

Leaves = list[Any]


def unmask(leaves: Leaves, paths: Sequence[str]) -> tuple[Leaves, np.ndarray | None]:
    """Plain native-order ndarrays for ``leaves``, and the elements' mask if any leaf is masked."""
    masks = [np.ma.getmaskarray(x) for x in leaves if isinstance(x, np.ma.MaskedArray)]
    plain = [_native(np.asarray(x.data if isinstance(x, np.ma.MaskedArray) else x)) for x in leaves]
    if not masks:
        return plain, None
    shape = plain[0].shape
    for x, path in zip(plain, paths):
        if x.shape != shape:
            raise ValueError(
                f"{path} has shape {x.shape} but {paths[0]} has {shape}: masked elems need "
                "leaves of one shape (an element is masked when any of its leaves is); "
                "fill the masks first (x.filled(value))"
            )
    mask = np.zeros(shape, dtype=bool)
    for m in masks:
        mask |= m
    return plain, mask


def _native(x: np.ndarray) -> np.ndarray:
    return x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("="))


def fill(leaves: Leaves, mask: np.ndarray, identity: Sequence[Any]) -> Leaves:
    """``leaves`` with every masked element replaced by ``identity``."""
    return [np.where(mask, np.asarray(e, dtype=x.dtype), x) for x, e in zip(leaves, identity)]


def remask(out: Leaves, mask: np.ndarray) -> Leaves:
    """The scan's outputs, masked where the input elements were."""
    return [np.ma.MaskedArray(o, mask=mask.copy()) for o in out]


def refuse_masked(value: Any, name: str) -> None:
    """A clear error for a masked array where a mask has no meaning."""
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a masked array, which has no meaning here; pass {name}.filled(value) "
            "or a plain ndarray"
        )


def fill_identity(fn: Any, ident: Leaves | None, leaves: Leaves, mask: np.ndarray,
                  paths: Sequence[str]) -> Leaves:  # fmt: skip
    """``leaves`` with each masked element replaced by the identity: the monoid's own, or
    ``identity=`` for a plain callable (required then)."""
    if isinstance(fn, Monoid):
        fill_with = list(fn.identity(leaves[0].dtype))
    elif ident is not None:
        fill_with = [np.asarray(e) for e in ident]
    else:
        raise ValueError(
            f"{paths[0]} is a masked array: masked elements count as the identity, so a "
            "plain fn needs identity= (the e with fn(e, x) == x), or fill the masks "
            "first (x.filled(value))"
        )
    return fill(leaves, mask, fill_with)


def enter(
    leaves: Leaves, *, mask: np.ndarray, fn: Any, identity: Leaves | None, paths: Sequence[str]
) -> tuple[Leaves, Any]:
    """The leaves with the masked elements the identity, and the undo that masks the result."""
    return fill_identity(fn, identity, leaves, mask, paths), lambda out: remask(out, mask)
