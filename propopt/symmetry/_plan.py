"""``PairPlan``: a validated pair sum, what every backend of :mod:`.pairs` receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
