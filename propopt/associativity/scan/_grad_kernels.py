"""The fused backward of a scan whose left Jacobians are diagonal: mul and linear_recurrence.

For :data:`~propopt.mul` (``y_s = y_{s-1} a_s``) and
:data:`~propopt.linear_recurrence` (``(A_s, h_s) = (A_{s-1} a_s, a_s h_{s-1}
+ b_s)``), in scan order ``s`` (``reverse=True`` walks the axis backwards),
the gradient ``g`` of the inclusive outputs obeys one reverse recurrence per
output, all under the one coefficient ``a_{s+1}``::

    g_s = gy_s + a_{s+1} g_{s+1}        (g_{n-1} = gy_{n-1})
    grad_b_s = gh_s
    grad_a_s = A_{s-1} gA_s + h_{s-1} gh_s    (s > 0);   grad_a_0 = gA_0

(``mul`` is the ``A`` component alone; an exclusive scan reads ``gy`` one
position later and ``y_{s-1}`` from its own output at ``s``).  One kernel
computes it in three phases over the rows of the ``(P, N)`` view the CPU scan
uses: each thread reduces its chunk of a row to the affine map it applies to
the carry (the product of its coefficients and its ``g`` from a zero carry,
over interleaved lanes so that several dependency chains are in flight), the
chunk carries are chained on one thread, and each thread walks its chunk
again from its carry, writing ``grad_b`` and ``grad_a`` in the same pass.
The incoming gradients are read with their own strides (the gradient of
``h.sum()`` is a stride-0 view), each output is written once, and ``g`` is
flushed to a zero of its sign below the dtype's smallest normal, as the
monoids flush, so that a decaying gradient never runs on subnormals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba import prange

from ... import threads
from ..._memory import mapped_empty, settle_allocator

FM = {"contract"}

#: rows up to this many elements in all run on the calling thread
SERIAL_UP_TO = 1 << 16

#: interleaved lanes of the reduce phase (independent dependency chains)
LANES = 4


@numba.njit(inline="always", fastmath=FM)
def _ftz(v: Any, tiny: Any, zero: Any) -> Any:  # pragma: no cover
    """``v``, or a zero of its sign below the smallest normal (NaN passes)."""
    if abs(v) < tiny:
        return math.copysign(zero, v)
    return v


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _reduce(a, ga, gh, p, lo, hi, base, d, e, use_a, use_h, tiny, zero, one):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The map of scan positions ``[lo, hi)`` (``hi < n``): ``g_lo = G + P g_hi``.

    Returns ``(P, GA, GH)``; ``LANES`` contiguous lanes are walked together,
    the positions left over (at the top) first.
    """
    m = (hi - lo) // LANES
    top = lo + LANES * m
    pr, xa, xh = one, zero, zero
    if top < hi:  # the leftover positions [top, hi), from the top down
        s = hi - 1
        pr = a[p, base + d * (s + 1)]
        xa = ga[p, base + d * (s + e)] if use_a else zero
        xh = gh[p, base + d * (s + e)] if use_h else zero
        for s in range(hi - 2, top - 1, -1):
            c = a[p, base + d * (s + 1)]
            if use_a:
                xa = _ftz(ga[p, base + d * (s + e)] + c * xa, tiny, zero)
            if use_h:
                xh = _ftz(gh[p, base + d * (s + e)] + c * xh, tiny, zero)
            pr = _ftz(pr * c, tiny, zero)
    if m == 0:
        return pr, xa, xh
    lp = np.empty(LANES, a.dtype)
    la = np.zeros(LANES, a.dtype)
    lh = np.zeros(LANES, a.dtype)
    for j in range(LANES):
        s = lo + (j + 1) * m - 1
        lp[j] = a[p, base + d * (s + 1)]
        if use_a:
            la[j] = ga[p, base + d * (s + e)]
        if use_h:
            lh[j] = gh[p, base + d * (s + e)]
    for i in range(m - 2, -1, -1):
        for j in range(LANES):
            s = lo + j * m + i
            c = a[p, base + d * (s + 1)]
            if use_a:
                la[j] = _ftz(ga[p, base + d * (s + e)] + c * la[j], tiny, zero)
            if use_h:
                lh[j] = _ftz(gh[p, base + d * (s + e)] + c * lh[j], tiny, zero)
            lp[j] = _ftz(lp[j] * c, tiny, zero)
    if top == hi:  # no leftover: the top lane is the start
        pr, xa, xh = lp[LANES - 1], la[LANES - 1], lh[LANES - 1]
        last = LANES - 2
    else:
        last = LANES - 1
    for j in range(last, -1, -1):
        xa = _ftz(la[j] + lp[j] * xa, tiny, zero)
        xh = _ftz(lh[j] + lp[j] * xh, tiny, zero)
        pr = _ftz(lp[j] * pr, tiny, zero)
    return pr, xa, xh


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _emit(a, ga, gh, ya, yh, oa, ob, p, lo, hi, n, base, d, e, use_a, use_h, write_a, write_b,  # type: ignore[no-untyped-def]
          carried, ca, ch, tiny, zero):  # fmt: skip  # pragma: no cover
    """Walk ``[lo, hi)`` down from the carry ``(ca, ch)`` (``g_hi``), writing the gradients."""
    s = hi - 1
    if carried:
        c = a[p, base + d * hi]
        xa = _ftz(ga[p, base + d * (s + e)] + c * ca, tiny, zero) if use_a else zero
        xh = _ftz(gh[p, base + d * (s + e)] + c * ch, tiny, zero) if use_h else zero
    elif e == 1:  # exclusive: the last position's output is never read
        xa, xh = zero, zero
    else:
        xa = ga[p, base + d * s] if use_a else zero
        xh = gh[p, base + d * s] if use_h else zero
    while True:
        u = base + d * s
        if write_b:
            ob[p, u] = xh
        if write_a:
            if s == 0:
                oa[p, u] = xa
            else:
                w = base + d * (s - 1 + e)
                v = zero
                if use_a:
                    v += ya[p, w] * xa
                if use_h:
                    v += yh[p, w] * xh
                oa[p, u] = v
        s -= 1
        if s < lo:
            break
        c = a[p, base + d * (s + 1)]
        if use_a:
            xa = _ftz(ga[p, base + d * (s + e)] + c * xa, tiny, zero)
        if use_h:
            xh = _ftz(gh[p, base + d * (s + e)] + c * xh, tiny, zero)


