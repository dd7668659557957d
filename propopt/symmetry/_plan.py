"""``PairPlan``: a validated pair sum, what every backend of :mod:`.pairs` receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np


@dataclass
class PairPlan:
    """A validated pair sum: what every backend receives (one signature for all)."""

    kernel: Callable[..., Any]
    X: np.ndarray
    w: np.ndarray
    args: tuple[Any, ...]
    k: int
    scalar: bool
    signs: tuple[float, ...]
    T: np.ndarray | None
    tile: int | None

    @property
    def form(self) -> Form:
        """What the generated drivers depend on, beside the kernel itself."""
        return Form(self.k, self.scalar, self.signs, len(self.args), self.X.shape[1])


class Form(NamedTuple):
    """The form of a pair kernel: ``k`` outputs (``scalar``: a float, not a tuple),
    the sign each output takes under a swap of the pair, ``nargs`` extra arguments,
    ``d`` coordinates."""

    k: int
    scalar: bool
    signs: tuple[float, ...]
    nargs: int
    d: int
