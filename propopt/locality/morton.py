"""Morton (Z-order) keys: a space-filling curve that keeps neighbours near in memory.

Locality licenses reordering: sorting points by their Morton key puts points
that are close in space close in the array, so a tree built on them (an
octree is the set of key prefixes) and any loop over neighbours touch
contiguous memory.

Keys
----
A point is quantized to integer cell coordinates in a box ``[lo, hi]``,
``q_a = floor((x_a - lo_a) / (hi_a - lo_a) * 2^b)`` (clamped to ``2^b - 1`` at
``x_a = hi_a``), with ``b = 21`` bits per axis in 3-D and ``b = 32`` in 2-D,
and the bits are interleaved into one ``uint64``, most significant first::

    key = ... z_1 y_1 x_1 z_0 y_0 x_0      (3-D: bit 3 m + a holds bit m of axis a)

so the key's leading ``dim * L`` bits name the cell of side ``(hi - lo) / 2^L``
that holds the point at depth ``L`` of the quadtree / octree, and its ``L``-th
octal digit (quaternary in 2-D)

    digit_L(key) = (key >> (dim * (b - L))) & (2^dim - 1)     (L = 1 .. b)

is the child the point falls into at depth ``L``: bit ``a`` of the digit says
whether it lies in the upper half of its parent along axis ``a``
(:func:`morton_digits`).  The points of one cell are contiguous in Morton
order: those with equal ``key >> (dim * (b - L))`` (:func:`morton_cells`).

Boxes
-----
By default the box is the bounding *cube* of the points (equal sides, so every
cell is a cube).  Pass ``box=(lo, hi)`` to share one grid between a tree and
later queries; points outside the box are an error.

Sorting
-------
:func:`morton_order` computes the keys on threads and sorts them with
NumPy's vectorized (SIMD) quicksort, then restores input order inside runs of
equal keys, so the permutation is stable.  Tried and rejected, at N = 10^6
3-D points on the 2-core development machine: a parallel LSD radix sort in
numba (per-thread histograms, 8- and 11-bit digits) took 120-200 ms, and
``np.argsort(kind="stable")`` (timsort of 64-bit keys) about 200 ms, against
25-40 ms for the quicksort and the tie fix together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit, prange

from .. import _jit, threads
from ..arrays import flag, plain, renamed

MORTON_BITS = {2: 32, 3: 21}
"""Bits per axis of a key, by dimension: ``dim * bits`` fits in a uint64."""

_U = np.uint64


# ------------------------------------------------------------ numba kernels
@njit(cache=True, inline="always")
def _spread3(v: Any) -> Any:
    x = v & _U(0x1FFFFF)
    x = (x | (x << _U(32))) & _U(0x1F00000000FFFF)
    x = (x | (x << _U(16))) & _U(0x1F0000FF0000FF)
    x = (x | (x << _U(8))) & _U(0x100F00F00F00F00F)
    x = (x | (x << _U(4))) & _U(0x10C30C30C30C30C3)
    x = (x | (x << _U(2))) & _U(0x1249249249249249)
    return x


@njit(cache=True, inline="always")
def _spread2(v: Any) -> Any:
    x = v & _U(0xFFFFFFFF)
    x = (x | (x << _U(16))) & _U(0x0000FFFF0000FFFF)
    x = (x | (x << _U(8))) & _U(0x00FF00FF00FF00FF)
    x = (x | (x << _U(4))) & _U(0x0F0F0F0F0F0F0F0F)
    x = (x | (x << _U(2))) & _U(0x3333333333333333)
    x = (x | (x << _U(1))) & _U(0x5555555555555555)
    return x


@njit(cache=True, inline="always")
def _compact3(v: Any) -> Any:
    x = v & _U(0x1249249249249249)
    x = (x | (x >> _U(2))) & _U(0x10C30C30C30C30C3)
    x = (x | (x >> _U(4))) & _U(0x100F00F00F00F00F)
    x = (x | (x >> _U(8))) & _U(0x1F0000FF0000FF)
    x = (x | (x >> _U(16))) & _U(0x1F00000000FFFF)
    x = (x | (x >> _U(32))) & _U(0x1FFFFF)
    return x


@njit(cache=True, inline="always")
def _compact2(v: Any) -> Any:
    x = v & _U(0x5555555555555555)
    x = (x | (x >> _U(1))) & _U(0x3333333333333333)
    x = (x | (x >> _U(2))) & _U(0x0F0F0F0F0F0F0F0F)
    x = (x | (x >> _U(4))) & _U(0x00FF00FF00FF00FF)
    x = (x | (x >> _U(8))) & _U(0x0000FFFF0000FFFF)
    x = (x | (x >> _U(16))) & _U(0xFFFFFFFF)
    return x


@njit(cache=True, inline="always")
def _cell(x: Any, lo: float, scale: float, top: int) -> Any:
    q = np.int64((np.float64(x) - lo) * scale)
    if q > top:
        q = top
    if q < 0:
        q = 0
    return _U(q)


@njit(cache=True, nogil=True)
def _keys3(p: Any, lo: Any, scale: Any, a: int, b: int, out: Any) -> None:
    top = (1 << 21) - 1
    for i in range(a, b):
        qx = _cell(p[i, 0], lo[0], scale[0], top)
        qy = _cell(p[i, 1], lo[1], scale[1], top)
        qz = _cell(p[i, 2], lo[2], scale[2], top)
        out[i] = _spread3(qx) | (_spread3(qy) << _U(1)) | (_spread3(qz) << _U(2))


@njit(cache=True, nogil=True)
def _keys2(p: Any, lo: Any, scale: Any, a: int, b: int, out: Any) -> None:
    top = (1 << 32) - 1
    for i in range(a, b):
        qx = _cell(p[i, 0], lo[0], scale[0], top)
        qy = _cell(p[i, 1], lo[1], scale[1], top)
        out[i] = _spread2(qx) | (_spread2(qy) << _U(1))


#: Rows per thread below which a pass over the points stays on the calling thread.
GRAIN = 1 << 16


def _on_threads(n: int, work: Callable[[int, int, int], None]) -> int:
    """``work(q, a, b)`` for contiguous pieces ``[a, b)`` of ``range(n)``, one per thread.

    Python threads over GIL-free serial kernels (``nogil``), not a numba
    parallel region: a ``prange`` kernel compiles its loop again inside the
    region's scheduler, which took ~0.5 s of each first call.  At most
    numba's thread count (:mod:`propopt.threads` sizes it per call) and at
    least :data:`GRAIN` rows a piece; the caller takes piece 0.  Returns the
    number of pieces.
    """
    t = max(1, min(_jit.region_threads(), n // GRAIN))
    if t == 1:
        work(0, 0, n)
        return 1
    pool = threads.workers(t - 1)
    futures = [pool.submit(work, q, q * n // t, (q + 1) * n // t) for q in range(1, t)]
    try:
        work(0, 0, n // t)
    finally:
        for f in futures:
            f.result()
    return t


@njit(parallel=True, cache=True)
def _decode(keys: Any, dim: int, out: Any) -> None:
    for i in prange(keys.shape[0]):
        k = keys[i]
        for a in range(dim):
            if dim == 3:
                out[i, a] = _compact3(k >> _U(a))
            else:
                out[i, a] = _compact2(k >> _U(a))


def _stabilize(sorted_keys: np.ndarray, order: np.ndarray) -> None:
    """Sort ``order`` within each run of equal keys: an unstable sort made stable.

    Only the positions inside runs are touched, with one ``np.lexsort`` by
    (key, input index) over them: in NumPy, so that the first call compiles
    nothing (numba's sort took 4-5 s to compile).
    """
    eq = sorted_keys[1:] == sorted_keys[:-1]
    if not eq.any():
        return
    in_run = np.zeros(sorted_keys.shape[0], dtype=bool)
    in_run[1:] = eq
    in_run[:-1] |= eq
    at = np.flatnonzero(in_run)
    sub = order[at]
    order[at] = sub[np.lexsort((sub, sorted_keys[at]))]


@njit(cache=True, nogil=True)
def _extent(p: Any, a: int, b: int, lo: Any, hi: Any, bad: Any) -> None:
    """Per-axis min and max of rows ``[a, b)`` into ``lo``, ``hi``; the first non-finite row
    into ``bad[0]`` (left as is if none).

    The running bounds live in this call's own arrays and are written out once: the
    threads' ``lo`` and ``hi`` rows share cache lines, and a store per row made the
    threads take the line from each other (10^6 points: 153 ms on two threads, 3 ms on
    one)."""
    d = p.shape[1]
    mn = lo.copy()
    mx = hi.copy()
    first = bad[0]
    for i in range(a, b):
        for k in range(d):
            v = np.float64(p[i, k])
            if not np.isfinite(v):
                first = min(first, i)
            else:
                mn[k] = min(mn[k], v)
                mx[k] = max(mx[k], v)
    lo[:] = mn
    hi[:] = mx
    bad[0] = first


# ------------------------------------------------------------ validation
def _points(points: Any) -> np.ndarray:
    a = plain("points", points)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"points has dtype {a.dtype}: pass real coordinates (float32 or float64)")
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float32 if a.dtype.kind == "f" and a.dtype.itemsize < 4 else np.float64)
    if a.ndim != 2 or a.shape[1] not in MORTON_BITS:
        raise ValueError(
            f"points has shape {a.shape}: Morton keys take (n, 2) or (n, 3) points "
            "(one point per row)"
        )
    return np.ascontiguousarray(a)


def _bounds(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-axis min and max, refusing non-finite coordinates (naming the row)."""
    n, d = p.shape
    most = max(1, min(_jit.region_threads(), n // GRAIN))
    los, his = np.full((most, d), np.inf), np.full((most, d), -np.inf)
    bads = np.full(most, n, np.int64)
    t = _on_threads(n, lambda q, a, b: _extent(p, a, b, los[q], his[q], bads[q : q + 1]))
    lo, hi, bad = los[:t].min(axis=0), his[:t].max(axis=0), int(bads[:t].min())
    if bad < p.shape[0]:
        raise ValueError(
            f"points[{bad}] = {p[bad].tolist()} is not finite: coordinates must be finite "
            "(drop or fix that point)"
        )
    return lo, hi


@threads.parallel
def bounding_box(points: Any, *, cube: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The box ``(lo, hi)`` (float64 arrays of length ``dim``) that :func:`morton_keys` uses.

    ``lo`` is the per-axis minimum; with ``cube=True`` (the default) every side
    is the largest extent, so that cells are cubes.  A degenerate extent (all
    points equal along every axis) gets side 1.  ``hi`` is at least the
    per-axis maximum and above ``lo``: a side is at least an ulp of ``lo``,
    and where ``lo + side`` rounds below the maximum it is lengthened by an
    ulp, so every point lies inside ``[lo, hi]``.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.locality import bounding_box
    >>> lo, hi = bounding_box(np.array([[0.0, 0.0, 0.0], [2.0, 1.0, 0.5]]))
    >>> lo.tolist(), hi.tolist()
    ([0.0, 0.0, 0.0], [2.0, 2.0, 2.0])
    """
    cube = flag("cube", cube)
    p = _points(points)
    if p.shape[0] == 0:
        raise ValueError("points is empty: a bounding box needs at least one point")
    lo, top = _bounds(p)
    with np.errstate(over="ignore"):
        ext = top - lo
    if not np.isfinite(ext).all() or not np.isfinite(lo + (ext.max() if cube else ext)).all():
        a = int(np.argmax(~np.isfinite(ext))) if not np.isfinite(ext).all() else 0
        raise ValueError(
            f"points span {lo[a]:.3g} .. {top[a]:.3g} on axis {a}: the box's side overflows "
            "float64; scale the points down (e.g. by 0.25), or pass box=(lo, hi)"
        )
    if cube:
        ext = np.full_like(ext, ext.max())
    ext[ext <= 0] = ext.max() if ext.max() > 0 else 1.0
    # a side below an ulp of lo would give hi == lo: at least one ulp
    ext = np.maximum(ext, np.spacing(np.abs(lo)))
    if cube:
        ext[:] = ext.max()
    # lo + (top - lo) can round below top: lengthen such sides by two ulps of
    # the largest of |lo|, |top|, side, at least an ulp of hi, so each step
    # raises hi (one ulp of the side alone may be far below an ulp of hi)
    ulp = 2 * np.spacing(np.maximum(np.maximum(np.abs(lo), np.abs(top)), ext))
    under = lo + ext < top
    while under.any():
        ext[under] += ulp[under]
        under = lo + ext < top
    return lo, lo + ext


def _box(box: Any, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    dim = p.shape[1]
    if box is None:
        if p.shape[0] == 0:
            return np.zeros(dim), np.ones(dim)
        return bounding_box(p)
    try:
        lo, hi = (np.asarray(b, dtype=np.float64).reshape(-1) for b in box)
    except (TypeError, ValueError):
        raise ValueError(f"box={box!r}: must be a pair (lo, hi) of length-{dim} arrays") from None
    if lo.shape != (dim,) or hi.shape != (dim,):
        raise ValueError(f"box={box!r}: lo and hi must each have {dim} coordinates")
    if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (hi > lo).all()):
        raise ValueError(f"box={box!r}: need finite lo < hi on every axis")
    if p.shape[0]:
        plo, phi = _bounds(p)
        if (plo < lo).any() or (phi > hi).any():
            out = ((p < lo) | (p > hi)).any(axis=1)
            i = int(np.argmax(out))
            raise ValueError(
                f"points[{i}] = {p[i].tolist()} lies outside the box lo={lo.tolist()}, "
                f"hi={hi.tolist()}: enlarge the box (e.g. bounding_box of all points)"
            )
    return lo, hi


def _keys(keys: Any) -> np.ndarray:
    """Morton keys as uint64: unsigned, or signed integers >= 0; anything else is refused
    (a cast would wrap ``-1`` to ``2**64 - 1`` and truncate ``1.5``)."""
    k = np.asarray(keys)
    if k.dtype.kind == "i":
        if k.size and k.min() < 0:
            i = np.unravel_index(int(np.argmin(k)), k.shape)
            where = f"keys[{', '.join(map(str, i))}]" if k.ndim else "keys"
            raise ValueError(f"{where} = {k[i]}: Morton keys are unsigned (uint64), never < 0")
    elif k.dtype.kind != "u":
        raise TypeError(
            f"keys has dtype {k.dtype}: Morton keys are unsigned integers (uint64), as "
            "morton_keys returns them"
        )
    return k.astype(np.uint64, copy=False)


def _check_dim(ndim: Any) -> int:
    if isinstance(ndim, bool) or ndim not in MORTON_BITS:
        raise ValueError(f"ndim={ndim!r} is not one of {sorted(MORTON_BITS)}")
    return int(ndim)


# ------------------------------------------------------------ public verbs
@threads.parallel
def morton_keys(points: Any, box: Any = None) -> np.ndarray:
    """Morton (Z-order) keys of 2-D or 3-D points, as ``uint64``.

    The bits of the quantized coordinates are interleaved,
    ``key = sum_m sum_a bit_m(q_a) 2^(dim m + a)`` (see the module notes), so
    that ``key`` order is the Z-order curve through the cells of side
    ``(hi - lo) / 2^b``.

    Parameters
    ----------
    points : array (n, 2) or (n, 3)
        float32 or float64 coordinates (integers are cast to float64).
    box : (lo, hi), optional
        The quantization box; by default :func:`bounding_box` of the points (a
        cube).  Give one box to a tree and to its queries so they share a grid.

    Returns
    -------
    ndarray of uint64, shape (n,)

    Notes
    -----
    ``O(n)``, parallel.  Quantization is computed in float64 for both input
    dtypes, so float32 points get the keys of their exact values.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.locality import morton_keys
    >>> box = (np.zeros(2), np.ones(2))
    >>> pts = np.array([[0.1, 0.1], [0.9, 0.1], [0.1, 0.9], [0.9, 0.9]])
    >>> (morton_keys(pts, box) >> np.uint64(62)).tolist()  # first digit: x bit, then y bit
    [0, 1, 2, 3]
    """
    p = _points(points)
    lo, hi = _box(box, p)
    dim = p.shape[1]
    with np.errstate(over="ignore"):
        span = hi - lo
    tiny = span < 2.0**-900  # 2**bits / (hi - lo) would overflow to inf
    wide = ~np.isfinite(span)  # a box of sides near 1e308: hi - lo overflows to inf
    if tiny.any() or wide.any():
        # an axis this narrow holds only tiny values (|x| < 2**-847): scaling
        # it by a power of two is exact and gives the same cells; a quarter of
        # an overflowing side is finite, and its cells are far wider than the
        # subnormals a quarter of the coordinates may lose
        f = np.where(tiny, 2.0**600, np.where(wide, 0.25, 1.0))
        p, lo, hi = p * f, lo * f, hi * f
    scale = np.float64(2.0 ** MORTON_BITS[dim]) / (hi - lo)
    out = np.empty(p.shape[0], np.uint64)
    if p.shape[0]:
        kernel = _keys3 if dim == 3 else _keys2
        _on_threads(p.shape[0], lambda q, a, b: kernel(p, lo, scale, a, b, out))
    return out


@threads.parallel
def morton_order(points: Any, box: Any = None, *, return_keys: bool = False) -> Any:
    """The permutation that sorts points by Morton key (stable).

    ``points[morton_order(points)]`` lists the points along the Z-order curve:
    neighbours in the array are neighbours in space, and every quadtree /
    octree cell is a contiguous run.

    Parameters
    ----------
    points : array (n, 2) or (n, 3)
    box : (lo, hi), optional
        As in :func:`morton_keys`.
    return_keys : bool
        Also return the sorted keys (``keys[order]``), for finding cells.

    Returns
    -------
    order : ndarray of int64, shape (n,)
        A permutation of ``0 .. n-1``; ties keep their input order.
    keys : ndarray of uint64, shape (n,)
        Only with ``return_keys=True``: the keys in sorted order.

    Notes
    -----
    Keys in ``O(n)`` on threads, then NumPy's SIMD quicksort,
    ``O(n log n)``, made stable by sorting the indices inside runs of equal keys.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.locality import morton_order
    >>> pts = np.array([[0.9, 0.9], [0.1, 0.1], [0.9, 0.1], [0.1, 0.9]])
    >>> morton_order(pts).tolist()
    [1, 2, 3, 0]
    """
    return_keys = flag("return_keys", return_keys)
    keys = morton_keys(points, box)
    order = np.argsort(keys).astype(np.int64, copy=False)
    sk = keys[order]
    if sk.shape[0] > 1:
        _stabilize(sk, order)
    return (order, sk) if return_keys else order


@renamed(dim="ndim")
def morton_digits(keys: Any, level: int, ndim: int = 3) -> np.ndarray:
    """The child index of each key at depth ``level`` of the quadtree / octree.

    ``digit = (key >> (ndim * (b - level))) & (2^ndim - 1)`` with ``b =
    MORTON_BITS[ndim]``; bit ``a`` of the digit is 1 when the point lies in
    the upper half of its depth-``level - 1`` cell along axis ``a``.

    Parameters
    ----------
    keys : array of uint64
        Or of non-negative integers; negative or float keys are refused.
    level : int
        ``1 .. b`` (1: the children of the root box).
    ndim : {2, 3}
        The points' dimensions (``dim=`` before this release).

    Returns
    -------
    ndarray of uint8

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.locality import morton_digits, morton_keys
    >>> box = (np.zeros(3), np.ones(3))
    >>> k = morton_keys(np.array([[0.7, 0.2, 0.6], [0.3, 0.8, 0.1]]), box)
    >>> morton_digits(k, 1).tolist()   # x upper -> 1, y upper -> 2, z upper -> 4
    [5, 2]
    """
    dim = _check_dim(ndim)
    b = MORTON_BITS[dim]
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 1 <= level <= b:
        raise ValueError(f"level={level!r}: must be an int in 1 .. {b} for ndim={dim}")
    k = _keys(keys)
    shift = np.uint64(dim * (b - int(level)))
    return ((k >> shift) & np.uint64((1 << dim) - 1)).astype(np.uint8)


@renamed(dim="ndim")
def morton_cells(keys: Any, level: int, ndim: int = 3) -> np.ndarray:
    """The cell of each key at depth ``level``: its leading ``ndim * level`` bits.

    Points with equal values share a cell of side ``(hi - lo) / 2^level``; in
    Morton order they are contiguous, so ``np.flatnonzero(np.diff(cells))``
    (or ``np.searchsorted``) splits sorted points into the cells of a level.
    ``level = 0`` gives the root (all zero).

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.locality import morton_cells, morton_order
    >>> pts = np.random.default_rng(0).uniform(size=(1000, 3))
    >>> order, keys = morton_order(pts, return_keys=True)
    >>> cells = morton_cells(keys, 1)
    >>> bool(np.all(np.diff(cells.astype(np.int64)) >= 0)), len(np.unique(cells))
    (True, 8)
    """
    dim = _check_dim(ndim)
    b = MORTON_BITS[dim]
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level <= b:
        raise ValueError(f"level={level!r}: must be an int in 0 .. {b} for ndim={dim}")
    k = _keys(keys)
    if level == 0:
        return np.zeros_like(k)
    return k >> np.uint64(dim * (b - int(level)))


@renamed(dim="ndim")
@threads.parallel
def morton_decode(keys: Any, ndim: int = 3) -> np.ndarray:
    """Integer cell coordinates ``q`` (shape ``(n, ndim)``, int64) of Morton keys.

    The inverse of the interleave: ``morton_decode(morton_keys(p, box))`` gives
    ``floor((p - lo) / (hi - lo) * 2^b)``; the cell's lower corner is
    ``lo + q * (hi - lo) / 2^b``.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.locality import morton_decode
    >>> morton_decode(np.array([0b110101], dtype=np.uint64)).tolist()  # z y x | z y x
    [[1, 2, 3]]
    """
    dim = _check_dim(ndim)
    k = _keys(keys)
    if k.ndim > 1:
        raise ValueError(
            f"keys has shape {k.shape}: morton_decode takes a 1-D array of keys and returns "
            "one row per key; flatten them first (keys.ravel())"
        )
    k = np.ascontiguousarray(k.reshape(-1))
    out = np.empty((k.shape[0], dim), np.int64)
    if k.shape[0]:
        _decode(k, dim, out)
    return out