@numba.njit(parallel=True, nogil=True, cache=True)
def _rows(a, ga, gh, ya, yh, oa, ob, rev, excl, use_a, use_h, write_a, write_b, chunks,  # type: ignore[no-untyped-def]
          tiny, zero, one):  # fmt: skip  # pragma: no cover
    """All rows of the ``(P, N)`` arrays, each cut into ``chunks`` (see the module)."""
    P, n = a.shape
    base = n - 1 if rev else 0
    d = -1 if rev else 1
    e = 1 if excl else 0
    C = chunks
    rp = np.empty((P, C), a.dtype)
    ra = np.empty((P, C), a.dtype)
    rh = np.empty((P, C), a.dtype)
    for task in prange(P * C):
        p, j = task // C, task % C
        lo, hi = j * n // C, (j + 1) * n // C
        if j > 0:  # chunk 0's map is never applied
            if hi == n:  # the last chunk: position n-1 starts it, with no coefficient
                ta = zero if e == 1 or not use_a else ga[p, base + d * (n - 1)]
                th = zero if e == 1 or not use_h else gh[p, base + d * (n - 1)]
                r = _reduce(a, ga, gh, p, lo, n - 1, base, d, e, use_a, use_h, tiny, zero, one)
                rp[p, j] = one
                ra[p, j] = _ftz(r[1] + r[0] * ta, tiny, zero) if n - 1 > lo else ta
                rh[p, j] = _ftz(r[2] + r[0] * th, tiny, zero) if n - 1 > lo else th
            else:
                r = _reduce(a, ga, gh, p, lo, hi, base, d, e, use_a, use_h, tiny, zero, one)
                rp[p, j], ra[p, j], rh[p, j] = r
    for p in range(P):  # the carry into chunk j is g at the start of chunk j + 1
        xa, xh = ra[p, C - 1], rh[p, C - 1]
        for j in range(C - 2, -1, -1):
            ca, ch = xa, xh
            if j > 0:
                xa = _ftz(ra[p, j] + rp[p, j] * xa, tiny, zero)
                xh = _ftz(rh[p, j] + rp[p, j] * xh, tiny, zero)
            ra[p, j], rh[p, j] = ca, ch
    for task in prange(P * C):
        p, j = task // C, task % C
        lo, hi = j * n // C, (j + 1) * n // C
        _emit(a, ga, gh, ya, yh, oa, ob, p, lo, hi, n, base, d, e, use_a, use_h, write_a,
              write_b, j < C - 1, ra[p, j], rh[p, j], tiny, zero)  # fmt: skip


