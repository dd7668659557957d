"""Which kind of array a value is, and where it lives.

propopt accepts NumPy arrays, torch tensors (CPU and CUDA), numba CUDA device
arrays (anything with ``__cuda_array_interface__``) and dask arrays.  torch
and dask are optional: they are only imported when a value of theirs is seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

NUMPY = "numpy"
TORCH = "torch"  # torch tensor on the CPU
TORCH_CUDA = "torch-cuda"
CUDA = "cuda"  # numba device array, CuPy array or any __cuda_array_interface__
DASK = "dask"


def _module_root(x: Any) -> str:
    return type(x).__module__.split(".", 1)[0]


def array_kind(x: Any) -> str | None:
    """Return the kind of array ``x`` is, or ``None`` if it is not one we take."""
    if isinstance(x, np.ndarray):
        return NUMPY
    root = _module_root(x)
    if root == "torch":
        import torch

        if isinstance(x, torch.Tensor):
            return TORCH_CUDA if x.is_cuda else TORCH
    if root == "dask" and hasattr(x, "chunks") and hasattr(x, "dask"):
        return DASK
    if hasattr(x, "__cuda_array_interface__"):
        return CUDA
    if root == "numba" and hasattr(x, "copy_to_host"):  # simulator device arrays
        return CUDA
    return None


def describe(x: Any) -> str:
    """A short description of an array for error messages."""
    kind = array_kind(x)
    shape = tuple(getattr(x, "shape", ()))
    dtype = getattr(x, "dtype", None)
    if kind == TORCH_CUDA:
        return f"torch.Tensor(device={x.device}, dtype={dtype}, shape={shape})"
    name = f"{type(x).__module__.split('.')[0]}.{type(x).__name__}"
    return f"{name}(dtype={dtype}, shape={shape})"


def device_of(x: Any) -> str:
    """``'cpu'`` or ``'cuda:N'``: used to refuse pytrees that mix devices."""
    kind = array_kind(x)
    if kind == TORCH_CUDA:
        return str(x.device)
    if kind == CUDA:
        return "cuda"
    return "cpu"


#: the ``device=`` an array kind lives on
PLACES: dict[str, str] = {
    NUMPY: "cpu",
    TORCH: "cpu",
    TORCH_CUDA: "cuda",
    CUDA: "cuda",
    DASK: "dask",
}


def common_kind(leaves: Sequence[Any], paths: Sequence[str]) -> str:
    """The one array kind shared by all ``leaves``, or a clear error."""
    kinds = []
    for leaf, path in zip(leaves, paths):
        kind = array_kind(leaf)
        if kind is None:
            raise TypeError(
                f"{path} is a {type(leaf).__name__}, not an array; pass NumPy arrays, "
                "torch tensors, CUDA device arrays or dask arrays (wrap lists with "
                "np.asarray)"
            )
        kinds.append(kind)
    first = kinds[0]
    for kind, leaf, path in zip(kinds, leaves, paths):
        if kind != first or device_of(leaf) != device_of(leaves[0]):
            raise ValueError(
                f"elems mixes array types or devices: {paths[0]} is {describe(leaves[0])} "
                f"but {path} is {describe(leaf)}; move every leaf to one library and "
                "device first (e.g. tensor.to(device) or np.asarray)"
            )
    return first


def to_numpy_view(x: Any) -> np.ndarray:
    """A NumPy view of a CPU array (torch CPU tensors share memory)."""
    if isinstance(x, np.ndarray):
        return x
    return x.detach().numpy()


#: the half-precision float dtypes, by name
HALF_NAMES = ("float16", "bfloat16")


def half_name(dtype: Any) -> str | None:
    """``'float16'`` or ``'bfloat16'`` for a NumPy, ml_dtypes or torch half dtype, else None."""
    name = str(dtype).replace("torch.", "")
    if name in ("half", "float16"):
        return "float16"
    return name if name in HALF_NAMES else None
