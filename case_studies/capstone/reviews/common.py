"""What the reviews share: the device label, errors of each kind, GPU rows, skipping."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from propopt.threads import usable_cpus

from ..rows import Row


class Skipped(Exception):
    """A review that cannot run here (an optional peer library is missing): its one-line reason.

    The run goes on without the review's rows and reports the reason after the table.
    """


def cpu_device() -> str:
    return f"cpu ({usable_cpus()} cores)"


def max_rel(got: Any, exact: np.ndarray) -> float:
    """``max |got - exact| / max |exact|`` against a float64 answer."""
    g = np.asarray(got.cpu() if hasattr(got, "cpu") else got, dtype=np.float64)
    scale = float(np.max(np.abs(exact))) or 1.0
    return float(np.max(np.abs(g - exact)) / scale)


def median_rel(a: np.ndarray, a0: np.ndarray) -> float:
    """Median over rows of ``|a - a0| / |a0|`` (accelerations at targets)."""
    return float(np.median(np.linalg.norm(a - a0, axis=1) / np.linalg.norm(a0, axis=1)))


def gpu_name() -> str | None:
    """Name of the CUDA GPU torch can use, or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name(0))


def gpu_rows(problem: str, make: Callable[[str], list[Row]]) -> list[Row]:
    """The rows ``make(device)`` measures on the GPU when torch sees one, else ``[]``.

    A GPU row that fails (a driver or toolkit the kernels cannot use) is a
    warning naming the problem and the error; the CPU rows stand.
    """
    from ..measure import compiling_only

    name = gpu_name()
    if name is None or compiling_only():
        return []
    try:
        return make(f"cuda ({name})")
    except Exception as e:  # reported below; the CPU rows stand
        warnings.warn(
            f"{problem}: the GPU row failed on {name} ({type(e).__name__}: {e}); "
            "the table has the CPU rows only",
            RuntimeWarning,
            stacklevel=2,
        )
        return []
