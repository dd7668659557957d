"""Which kind of array a value is, and where it lives.

propopt accepts NumPy arrays, torch tensors (CPU and CUDA), numba CUDA device
arrays (anything with ``__cuda_array_interface__``) and dask arrays.  torch
and dask are optional: they are only imported when a value of theirs is seen.
The verbs that take jax and CuPy arrays (``associative_scan``, ``topk``)
see them as :data:`FOREIGN` kinds (:func:`foreign_kind`) and pass them
through DLPack (``propopt._dlpack``).
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
JAX = "jax"  # jax array on the CPU: scanned as a NumPy view (DLPack)
JAX_CUDA = "jax-cuda"  # jax array on a GPU: as a torch CUDA tensor (DLPack)
CUPY = "cupy"  # CuPy array, where torch is installed: as a torch CUDA tensor (DLPack)

#: a foreign kind -> the kind its arrays are computed as, after DLPack
FOREIGN: dict[str, str] = {JAX: NUMPY, JAX_CUDA: TORCH_CUDA, CUPY: TORCH_CUDA}


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


def foreign_kind(x: Any) -> str | None:
    """:data:`JAX`, :data:`JAX_CUDA` or :data:`CUPY` for an array taken through DLPack."""
    root = _module_root(x)
    if root in ("jax", "jaxlib") and hasattr(x, "__dlpack__") and hasattr(x, "devices"):
        platforms = {d.platform for d in x.devices()}
        return JAX if platforms == {"cpu"} else JAX_CUDA
    if root == "cupy" and hasattr(x, "__dlpack__") and _has_torch():
        return CUPY  # (without torch, numba takes it as a CUDA device array)
    return None


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


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
    if foreign_kind(x) == JAX_CUDA:
        return ",".join(sorted(str(d) for d in x.devices()))
    return "cpu"


#: the ``device=`` an array kind lives on
PLACES: dict[str, str] = {
    NUMPY: "cpu",
    TORCH: "cpu",
    TORCH_CUDA: "cuda",
    CUDA: "cuda",
    DASK: "dask",
    JAX: "cpu",
    JAX_CUDA: "cuda",
    CUPY: "cuda",
}


def common_kind(leaves: Sequence[Any], paths: Sequence[str], foreign: bool = False) -> str:
    """The one array kind shared by all ``leaves``, or a clear error.

    ``foreign``: jax and CuPy arrays are taken too, as their :func:`foreign_kind`.
    """
    if all(isinstance(leaf, np.ndarray) for leaf in leaves):
        return NUMPY  # the common case, in a fraction of the general test's time
    kinds = []
    for leaf, path in zip(leaves, paths):
        kind = (foreign_kind(leaf) if foreign else None) or array_kind(leaf)
        if kind is None:
            also = "jax arrays, " if foreign else ""
            raise TypeError(
                f"{path} is a {type(leaf).__name__}, not an array; pass NumPy arrays, "
                f"torch tensors, {also}CUDA device arrays or dask arrays (wrap lists with "
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
    if isinstance(dtype, np.dtype):
        if dtype.itemsize != 2:
            return None  # (str() of a NumPy dtype costs microseconds on every scan)
        name = dtype.name  # 'float16' in either byte order ('>f2' from str())
    else:
        name = str(dtype).replace("torch.", "")
    if name in ("half", "float16"):
        return "float16"
    return name if name in HALF_NAMES else None
