"""Argument checks and dtype views shared by ``topk``, ``TopK`` and their backends.

Scores are bool, integer or float.  Besides NumPy's own dtypes that covers
the ml_dtypes scalar types (``bfloat16``, the ``float8_*``, ``float6_*`` and
``float4_*`` families, ``int4`` and the like): NumPy files most of them under
kind ``'V'`` (void), like structured dtypes, so the kind alone cannot tell a
``bfloat16`` from a record, and casting a record to ``int32`` silently ranks
garbage.  :func:`score_kind` decides from ``ml_dtypes.finfo`` /
``ml_dtypes.iinfo`` instead, and every other void dtype is refused.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ... import _kinds
from ...arrays import shown

NanPolicy = Literal["ignore", "largest"]
NAN_POLICIES: tuple[str, ...] = ("ignore", "largest")

#: Ids are int64: positional ids must stay in ``[ID_MIN, ID_MAX]``.
ID_MIN = -(2**63)
ID_MAX = 2**63 - 1


def check_k(k: Any, least: int = 0) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {shown(k)}")
    if k < least:
        raise ValueError(f"k={k}: k must be >= {least}")
    return int(k)


def check_nan(nan: Any) -> bool:
    if nan not in NAN_POLICIES:
        raise ValueError(f"nan={nan!r} is not one of {', '.join(map(repr, NAN_POLICIES))}")
    return bool(nan == "largest")


def check_id(value: Any, name: str, what: str) -> int:
    """``value`` as a Python int that fits int64, or a one-line error naming ``name``.

    Floats are refused even when whole: ``start=1.5`` must not become 1.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"{name}={shown(value)}: must be an int ({what}), got {type(value).__name__}; "
            f"pass a whole number such as {name}=0"
        )
    v = int(value)
    if not ID_MIN <= v <= ID_MAX:
        raise ValueError(
            f"{name}={v}: ids are int64, so {name} must lie in [-2**63, 2**63 - 1]; "
            f"pass a smaller {name}"
        )
    return v


def check_ids_fit(first: int, n: int, name: str) -> None:
    """Positional ids ``first .. first + n - 1`` must fit int64 (no wrap-around)."""
    if n and first + n - 1 > ID_MAX:
        raise ValueError(
            f"{name}: numbering {n} scores from id {first} would reach id {first + n - 1}, "
            f"past the largest int64 id 2**63 - 1 = {ID_MAX}; start the stream lower "
            "(TopK.empty(..., start=)), pass a lower offset= or explicit ids="
        )


def _extension_kind(dt: np.dtype) -> str | None:
    """``'f'`` or ``'i'`` for an ml_dtypes scalar type (``bfloat16``, ``int4``, ...), else None."""
    if not dt.type.__module__.startswith("ml_dtypes"):
        return None
    import ml_dtypes

    try:
        ml_dtypes.finfo(dt)
        return "f"
    except (TypeError, ValueError):
        pass
    try:
        ml_dtypes.iinfo(dt)
        return "i"
    except (TypeError, ValueError):
        return None


def score_kind(dt: np.dtype) -> str | None:
    """How a dtype's scores compare: ``'b'``, ``'i'``, ``'u'``, ``'f'``, or None if they cannot.

    ml_dtypes floats are ``'f'`` (NaN and infinities where the format has
    them) and ml_dtypes integers ``'i'``; both widen exactly to ``float32``
    and ``int32``.
    """
    if dt.kind in "biuf" and dt.itemsize <= 8 and dt.names is None:
        ext = _extension_kind(dt)  # float8_e5m2 says kind 'f'
        return ext if ext is not None else dt.kind
    if dt.kind == "V" and dt.names is None and dt.subdtype is None:
        return _extension_kind(dt)
    return None


def dtype_name(dt: np.dtype) -> str:
    """How to spell ``dt`` in a fix: ``np.float32``, ``ml_dtypes.bfloat16``."""
    if _extension_kind(dt) is not None:
        return f"ml_dtypes.{dt.name}"
    return f"np.{dt.name}"


