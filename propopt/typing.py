"""Type aliases shared across propopt."""

from __future__ import annotations

from typing import Any, Literal

ScanMethod = Literal["auto", "tiled", "native", "generic", "reference"]
"""Algorithms of :func:`propopt.associative_scan` (``method=``)."""

Device = Literal["auto", "cpu", "cuda", "dask"]
"""Where a verb runs (``device=``): ``'auto'`` is where its arrays are."""

ArrayLike = Any
"""A NumPy array, torch tensor, CUDA device array or dask array."""
