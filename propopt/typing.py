"""Type aliases shared across propopt."""

from __future__ import annotations

from typing import Any, Literal

ScanMethod = Literal["auto", "reference", "generic", "cpu", "cuda", "torch", "dask"]
"""Backends of :func:`propopt.associative_scan`."""

ArrayLike = Any
"""A NumPy array, torch tensor, CUDA device array or dask array."""