@numba.njit(nogil=True, cache=True)
def _rows_here(a, ga, gh, ya, yh, oa, ob, rev, excl, use_a, use_h, write_a, write_b,  # type: ignore[no-untyped-def]
               tiny, zero):  # fmt: skip  # pragma: no cover
    """All rows on the calling thread, each walked once (no parallel region to wake)."""
    P, n = a.shape
    base = n - 1 if rev else 0
    d = -1 if rev else 1
    e = 1 if excl else 0
    for p in range(P):
        _emit(a, ga, gh, ya, yh, oa, ob, p, 0, n, n, base, d, e, use_a, use_h, write_a,
              write_b, False, zero, zero, tiny, zero)  # fmt: skip


def diagonal(
    xs: Sequence[np.ndarray],
    ys: Sequence[np.ndarray],
    gys: Sequence[Any],
    needs: Sequence[bool],
    axis: int,
    reverse: bool,
    exclusive: bool,
) -> list[Any] | None:
    """The inputs' gradients of a mul (``xs = [a]``) or linear_recurrence scan.

    Parameters
    ----------
    xs, ys : list of numpy.ndarray
        The scan's inputs and outputs (the exclusive outputs for
        ``exclusive=True``), all of one shape.
    gys : list of numpy.ndarray or None
        The outputs' gradients, any strides (None: zero).
    needs : list of bool
        Which inputs want a gradient.
    axis, reverse, exclusive
        The scan's.

    Returns
    -------
    list of numpy.ndarray or None, or None
        One gradient per input (None where not needed or zero), or None when
        this kernel does not take the scan (a dtype other than float32 and
        float64, or elements that are vectors: the axis is not the last one
        of more than one element).
    """
    a = xs[0]
    shape, dt = a.shape, a.dtype
    if dt not in (np.float32, np.float64) or len(shape) == 0:
        return None
    two = len(xs) == 2
    n = shape[axis]
    p = math.prod(shape[:axis])
    if math.prod(shape[axis + 1 :]) != 1 or n < 2:
        return None
    ga, gh = gys[0], gys[1] if two else None
    write_a = bool(needs[0])
    write_b = two and bool(needs[1]) and gh is not None
    use_a = write_a and ga is not None
    use_h = gh is not None and (write_a or write_b)
    if not (write_a or write_b) or not (use_a or use_h):
        return [None] * len(xs)
    used = [a, ys[0], *(g for g in (ga, gh) if g is not None), *ys[1:]]
    if any(x.dtype != dt or x.shape != shape for x in used):
        return None
    rows = [x.reshape(p, n) if x is not None else None for x in (a, ga, gh, *ys)]
    a2, ga2, gh2, ya2 = rows[:4]
    yh2 = rows[4] if two else ya2
    ga2 = ga2 if use_a else gh2
    gh2 = gh2 if use_h else ga2
    if not use_a:
        ya2 = yh2
    if p * n * dt.itemsize >= 1 << 17:
        settle_allocator()
    oa = mapped_empty((p, n), dt) if write_a else None
    ob = mapped_empty((p, n), dt) if write_b else None
    tiny = dt.type(np.finfo(dt).tiny)
    args = (bool(reverse), bool(exclusive), use_a, use_h, write_a, write_b)
    outs = (oa if oa is not None else ob, ob if ob is not None else oa)
    zero, one = dt.type(0), dt.type(1)
    if p * n <= SERIAL_UP_TO:
        _rows_here(a2, ga2, gh2, ya2, yh2, *outs, *args, tiny, zero)
    else:
        with threads.sized() as T:
            if T == 1:
                _rows_here(a2, ga2, gh2, ya2, yh2, *outs, *args, tiny, zero)
            else:
                chunks = 1 if p >= 2 * T else max(1, min(T, n // 64))
                _rows(a2, ga2, gh2, ya2, yh2, *outs, *args, chunks, tiny, zero, one)
    grads = [None if oa is None else oa.reshape(shape)]
    if two:
        grads.append(None if ob is None else ob.reshape(shape))
    return grads
