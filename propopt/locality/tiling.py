"""Tiles: cut loops into blocks whose working set stays in cache.

A loop nest that touches each input many times (a matrix product reads every
row of ``A`` ``n`` times) runs at the speed of the memory level its working
set fits in.  Cutting the iteration space into tiles of a few KiB makes the
reuse happen in L1/L2 instead of DRAM.

:func:`tiles`
    The tile iterator: tuples of slices covering an array exactly once,
    remainders included.
:func:`tiled_matmul`
    ``C = A @ B`` by the naive triple loop, by cache tiles on numba threads,
    or by BLAS: the acceleration chapter's three rungs.
:func:`tiled_pairwise`
    The full pair sum ``out_i = sum_{j != i} w_j f(x_i, x_j)`` with source
    tiles kept in L1 (or untiled, for comparison).

Measured figures (2-core development machine) are in docs/locality.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import product
from typing import Any, NamedTuple

import numpy as np
from numba import njit, prange

from .. import dispatch, threads
from ..arrays import inexact, plain

__all__ = ["MATMUL_TILE", "tiled_matmul", "tiled_pairwise", "tiles"]

MATMUL_TILE = 64
"""Default matmul tile: three float64 64 x 64 blocks are 96 KiB (float32: 48 KiB),
resident in the 512 KiB L2 with the next ones prefetched; 32 and 128 measured
within 15% at n = 512 on the development machine."""


def _ints(name: str, v: Any, nd: int | None = None) -> tuple[int, ...]:
    scalar = isinstance(v, (int, np.integer)) and not isinstance(v, bool)
    t = (v,) if scalar else v
    try:
        t = tuple(t)
    except TypeError:
        raise TypeError(f"{name}={v!r}: must be an int or a tuple of ints") from None
    if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in t):
        raise TypeError(f"{name}={v!r}: must be an int or a tuple of ints")
    if nd is not None and len(t) == 1 and (scalar or nd > 1):
        t = t * nd  # one int for every axis (none for a 0-d shape)
    if nd is not None and len(t) != nd:
        raise ValueError(f"{name}={v!r} has {len(t)} entries but shape has {nd}: give one per axis")
    return tuple(int(x) for x in t)


def tiles(shape: int | tuple[int, ...], tile: int | tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    """Iterate over the tiles of an array of ``shape``, row-major.

    Yields tuples of slices, one per axis, ``a[t]`` being one tile; tiles at
    the upper edge of an axis are cut short, so the tiles cover every index
    exactly once.

    Parameters
    ----------
    shape : int or tuple of int
        Array shape (``>= 0`` per axis).
    tile : int or tuple of int
        Tile size per axis (one int for all axes), ``>= 1``.

    Examples
    --------
    >>> from propopt.locality import tiles
    >>> [t[0] for t in tiles(10, 4)]
    [slice(0, 4, None), slice(4, 8, None), slice(8, 10, None)]
    >>> len(list(tiles((5, 7), (2, 3))))  # 3 x 3 tiles
    9
    """
    shp = _ints("shape", shape)
    for s in shp:
        if s < 0:
            raise ValueError(f"shape={shape!r}: sizes must be >= 0")
    for t in _ints("tile", tile):  # checked before an int is spread over the axes
        if t < 1:
            raise ValueError(f"tile={tile!r}: tile sizes must be >= 1")
    tl = _ints("tile", tile, len(shp))
    starts = [range(0, s, t) for s, t in zip(shp, tl)]
    for corner in product(*starts):
        yield tuple(slice(c, min(c + t, s)) for c, t, s in zip(corner, tl, shp))


# ------------------------------------------------------------ matmul kernels
@njit(cache=True)
def _matmul_naive(A: Any, B: Any, C: Any) -> None:
    """The textbook ``i, j, k`` loop: ``B`` is walked down a column (stride n)."""
    n, m = A.shape
    p = B.shape[1]
    for i in range(n):
        for j in range(p):
            s = C.dtype.type(0)
            for k in range(m):
                s += A[i, k] * B[k, j]
            C[i, j] = s


@njit(parallel=True, cache=True)
def _matmul_tiled(A: Any, B: Any, C: Any, tile: int) -> None:
    """Row tiles on threads; ``k`` and ``j`` tiles so the ``B`` block stays in cache;
    the innermost loop runs along contiguous rows of ``B`` and ``C`` (SIMD).  Indexing
    ``C[i, j]`` directly instead of through row slices kept LLVM from vectorizing it
    (3 against 11 GFLOP/s, float32 n = 1024)."""
    n, m = A.shape
    p = B.shape[1]
    nbi = (n + tile - 1) // tile
    for bi in prange(nbi):
        i0 = bi * tile
        i1 = min(i0 + tile, n)
        for k0 in range(0, m, tile):
            k1 = min(k0 + tile, m)
            for j0 in range(0, p, tile):
                j1 = min(j0 + tile, p)
                for i in range(i0, i1):
                    ci = C[i, j0:j1]  # row slices: unit-stride views the loop vectorizes
                    for k in range(k0, k1):
                        a = A[i, k]
                        bk = B[k, j0:j1]
                        for j in range(j1 - j0):
                            ci[j] += a * bk[j]


MATMUL_METHODS = ("tiled", "naive", "blas", "reference")
"""The ``method=`` names of :func:`tiled_matmul` (besides ``'auto'``)."""


@threads.parallel
def tiled_matmul(
    A: Any, B: Any, *, method: str = "tiled", device: str = "auto", tile: int = MATMUL_TILE
) -> np.ndarray:
    """Matrix product ``C = A @ B`` by one of the acceleration chapter's three rungs.

    .. math:: C_{ij} = \\sum_k A_{ik} B_{kj}

    Parameters
    ----------
    A, B : arrays (n, m) and (m, p)
        float32 or float64 (the result has their common type); torch CPU
        tensors are read as NumPy views, float16 and bfloat16 as float32, and
        integers as float64 (float32 for small ones) when every value is exact
        in it, else they are refused.
    method : {'tiled', 'naive', 'blas', 'reference', 'auto'}
        ``'naive'``: the ``i, j, k`` triple loop in numba, one thread.
        ``'tiled'``: ``tile``-blocked ``i, k, j`` loops, row tiles on numba
        threads.  ``'blas'``: ``np.matmul``.  ``'reference'``: ``np.matmul`` in
        float64, cast back.  ``'auto'``: the fastest, ``'blas'``.
    device : {'auto', 'cpu'}
        Every method runs on the CPU, where the matrices are read to.
    tile : int
        Tile edge for ``'tiled'`` (:data:`MATMUL_TILE`).

    Returns
    -------
    ndarray (n, p)

    Notes
    -----
    ``2 n m p`` flops whatever the method; the methods differ in how often
    each input is read from memory: ``'naive'`` streams a column of ``B`` per
    output element, ``'tiled'`` reads ``B`` ``n / tile`` times.  Sums are
    accumulated in the result dtype, in a different order per method.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.locality import tiled_matmul
    >>> A = np.arange(6.0).reshape(2, 3); B = np.ones((3, 2))
    >>> tiled_matmul(A, B, tile=2).tolist()
    [[3.0, 3.0], [12.0, 12.0]]
    """
    method, device = dispatch.method_device("tiled_matmul", method, device, MATMUL_BACKENDS)
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or tile < 1:
        raise ValueError(f"tile={tile!r}: must be an int >= 1")
    a, b = plain("A", A), plain("B", B)  # torch tensors viewed, bfloat16 as float32
    for nm, x in (("A", a), ("B", b)):
        if x.ndim != 2:
            raise ValueError(f"{nm} has shape {x.shape}: tiled_matmul takes 2-D matrices")
        if x.dtype.kind not in "fiu":
            raise TypeError(f"{nm} has dtype {x.dtype}: pass real float32 or float64 matrices")
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"A has shape {a.shape} and B has shape {b.shape}: inner sizes {a.shape[1]} and "
            f"{b.shape[0]} differ"
        )
    dt = np.result_type(a.dtype, b.dtype, np.float32)
    if dt not in (np.float32, np.float64):
        dt = np.dtype(np.float64)
    for nm, x in (("A", a), ("B", b)):
        at = inexact(x, dt)
        if at is not None:
            i = np.unravel_index(at, x.shape)
            raise ValueError(
                f"{nm}[{i[0]}, {i[1]}] = {x[i]} is not exactly a {dt} (it would become "
                f"{x[i].astype(dt)}): the product runs in float; cast {nm} yourself if the "
                "rounding is acceptable"
            )
    plan = _MatmulPlan(np.ascontiguousarray(a, dt), np.ascontiguousarray(b, dt), int(tile))
    # plain() has read A and B into host arrays (a dask array computed, a torch one viewed)
    key = dispatch.choose_on(MATMUL_BACKENDS, method, device, plan, "cpu", MATMUL_AUTO,
                             what="A, B")  # fmt: skip
    assert key is not None  # 'blas', the one 'auto' row, takes every plan on the CPU
    return MATMUL_BACKENDS[key].run(plan)


class _MatmulPlan(NamedTuple):
    """Checked, contiguous matrices of one float dtype, and the tile size."""

    a: np.ndarray
    b: np.ndarray
    tile: int


def _numba_matmul(kernel: Callable[..., None]) -> Callable[[_MatmulPlan], np.ndarray]:
    def run(p: _MatmulPlan) -> np.ndarray:
        C = np.zeros((p.a.shape[0], p.b.shape[1]), p.a.dtype)
        if C.size and p.a.shape[1]:
            kernel(p.a, p.b, C, p.tile)
        return C

    return run


MATMUL_BACKENDS: dict[tuple[str, str], dispatch.Backend[_MatmulPlan, np.ndarray]] = {
    ("tiled", "cpu"): dispatch.Backend(
        dispatch.takes_any, _numba_matmul(lambda a, b, C, t: _matmul_tiled(a, b, C, t))
    ),
    ("naive", "cpu"): dispatch.Backend(
        dispatch.takes_any, _numba_matmul(lambda a, b, C, t: _matmul_naive(a, b, C))
    ),
    ("blas", "cpu"): dispatch.Backend(dispatch.takes_any, lambda p: np.matmul(p.a, p.b)),
    ("reference", "cpu"): dispatch.Backend(
        dispatch.takes_any,
        lambda p: np.matmul(p.a.astype(np.float64), p.b.astype(np.float64)).astype(p.a.dtype),
    ),
}
"""Every ``(method, device)`` of :func:`tiled_matmul`: the same product, four ways."""

MATMUL_AUTO = (("blas", "cpu"),)
"""``method='auto'`` of :func:`tiled_matmul`: the fastest way, BLAS."""


@threads.parallel
def tiled_pairwise(
    kernel: Callable[..., Any],
    X: Any,
    weights: Any = None,
    *,
    args: tuple[Any, ...] = (),
    tile: int | None = 128,
) -> np.ndarray:
    """The full pair sum ``out_i = sum_{j != i} w_j f(x_i, x_j)``, with or without source tiles.

    Targets are processed in blocks of ``tile`` (one block per task); the
    sources are walked in tiles of ``tile`` points that stay in L1 while the
    block's targets pass over them.  ``tile=None`` runs the untiled loop
    (each target streams every source from wherever it lives) for comparison.
    Both evaluate ``f`` for every ordered pair; for a symmetric or
    antisymmetric ``f``, :func:`propopt.pairwise_sum` needs half the calls.

    Parameters
    ----------
    kernel, X, weights, args
        As in :func:`propopt.pairwise_sum` (``kernel(xi, xj, *args)`` returns a
        float or a tuple of floats).
    tile : int or None
        Points per tile, or ``None`` for no source tiles.

    Returns
    -------
    ndarray (n, k) or (n,)

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.locality import tiled_pairwise
    >>> def gaussian(xi, xj):
    ...     return np.exp(-((xi[0] - xj[0]) ** 2))
    >>> X = np.array([[0.0], [1.0], [5.0]])
    >>> np.allclose(tiled_pairwise(gaussian, X, tile=2), tiled_pairwise(gaussian, X, tile=None))
    True
    """
    from ..symmetry import pairwise_sum

    return pairwise_sum(
        kernel,
        X,
        weights,
        args=args,
        method="untiled" if tile is None else "full",
        tile=tile,
    )