def check_dtype(dtype: Any) -> np.dtype:
    """A score dtype, in native byte order; others raise one line naming the fix."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype={dtype!r} is not a NumPy dtype") from exc
    if score_kind(dt) is None:
        if dt.kind == "V":
            raise TypeError(
                f"dtype={dt} is a structured or raw-bytes dtype, not a score; top-k ranks "
                "bool, integer and float scores (pick one field, e.g. x['score'], or view "
                "the bytes as a number dtype)"
            )
        raise TypeError(
            f"dtype={dt} cannot be ranked; top-k takes bool, integer and float scores "
            "(cast complex or object scores to a real dtype first)"
        )
    return dt if dt.isnative else dt.newbyteorder("=")


def kernel_view(x: np.ndarray) -> np.ndarray:
    """Scores in one of the four dtypes the kernels are compiled for, same order.

    Non-native byte order is swapped first.  Floats narrower than float32
    (float16 and every ml_dtypes float) -> float32 and small integers
    (ml_dtypes ones included) -> int32, both exact; uint32 -> int64;
    uint64 -> int64 with the top bit flipped (order preserving).  Any other
    dtype is an error, never a cast.
    """
    dt = x.dtype
    if not dt.isnative:
        dt = dt.newbyteorder("=")
        x = x.astype(dt)
    if dt in (np.float32, np.float64, np.int32, np.int64):
        return x
    kind = score_kind(dt)
    if kind == "f":
        return x.astype(np.float32)
    if dt == np.uint64:
        return (x ^ np.uint64(1 << 63)).view(np.int64)
    if dt == np.uint32:
        return x.astype(np.int64)
    if kind in ("b", "i", "u"):
        return x.astype(np.int32)
    check_dtype(dt)  # raises for every dtype that has no kernel view
    raise TypeError(f"dtype={dt} has no top-k kernel view")  # pragma: no cover


def is_float(dt: np.dtype) -> bool:
    """Scores of this dtype may be NaN (NumPy and ml_dtypes floats)."""
    return score_kind(dt) == "f"


def mask_of(x: Any) -> np.ndarray | None:
    """The mask of a masked array with at least one masked entry, else None."""
    if isinstance(x, np.ma.MaskedArray) and np.ma.is_masked(x):
        return np.ma.getmaskarray(x)
    return None


def as_numpy_1d(x: Any, name: str) -> np.ndarray:
    """A 1-D NumPy array (base class; a mask is read separately with :func:`mask_of`)."""
    kind = _kinds.array_kind(x)
    if kind == _kinds.TORCH_CUDA:
        x = x.detach().cpu()
        kind = _kinds.TORCH
    a = torch_numpy(x, keep_dtype=True) if kind == _kinds.TORCH else np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}; flatten it first (.ravel())")
    return a


def torch_narrow_float(t: Any) -> bool:
    """A torch float type NumPy lacks (bfloat16, the float8 family): ranked as float32."""
    import torch

    return bool(t.dtype.is_floating_point and t.dtype != torch.float16 and t.element_size() < 4)


def torch_numpy(t: Any, keep_dtype: bool = False) -> np.ndarray:
    """A NumPy array of a CPU tensor's scores: a view, or an exact float32 copy.

    NumPy has no bfloat16 or float8: with ``keep_dtype`` they come back as the
    ml_dtypes array of the same bits when ml_dtypes has the type, else (and
    without ``keep_dtype``) as float32, which holds every value exactly.
    """
    import torch

    t = t.detach()
    if not torch_narrow_float(t):
        return np.asarray(t.numpy())
    if keep_dtype:
        try:
            import ml_dtypes

            np_type = getattr(ml_dtypes, str(t.dtype).replace("torch.", ""))
            bits = getattr(torch, f"int{8 * t.element_size()}")
            return np.asarray(t.view(bits).numpy().view(np_type))
        except (ImportError, AttributeError):
            pass
    return np.asarray(t.float().numpy())


def torch_gather(x: Any, ax: int, idx: Any) -> Any:
    """``torch.gather(x, ax, idx)``, also for the dtypes torch cannot gather.

    torch 2.x has no gather for uint16/32/64 or the float8 types ("not
    implemented for 'UInt64'"): those are gathered through a signed integer
    view of the same bits.
    """
    import torch

    unsigned = str(x.dtype).replace("torch.", "") in ("uint16", "uint32", "uint64")
    if not unsigned and not (x.dtype.is_floating_point and x.element_size() == 1):
        return torch.gather(x, ax, idx)
    bits = getattr(torch, f"int{8 * x.element_size()}")
    return torch.gather(x.view(bits), ax, idx).view(x.dtype)


def score_dtype(x: Any) -> np.dtype:
    """The NumPy dtype of ``x``'s scores (torch bfloat16 and float8 rank as float32)."""
    if isinstance(x.dtype, np.dtype):
        return x.dtype
    if _kinds.array_kind(x) in (_kinds.TORCH, _kinds.TORCH_CUDA) and torch_narrow_float(x):
        return np.dtype(np.float32)
    try:
        return np.dtype(str(x.dtype).replace("torch.", ""))
    except TypeError:
        return np.dtype(object)
