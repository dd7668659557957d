"""``ScanPlan``: a validated scan, what every backend of :mod:`._backends` receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import _kinds, _validate
from ..monoid import Combine, Monoid

Leaves = list[Any]


@dataclass
class ScanPlan:
    """A validated scan: what every backend receives.

    ``combine`` is ``fn`` lifted to lists of leaves; ``identity`` holds one
    element per leaf (or ``None`` where it is not needed or not known).
    """

    fn: Combine
    combine: Callable[[Leaves, Leaves], Leaves]
    leaves: Leaves
    kind: str
    axis: int
    reverse: bool
    exclusive: bool
    identity: Leaves | None = None
    needs_grad: bool = field(init=False)
    #: NumPy arrays the CPU kernels write the result into (``out=``), or None
    out: Leaves | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.needs_grad = any(getattr(x, "requires_grad", False) for x in self.leaves)

    @property
    def is_monoid(self) -> bool:
        return isinstance(self.fn, Monoid)

    @property
    def on_gpu(self) -> bool:
        return self.kind in (_kinds.TORCH_CUDA, _kinds.CUDA)

    @property
    def np_dtype(self) -> np.dtype | None:
        return _validate.np_dtype(self.leaves[0].dtype)

    def described(self) -> str:
        return _kinds.describe(self.leaves[0])
