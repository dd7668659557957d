"""The one-line verdict every law audit prints (associativity, symmetry, ...)."""

from __future__ import annotations

import math


def verdict(
    head: str,
    ok: bool,
    trials: int,
    samples: str,
    worst: float,
    max_abs: float,
    rtol: float,
    atol: float,
) -> str:
    """``<head>: holds on ...`` or ``<head>: FAILS on ...: worst violation ...``."""
    tol = f"rtol={rtol:g}, atol={atol:g}"
    if ok:
        return (
            f"{head}: holds on {trials} {samples} (worst |difference| {max_abs:.3g}, "
            f"{worst:.3g} of the tolerance {tol})"
        )
    how = (
        "a difference where none is tolerated"
        if math.isinf(worst)
        else f"{worst:.3g} times the tolerance"
    )
    return (
        f"{head}: FAILS on {trials} {samples}: worst violation {how} "
        f"(worst |difference| {max_abs:.3g}, {tol})"
    )
