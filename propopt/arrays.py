"""What kind of array a value is, and the checks of point and per-point arrays.

Public so that code built on propopt (the case studies first) validates its
inputs as the verbs do, with the same one-line errors:

* :func:`array_kind` and :func:`array_module`: NumPy, torch (CPU or CUDA),
  CUDA device arrays, dask;
* :func:`points`: an ``(n, d)`` array of finite real coordinates;
* :func:`per_point`: one finite value per point (or a scalar for all);
* :func:`count`: an int >= 1;
* :func:`flag`: a bool (``'no'`` is refused, not read as true);
* :func:`real`: a real number (a NumPy scalar or 0-d array too; not a bool,
  a string or a complex number);
* :func:`generator`: a NumPy random generator from a ``seed=`` argument;
* :func:`inexact`: where a cast would round integers (``2**53 + 1`` to float64);
* :func:`frozen`: a read-only view, so that a kernel compiles once for
  writeable and read-only inputs alike;
* :func:`renamed`: a decorator that takes an old keyword as its new name, with
  a ``DeprecationWarning``.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np

from ._kinds import CUDA, DASK, NUMPY, PLACES, TORCH, TORCH_CUDA, array_kind, describe
from ._memory import mapped_empty

__all__ = [
    "CUDA",
    "DASK",
    "NUMPY",
    "PLACES",
    "TORCH",
    "TORCH_CUDA",
    "array_kind",
    "array_module",
    "as_numpy",
    "count",
    "describe",
    "flag",
    "frozen",
    "generator",
    "inexact",
    "mapped_empty",
    "per_point",
    "plain",
    "points",
    "real",
    "renamed",
    "shown",
]


def array_module(x: Any) -> Any:
    """``torch`` for a torch tensor, else ``numpy``: the library whose ops ``x`` takes."""
    if array_kind(x) in (TORCH, TORCH_CUDA):
        import torch

        return torch
    return np


def as_numpy(x: Any) -> Any:
    """A torch CPU tensor as a NumPy view; anything else unchanged.

    bfloat16, which NumPy lacks, becomes a float32 copy.
    """
    if array_kind(x) != TORCH:
        return x
    if str(x.dtype) == "torch.bfloat16":
        x = x.float()
    return x.detach().numpy()


def plain(name: str, x: Any) -> np.ndarray:
    """A plain ndarray of ``x``, native byte order; half floats of ml_dtypes as float32.

    A masked array is refused: its mask has no meaning for points or weights.
    """
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a masked array, whose mask would be ignored here; pass "
            f"{name}.filled(value), or drop the masked rows first"
        )
    a = np.asarray(as_numpy(x))
    if a.dtype.kind == "V" and _is_ml_float(a.dtype):
        a = a.astype(np.float32)  # bfloat16 and friends: exact in float32
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def _is_ml_float(dtype: np.dtype) -> bool:
    """An ml_dtypes floating-point type (bfloat16, float8_*): kind 'V' in NumPy."""
    try:
        import ml_dtypes
    except ImportError:
        return False
    try:
        ml_dtypes.finfo(dtype)
    except (ValueError, TypeError):
        return False
    return True


def points(name: str, X: Any, dim: int | None = None, *, allow_empty: bool = True) -> np.ndarray:
    """Validate an ``(n, d)`` point array: float32/float64, finite; errors name the index.

    Integers and booleans are cast to float64, float16 and bfloat16 to
    float32 (exactly); a torch CPU tensor is viewed.
    The result is C-contiguous.
    """
    a = plain(name, X)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"{name} has dtype {a.dtype}: pass real coordinates (float32 or float64)")
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float32 if a.dtype.kind == "f" and a.dtype.itemsize < 4 else np.float64)
    if a.ndim != 2 or (dim is not None and a.shape[1] != dim):
        want = f"(n, {dim})" if dim is not None else "(n, d)"
        fix = " (one point per row)" if a.ndim == 1 else ""
        raise ValueError(f"{name} has shape {a.shape}: must be {want} points{fix}")
    if a.shape[1] < 1:
        raise ValueError(f"{name} has shape {a.shape}: points need at least one coordinate")
    if a.shape[0] == 0 and not allow_empty:
        raise ValueError(f"{name} is empty (shape {a.shape}): pass at least one point")
    if a.size and not np.isfinite(a).all():
        i = int(np.argmax(~np.isfinite(a).all(axis=1)))
        raise ValueError(
            f"{name}[{i}] = {a[i].tolist()} is not finite: coordinates must be finite "
            "(drop or fix that point)"
        )
    return np.ascontiguousarray(a)


def per_point(
    name: str, v: Any, n: int, default: float, what: str = "values", *, nonnegative: bool = True
) -> np.ndarray:
    """``(n,)`` float64: ``default`` for ``None``, a scalar for all, or one finite value each.

    ``what`` names the values in the error (``'masses'``, ``'softening lengths'``).
    """
    if v is None:
        return np.full(n, float(default))
    a = plain(name, v)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"{name} has dtype {a.dtype}: pass real numbers")
    if a.ndim == 0:
        a = np.full(n, a.item(), dtype=np.float64)
    if a.shape != (n,):
        raise ValueError(f"{name} has shape {a.shape}: must be a scalar or ({n},), one per point")
    a = a.astype(np.float64, copy=False)
    bad = ~np.isfinite(a) | ((a < 0) if nonnegative else False)
    if np.any(bad):
        i = int(np.argmax(bad))
        rule = "finite and >= 0" if nonnegative else "finite"
        raise ValueError(f"{name}[{i}] = {a[i]}: {what} must be {rule}")
    return np.ascontiguousarray(a)


def shown(v: Any, limit: int = 60) -> str:
    """``v`` as an error message shows it: one line of at most ``limit`` characters.

    An array of several values is described by its shape and dtype (NumPy's
    repr of a large array spans several lines); any other repr is cut.
    """
    shape = getattr(v, "shape", None)
    if shape is not None and hasattr(v, "dtype") and int(np.prod(shape)) > 1:
        return f"<array of shape {tuple(shape)}, dtype {v.dtype}>"
    r = " ".join(repr(v).split())
    return r if len(r) <= limit else r[: limit - 3] + "..."


def count(name: str, v: Any, least: int = 1) -> int:
    """An int >= ``least`` (a size, a chunk length, a ``k``), or an error naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
        raise ValueError(f"{name}={shown(v)}: must be an int >= {least}")
    return int(v)


