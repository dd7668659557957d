"""Top-k as a mergeable summary: ``TopK`` and the ``topk`` verb.

The law: for multisets ``A``, ``B``, ``C`` of ``(score, id)`` pairs,
``top_k(A ∪ B) == merge_topk(top_k(A), top_k(B))``, and ``merge_topk`` is associative
and commutative::

    merge_topk(merge_topk(a, b), c) == merge_topk(a, merge_topk(b, c))
    merge_topk(a, b) == merge_topk(b, a)

because the order used is *total*: ``(s, i)`` ranks before ``(t, j)`` when
``s`` is better than ``t`` (larger, or smaller with ``largest=False``), or
``s == t`` and ``i < j``.  A total order makes the k best of any multiset
unique, so the answer does not depend on how the data were chunked, how many
threads ran, or in which order summaries were merged.  That licenses chunked,
multi-threaded, streaming and distributed top-k (see the streaming top-K case
study).

NaN: ignored by default (``nan='ignore'``: a NaN is never among the best);
``nan='largest'`` ranks NaN above every number, torch's convention (so NaNs
come first with ``largest=True`` and last with ``largest=False``).

Masked arrays: a masked entry is never among the best, whatever ``nan``
(``topk``, ``TopK.update`` and so the dask reductions built on it).  Rows are
packed (unmasked entries first, in index order) and padded with a value that
ranks below every real one, so ties still go to the smaller index.  Refusing
masked arrays was the alternative; dropping the mask, as ``np.asarray``
does, returned masked values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _dlpack, _kinds, dispatch
from ..._validate import axis_in_range
from ._backends import BACKENDS, OLD_METHODS, TopKPlan, choose
from ._checks import (
    NanPolicy,
    check_dtype,
    check_k,
    check_nan,
    is_float,
    mask_of,
    score_dtype,
    score_kind,
)
from ._summary import TopK, merge_topk

__all__ = ["TopK", "merge_topk", "topk"]


def topk(
    x: Any,
    k: int,
    axis: int = -1,
    largest: bool = True,
    sorted: bool = True,
    *,
    nan: NanPolicy = "ignore",
    method: str = "auto",
    device: str = "auto",
    out: tuple[Any, Any] | None = None,
) -> tuple[Any, Any]:
    """The ``k`` best values along an axis and their indices, like ``torch.topk``.

    Ties go to the smaller index: ``(v, i)`` ranks before ``(w, j)`` when
    ``v`` is better than ``w`` (larger, or smaller with ``largest=False``), or
    ``v == w`` and ``i < j``.  The chosen set is unique for this total order,
    so it does not depend on thread count, on how the axis is split or on
    ``sorted`` (see :class:`TopK`); with ``sorted`` (the default) it comes best
    first.

    Parameters
    ----------
    x : numpy.ndarray, torch.Tensor (CPU or CUDA), jax.Array or cupy.ndarray
        Bool, integer or float values (ml_dtypes ``bfloat16``, ``float8_*``
        and the like included, ranked exactly as their float32 values).  A
        NumPy masked array never returns a masked entry (like NaN under
        ``nan='ignore'``); other ndarray subclasses (``np.matrix``, ...) are
        ranked as their plain-ndarray view and give plain ndarrays.
    k : int
        How many to return (>= 0); ``k > n`` returns all ``n``.  A 0-d ``x``
        is one value, returned as 0-d arrays for ``k`` 0 or 1, as torch does.
    axis : int
        The axis to select along.
    largest : bool
        The largest values (else the smallest).
    sorted : bool
        Best first (the default).  ``False`` returns the same ``k`` pairs in
        any order and skips the sorts: each row's winners are selected, not
        sorted (a radix sort of ``k`` keys per row saved; 1.2x for 100 rows
        of 10^5 float32 with ``k = 10^4``), and a long row's per-thread
        pieces are selected rather than merged as sorted lists; on CUDA the
        winners stay as gathered (no copy of keys and sort on the host).
    nan : {'ignore', 'largest'}
        ``'ignore'`` never returns a NaN (a 1-D input may then yield fewer
        than ``k``; an N-D input whose rows would differ in length is an
        error); ``'largest'`` ranks NaN above every number, as torch does.
    method : {'auto', 'select', 'reference'}
        The algorithm: ``'select'`` (and ``'auto'``), the threshold
        selection of the Notes (numba threads on the host, a CUDA kernel on
        the GPU); ``'reference'`` sorts on the host (tests).  The spellings
        ``'cpu'`` and ``'cuda'`` (now ``'select'`` on that device) still
        work, with a ``DeprecationWarning``.
    device : {'auto', 'cpu', 'cuda'}
        Where it runs: where ``x`` is (``'auto'``); ``topk`` never moves
        ``x``, so any other value must name that place.
    out : (values, indices), optional
        Arrays to write the result into, of the input's kind, device and
        dtype (indices int64) and the result's shape; torch tensors of another
        shape are resized, as ``torch.topk(out=...)`` does.  They are returned.

    Returns
    -------
    values, indices
        Arrays of the input's type, device and dtype (indices int64) with
        ``min(k, n)`` entries along ``axis``.  jax and CuPy arrays go in and
        come back through DLPack, without a copy where the buffer allows
        (jax without ``jax_enable_x64`` gives int32 indices).

    Notes
    -----
    ``O(n)`` work whatever the order of the input.  Each thread keeps its
    current k-th best as a threshold and tests blocks of values against
    it with a vectorized compare-and-count; only blocks holding a winner are
    searched, and winners go to a buffer of ``2k + 4096`` candidates that is
    compacted when full by one pass against a sampled pivot just below the
    k-th best.  Each compaction frees thousands of slots, so even ascending
    input (every value a winner) costs ``O(1)`` amortized per element
    (~5 ns measured), not the ``O(log k)`` of a heap.  A row of at least
    2^22 values (and ``64 k``) starts from a threshold guessed from a
    sample, which about ``3k`` values pass: the filter then reads the row
    about as fast as ``x.max()`` does (1.05-1.25x on one thread, 10^7
    float32, k = 1000, for normal, sorted, constant, NaN-heavy and
    ``-inf``-heavy rows); when fewer than ``k`` pass the guess, the row is
    filtered again from a safe threshold, with the same result.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import topk
    >>> v, i = topk(np.array([3.0, 1.0, 4.0, 1.0, 5.0]), 3)
    >>> v.tolist(), i.tolist()
    ([5.0, 4.0, 3.0], [4, 2, 0])
    >>> topk(np.array([2, 7, 7, 1]), 2, largest=False)[1].tolist()
    [3, 0]
    """
    k = check_k(k, least=0)
    nanbig = check_nan(nan)
    if not isinstance(sorted, (bool, np.bool_)):
        raise TypeError(f"sorted must be a bool, got {sorted!r}")
    method, device = dispatch.method_device("topk", method, device, BACKENDS, OLD_METHODS)
    if not isinstance(largest, (bool, np.bool_)):
        raise TypeError(f"largest must be a bool, got {largest!r}")
    foreign = _kinds.foreign_kind(x)
    if foreign is not None:  # jax, CuPy: through DLPack, the result back in their library
        _dlpack.refuse_out(foreign, out)
        (native,), undo = _dlpack.enter([x], kind=foreign)
        got = topk(native, k, axis, largest, sorted, nan=nan, method=method, device=device)
        return _into(out, *undo(list(got)))
    kind = _kinds.array_kind(x)
    if kind not in (_kinds.NUMPY, _kinds.TORCH, _kinds.TORCH_CUDA, _kinds.CUDA):
        raise TypeError(
            f"x must be a NumPy array or a torch tensor (or a jax array), got {type(x).__name__}; "
            "wrap lists with np.asarray (dask: see propopt_case_studies.streaming_topk)"
        )
    mask = None
    if kind == _kinds.NUMPY and type(x) is not np.ndarray:
        mask = mask_of(x)
        x = np.asarray(x)  # the plain ndarray (np.matrix indexes differently)
    nd = len(x.shape)
    if nd == 0:
        if axis not in (0, -1) or isinstance(axis, bool):
            raise ValueError(f"axis={axis!r} is out of range for a 0-d x; use 0 or -1")
        if k > 1:
            raise ValueError(f"k={k}: a 0-d x holds one value, so k must be 0 or 1")
        if mask is not None:
            raise ValueError(
                "x is a 0-d masked array whose one value is masked: there is nothing to "
                "select; unmask it or skip this call"
            )
        v, i = topk(x.reshape(1), 1, 0, largest, sorted, nan="largest", method=method,
                    device=device)  # fmt: skip
        return _into(out, v.reshape(()), i.reshape(()))
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {axis!r}")
    ax = axis_in_range(axis, "x", tuple(x.shape))
    plan = TopKPlan(x, k, ax, bool(largest), nanbig, bool(sorted), kind)
    backend = choose(method, device, plan)
    check_dtype(score_dtype(x))
    if k == 0:
        return _into(out, *_empty(x, ax))
    if mask is not None:
        return _into(out, *_masked(x, mask, k, ax, bool(largest), bool(sorted), nan, method))
    return _into(out, *BACKENDS[backend].run(plan))


def _masked(
    x: np.ndarray,
    mask: np.ndarray,
    k: int,
    ax: int,
    largest: bool,
    ordered: bool,
    nan: NanPolicy,
    method: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of the entries of ``x`` where ``mask`` is False (a masked array's data, mask).

    Each row is packed, unmasked entries first in index order (a stable sort
    of the mask keeps the tie order), and its tail padded with a value below
    every real one: NaN (ignored, or worst with ``nan='largest'`` and
    ``largest=False``), else the extreme of a widened dtype.  At most the
    fewest valid entries of a row are asked for, so padding is never chosen.
    """
    xm = np.moveaxis(x, ax, -1)
    mm = np.moveaxis(mask, ax, -1)
    floats = is_float(x.dtype)
    valid = ~mm
    if floats and nan == "ignore":
        valid &= ~np.isnan(xm.astype(np.float64))
    counts = valid.sum(axis=-1)
    lo, hi = int(counts.min()), int(counts.max())
    if k > lo and lo != hi:
        raise ValueError(
            f"rows of x hold different numbers of unmasked{' non-NaN' if floats else ''} "
            f"values ({lo} to {hi}) and k={k}: the result would be ragged; pass a k no "
            f"larger than {lo}, or select row by row"
        )
    order = np.argsort(mm, axis=-1, kind="stable")
    tail = np.take_along_axis(mm, order, -1)
    packed = np.take_along_axis(xm, order, -1)
    if floats:
        packed = packed.astype(np.float64)  # exact for every float dtype taken
        packed[tail] = -np.inf if (nan == "largest" and largest) else np.nan
    elif score_kind(x.dtype) == "u" and x.dtype.itemsize == 8:
        packed = packed.astype(np.uint64)
        packed[tail] = 0 if largest else np.iinfo(np.uint64).max
    else:
        packed = packed.astype(np.int64)
        packed[tail] = np.iinfo(np.int64).min if largest else np.iinfo(np.int64).max
    _, at = topk(packed, min(k, lo), -1, largest, ordered, nan=nan, method=method)
    idx = np.take_along_axis(order, at, -1)
    return np.moveaxis(np.take_along_axis(xm, idx, -1), -1, ax), np.moveaxis(idx, -1, ax)


