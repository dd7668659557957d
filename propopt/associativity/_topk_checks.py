"""Argument checks and dtype views shared by ``topk``, ``TopK`` and their backends."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .. import _dispatch

NanPolicy = Literal["ignore", "largest"]
NAN_POLICIES: tuple[str, ...] = ("ignore", "largest")


def check_k(k: Any, least: int = 1) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {k!r}")
    if k < least:
        raise ValueError(f"k={k}: k must be >= {least}")
    return int(k)


def check_nan(nan: Any) -> bool:
    if nan not in NAN_POLICIES:
        raise ValueError(f"nan={nan!r} is not one of {', '.join(map(repr, NAN_POLICIES))}")
    return bool(nan == "largest")


def check_dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype={dtype!r} is not a NumPy dtype") from exc
    if dt.kind not in "biuf" or dt.itemsize > 8:
        raise TypeError(
            f"dtype={dt} cannot be ranked; top-k takes bool, integer and float scores "
            "(cast complex or object scores to a real dtype first)"
        )
    return dt


def kernel_view(x: np.ndarray) -> np.ndarray:
    """Scores in one of the four dtypes the kernels are compiled for, same order.

    float16 -> float32 and small integers -> int32 (exact); uint32 -> int64;
    uint64 -> int64 with the top bit flipped (order preserving).
    """
    dt = x.dtype
    if dt in (np.float32, np.float64, np.int32, np.int64):
        return x
    if dt.kind == "f":
        return x.astype(np.float32)
    if dt == np.uint64:
        return (x ^ np.uint64(1 << 63)).view(np.int64)
    if dt == np.uint32:
        return x.astype(np.int64)
    return x.astype(np.int32)


def as_numpy_1d(x: Any, name: str) -> np.ndarray:
    kind = _dispatch.array_kind(x)
    if kind == _dispatch.TORCH_CUDA:
        x = x.detach().cpu()
        kind = _dispatch.TORCH
    a = _dispatch.to_numpy_view(x) if kind == _dispatch.TORCH else np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}; flatten it first (.ravel())")
    return a


def score_dtype(x: Any) -> np.dtype:
    name = str(x.dtype).replace("torch.", "")
    if name == "bfloat16":
        return np.dtype(np.float32)
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(object)
