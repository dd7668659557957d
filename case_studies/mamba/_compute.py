"""How the case study's kernels compute: in which dtype, with which fast-math flags,
and whether torch must record their graph.

Shared by the selective scan (:mod:`.scan`), the SSD scan (:mod:`.ssd`) and the
Hugging Face layers (:mod:`.hf`), each of which used to carry its own copy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

FASTMATH = {"contract", "reassoc", "nsz", "arcp"}
"""numba's fast-math flags for every kernel of the case study: contraction into FMAs,
reassociation (vectorized sums), no signed zeros, reciprocals; not ``nnan``/``ninf``,
so infs and nans keep their IEEE meaning (the tests feed them in)."""


def compute_dtype(kind: str, dtype: Any) -> Any:
    """The dtype the kernels run in for inputs of ``dtype``: float64 stays, all else float32.

    ``kind`` is :func:`propopt.arrays.array_kind`'s: ``'numpy'`` gives a
    ``np.dtype``, any other (torch on CPU or CUDA) a ``torch.dtype``.
    """
    if kind == "numpy":
        return np.dtype(np.float64 if dtype == np.float64 else np.float32)
    import torch

    return torch.float64 if dtype == torch.float64 else torch.float32


def needs_grad(tensors: Iterable[Any]) -> bool:
    """Whether torch records a graph and any of ``tensors`` (None skipped) requires a gradient."""
    import torch

    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