def _empty(x: Any, ax: int) -> tuple[Any, Any]:
    """``k = 0``: values and int64 indices with a zero-length ``ax``."""
    shape = tuple(x.shape[:ax]) + (0,) + tuple(x.shape[ax + 1 :])
    if isinstance(x, np.ndarray):
        return np.empty(shape, x.dtype), np.empty(shape, np.int64)
    import torch

    return x.new_empty(shape), torch.empty(shape, dtype=torch.int64, device=x.device)


def _into(out: Any, values: Any, indices: Any) -> tuple[Any, Any]:
    """The result, or written into ``out=(values, indices)`` and that returned."""
    if out is None:
        return values, indices
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"out must be a (values, indices) pair of arrays, got {type(out).__name__}")
    if getattr(values, "requires_grad", False):
        raise ValueError(
            "out= cannot carry a gradient and x requires grad: drop out= to keep the "
            "gradient, or pass x.detach() (as torch.topk(out=) refuses)"
        )
    for name, dst, src in (("out[0]", out[0], values), ("out[1]", out[1], indices)):
        if type(dst) is not type(src) or str(dst.dtype) != str(src.dtype):
            raise TypeError(
                f"{name} is {_kinds.describe(dst)}; pass "
                f"{_kinds.describe(src)} like the result (indices are int64)"
            )
        if getattr(dst, "requires_grad", False):
            raise ValueError(f"{name} requires grad; out= takes tensors outside autograd")
        if _device(dst) != _device(src):
            raise ValueError(
                f"{name} is on {_device(dst)} but the result is on {_device(src)}; "
                "allocate out on the input's device"
            )
        if isinstance(dst, np.ndarray):
            if not dst.flags.writeable:
                raise ValueError(
                    f"{name} is read-only (a broadcast view or a frozen array); pass "
                    "writable arrays, e.g. np.empty_like of the result"
                )
            if dst.shape != src.shape:
                raise ValueError(
                    f"{name} has shape {dst.shape}; the result has shape {src.shape}: "
                    "allocate out with that shape"
                )
            dst[...] = src
        else:
            if tuple(dst.shape) != tuple(src.shape):
                dst.resize_(src.shape)
            dst.copy_(src)
    return out[0], out[1]


def _device(a: Any) -> str:
    """Where an array lives: ``'cpu'``, ``'cuda:0'``, ``'meta'``, ..."""
    device = getattr(a, "device", None)
    return _kinds.device_of(a) if isinstance(a, np.ndarray) or device is None else str(device)
