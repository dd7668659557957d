"""``recurrence``: the state ``h`` of ``h_t = a_t * h_{t-1} + b_t``, without the products.

``associative_scan(linear_recurrence, (a, b))`` returns both components of
the scanned maps: ``A_t = a_0 a_1 ... a_t`` and ``h_t``.  An EMA, a gated
RNN or a state-space model wants ``h`` alone; writing ``A`` costs a second
output array as large as ``h`` (about half as much time again: the numbers
are in :func:`recurrence`'s notes).  :func:`recurrence` scans the same monoid
and writes ``h`` only, as the sequential loop does, on the CPU kernels
(NumPy float32, float64 and complex arrays along their last axis, which a
1-D array always is); other inputs go through :func:`associative_scan` and
drop ``A`` afterwards, with the same result.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import _cpu
from .monoid import linear_recurrence
from .scan import associative_scan

#: dtypes with the ``h``-only kernels.
FAST_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def recurrence(
    a: Any,
    b: Any,
    *,
    axis: int = 0,
    reverse: bool = False,
    h0: Any = None,
    out: Any = None,
) -> Any:
    """``h_t = a_t * h_{t-1} + b_t`` along ``axis``, in parallel; returns ``h`` only.

    The scan of :data:`propopt.linear_recurrence`, whose law is the
    composition of affine maps ``h -> a h + b`` (associative, not
    commutative), with only its second component written: the same values as
    ``associative_scan(linear_recurrence, (a, b), axis=axis,
    reverse=reverse)[1]``, without the array of running products.

    Parameters
    ----------
    a, b : array_like
        Decays and inputs.  NumPy arrays, scalars, or any array type that
        :func:`propopt.associative_scan` takes (torch, jax, dask...); they
        broadcast against each other (``a = 0.9`` gives an exponential
        moving average of ``b``).  A broadcast operand is materialized.
    axis : int
        The time axis; negative values count from the end.
    reverse : bool
        Run from the end: ``h_t = a_t * h_{t+1} + b_t``.
    h0 : scalar or array, optional
        The state before the first step (after the last with ``reverse``):
        a scalar, or an array of the shape of ``a`` without ``axis``.
        Default 0.  To run a long sequence in chunks, pass each chunk's last
        ``h`` as the next chunk's ``h0``.
    out : ndarray, optional
        A C-contiguous, writable NumPy array of the result's shape and dtype,
        sharing no memory with ``a`` or ``b``, to write ``h`` into (returned).

    Returns
    -------
    The ``h`` of every step, of the broadcast shape and result dtype.

    Notes
    -----
    ``O(n)`` work, the threads of :func:`propopt.threads.sized`.  On the CPU
    kernels (NumPy arrays of float32, float64, complex64 or complex128 along
    the last axis) only ``h`` is written; ``A`` exists a tile at a time in
    the cache (docs/performance.md).  Keeping ``A`` costs its write: at
    2^22 float32 on one thread of a 2-core AMD EPYC (``znver2``), ``h`` alone
    took 3.6-3.8 ms, 1.02-1.08x a copy of ``a`` and ``b``, and the scan
    writing ``A`` and ``h`` 5.3-6.2 ms, 1.5-1.7x the copy (0.5 ns more an
    element); on two threads 2.7-2.8 ms (0.74-0.79x the copy) against
    3.6-4.0 ms (1.00-1.11x).  float64, one thread: 7.6-8.6 ms (0.76-0.86x
    its copy) against 12.7-13.5 ms (1.26-1.31x).  Rounding differs from the
    sequential loop as the scan's does (docs/associativity.md); values below
    the smallest normal are flushed to zero as :data:`propopt.linear_recurrence`
    does.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import recurrence
    >>> recurrence(np.full(4, 0.5), np.ones(4)).tolist()
    [1.0, 1.5, 1.75, 1.875]
    >>> recurrence(0.5, np.ones(3), h0=8.0).tolist()
    [5.0, 3.5, 2.75]
    """
    if not isinstance(reverse, (bool, np.bool_)):
        raise TypeError(f"reverse={reverse!r}, must be True or False")
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"axis={axis!r}, must be an integer") from None
    if _numpy_like(a) and _numpy_like(b) and (h0 is None or _numpy_like(h0)):
        an, bn = np.asarray(a), np.asarray(b)
        try:
            an, bn = np.broadcast_arrays(an, bn)
        except ValueError:
            raise ValueError(
                f"a.shape={an.shape} and b.shape={bn.shape} do not broadcast; pass arrays of "
                "one shape, or a scalar decay"
            ) from None
        ax = _axis(axis, an.ndim)
        dt = np.result_type(an, bn)
        h0n = _initial(h0, an.shape, ax, dt)
        if dt in FAST_DTYPES and ax == an.ndim - 1:
            return _fast(an.astype(dt, copy=False), bn.astype(dt, copy=False), reverse, h0n, out)
        a, b = an, bn
    A, h = associative_scan(linear_recurrence, (a, b), axis=axis, reverse=reverse, out=None)
    if h0 is not None:
        h = h + A * _expand(h0, h, axis)
    if out is not None:
        out[...] = h
        return out
    return h


def _numpy_like(x: Any) -> bool:
    """NumPy arrays (not subclasses such as masked arrays) and Python or NumPy scalars."""
    return type(x) is np.ndarray or isinstance(x, (int, float, complex, np.generic))


def _axis(axis: int, ndim: int) -> int:
    if ndim == 0:
        raise ValueError("a and b are scalars; pass at least one array with a time axis")
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"axis={axis} is out of range for {ndim}-d a and b; pass {-ndim} <= axis < {ndim}"
        )
    return axis % ndim


def _initial(h0: Any, shape: tuple[int, ...], ax: int, dt: np.dtype) -> np.ndarray | None:
    """``h0`` as an array of the shape without ``ax``, or None."""
    if h0 is None:
        return None
    rest = shape[:ax] + shape[ax + 1 :]
    h = np.asarray(h0)
    try:
        return np.ascontiguousarray(np.broadcast_to(h, rest), dtype=dt)
    except ValueError:
        raise ValueError(
            f"h0.shape={h.shape} does not broadcast to {rest}, the shape of a and b without "
            f"axis {ax}; pass a scalar or an array of that shape"
        ) from None


def _expand(h0: Any, h: Any, axis: int) -> Any:
    """``h0`` with ``axis`` put back (length 1), in ``h``'s array library."""
    if isinstance(h0, (int, float, complex, np.generic)):
        return h0
    shape = list(h.shape)
    shape[axis] = 1
    return h0.reshape(shape)


def _fast(
    a: np.ndarray, b: np.ndarray, reverse: bool, h0: np.ndarray | None, out: Any
) -> np.ndarray:
    """The ``h``-only CPU kernels along the last axis."""
    if out is not None:
        if type(out) is not np.ndarray or out.shape != a.shape or out.dtype != a.dtype:
            what = f"{type(out).__name__} of shape {getattr(out, 'shape', None)}"
            raise ValueError(
                f"out is a {what} and dtype {getattr(out, 'dtype', None)}; pass a NumPy array "
                f"of shape {a.shape} and dtype {a.dtype}"
            )
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out is not a C-contiguous writable array; pass np.empty_like(b)")
        if np.shares_memory(out, a) or np.shares_memory(out, b):
            raise ValueError("out shares memory with a or b; pass a separate array")
    if a.shape[-1] == 0:
        return out if out is not None else np.empty(a.shape, a.dtype)
    init = None if h0 is None else [np.ones(h0.shape, a.dtype), h0]
    outs = None if out is None else [None, out]
    res = _cpu.scan(
        linear_recurrence, [a, b], a.ndim - 1, reverse, False, out=outs, keep=(1,), init=init
    )
    h: np.ndarray = res[1]
    return h