def flag(name: str, v: Any) -> bool:
    """``v`` as a bool, or a one-line error naming ``name``: only ``True`` / ``False``.

    A string such as ``'no'`` is truthy, and an int such as ``2`` is not a
    switch: both are refused instead of silently switching the option on.
    ``np.bool_`` and 0-d bool arrays are taken.
    """
    if isinstance(v, (bool, np.bool_)) or (
        isinstance(v, np.ndarray) and v.shape == () and v.dtype == bool
    ):
        return bool(v)
    raise TypeError(f"{name}={shown(v)}: must be True or False")


def real(name: str, v: Any) -> float:
    """``v`` as a Python float, or a one-line error naming ``name``.

    Takes an int or a float, a NumPy integer or float scalar, or a 0-d
    array of one (``np.float32(2)``, ``np.array(2.0)``).  A bool, a string,
    a complex number or an array of several values is refused.  Finiteness
    and range are the caller's to check (with the meaning of the value in
    the message).
    """
    a = v
    if isinstance(v, np.ndarray) and v.shape == ():
        a = v[()]  # the array's scalar: np.float64, np.int32...
    if isinstance(a, (bool, np.bool_)):
        raise TypeError(f"{name}={shown(v)}: must be a real number, not a bool")
    if not isinstance(a, (int, float, np.integer, np.floating)):
        if isinstance(v, np.ndarray):
            kind = f"an array of shape {v.shape}, dtype {v.dtype}"
        else:
            kind = f"dtype {a.dtype}" if isinstance(a, np.generic) else type(v).__name__
        raise TypeError(f"{name}={shown(v)}: must be a real number (an int or a float), got {kind}")
    try:
        return float(a)
    except OverflowError:  # a Python int beyond float64
        raise ValueError(f"{name}={str(v)[:12]}... ({len(str(v))} digits): too large for "
                         "a float (beyond 1.8e308)") from None  # fmt: skip


def generator(name: str, seed: Any) -> np.random.Generator:
    """``np.random.default_rng(seed)``, or a one-line error naming ``name``.

    ``seed`` is None, an int >= 0, a ``SeedSequence`` or bit generator, or a
    ``Generator`` (returned as is).
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, (np.random.SeedSequence, np.random.BitGenerator)):
        return np.random.default_rng(seed)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(
            f"{name}={seed!r}: must be None, an int >= 0 or a numpy Generator, got "
            f"{type(seed).__name__}"
        )
    if seed < 0:
        raise ValueError(f"{name}={seed}: must be an int >= 0 (numpy seeds are non-negative)")
    return np.random.default_rng(int(seed))


def inexact(x: np.ndarray, dtype: Any) -> int | None:
    """The flat index of the first integer of ``x`` that ``dtype`` (a float) cannot hold
    exactly, or None; None for non-integer ``x``.

    ``int64`` and ``uint64`` values above ``2**53`` round in float64 (and
    above ``2**24`` in float32): a cast that changes data without a word.
    Vectorized: the values are cast, cast back and compared.
    """
    a = np.asarray(x)
    dt = np.dtype(dtype)
    if a.dtype.kind not in "iu" or a.size == 0:
        return None
    bits = a.dtype.itemsize * 8 - (a.dtype.kind == "i")
    if dt.kind == "f" and bits <= np.finfo(dt).nmant + 1:
        return None  # every value of the integer dtype is exact in dt
    with np.errstate(all="ignore"):
        f = a.astype(dt).astype(np.float64)
    top = 2.0**bits  # exact in float64; the integer dtype holds values below it
    inside = (f < top) & (f >= -top)
    back = np.where(inside, f, 0).astype(a.dtype)
    bad = ~(inside & (back == a))
    return int(np.argmax(bad.ravel())) if bad.any() else None


def renamed(**old_to_new: str) -> Any:
    """Decorator: take each old keyword ``old=`` as ``new=``, with a ``DeprecationWarning``.

    ``@renamed(positions="pos")``: ``f(positions=x)`` warns
    ``f(positions=...) is deprecated: pass pos=...`` and calls ``f(pos=x)``;
    passing both is a ``TypeError``.
    """

    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(
                            f"{fn.__name__}() got both {old}= and {new}=: pass {new}= only"
                        )
                    warnings.warn(
                        f"{fn.__name__}({old}=...) is deprecated: pass {new}=...",
                        DeprecationWarning,
                        stacklevel=2,
                    )
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return inner

    return wrap


def frozen(a: Any) -> Any:
    """``a`` as a read-only view: a kernel's inputs are typed read-only whatever the caller held.

    numba compiles one specialization per argument type, and a read-only
    array (a pandas column, a Dask chunk, a broadcast, a memory map) is a
    different type from a writeable one.  Passing every input read-only
    gives one compilation where there were two (topk_one: 3-12 s each).
    """
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v
