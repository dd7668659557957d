"""Hugging Face transformers' Mamba and Mamba-2 models on propopt's kernels.

:mod:`.core` holds :func:`accelerate` and its undo (the mixers' forwards);
``_kernels.py`` the numba kernels of the layer around the scan (conv1d,
norms, the decode step).
"""

from .core import accelerate, is_accelerated, is_usable_for, restore

__all__ = ["accelerate", "is_accelerated", "is_usable_for", "restore"]
