"""``ScanPlan``: a validated scan, what every backend of :mod:`._backends` receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import _kinds, _validate
from ..monoid import Combine, Monoid
from . import _identity

Leaves = list[Any]


@dataclass(frozen=True)
class ScanPlan:
    """A validated scan: what every backend receives.

    ``combine`` is ``fn`` lifted to lists of leaves; ``identity`` holds one
    element per leaf for a plain callable (or ``None`` where it is not needed);
    :meth:`identity_leaves` gives a monoid's own to the backends that need it.
    ``out``: NumPy arrays the CPU kernels write the result into (``out=``), or None.
    """

    fn: Combine
    combine: Callable[[Leaves, Leaves], Leaves]
    leaves: Leaves
    kind: str
    axis: int
    reverse: bool
    exclusive: bool
    identity: Leaves | None = None
    out: Leaves | None = None

    @property
    def needs_grad(self) -> bool:
        return any(getattr(x, "requires_grad", False) for x in self.leaves)

    @property
    def is_monoid(self) -> bool:
        return isinstance(self.fn, Monoid)

    @property
    def on_gpu(self) -> bool:
        return self.kind in (_kinds.TORCH_CUDA, _kinds.CUDA)

    @property
    def np_dtype(self) -> np.dtype | None:
        return _validate.np_dtype(self.leaves[0].dtype)

    @property
    def length(self) -> int:
        """The number of elements along the axis."""
        return int(self.leaves[0].shape[self.axis])

    def identity_leaves(self) -> Leaves:
        """The identity, one element per leaf: ``identity``, else the monoid's own."""
        if self.identity is not None:
            return self.identity
        if not isinstance(self.fn, Monoid):
            raise ValueError("an exclusive scan of a plain callable needs identity=")
        return _identity.of_monoid(self.fn, self.leaves, self.axis)

    def described(self) -> str:
        return _kinds.describe(self.leaves[0])
