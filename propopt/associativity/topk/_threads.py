"""The CPU backend of top-k: numba kernels on threads, sized per call.

One row of many elements is cut into pieces, one per thread, each filtered
by the GIL-free serial kernel and merged as sorted lists; many rows run in
one parallel region.  Long in-memory rows are first sampled along their
whole length, which seeds the filter with a lower bound on the k-th best.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import threads
from . import _cpu, _filter
from ._checks import kernel_view

#: Each thread's piece of a row holds at least this many elements times k
#: (below it, merging the per-thread candidates costs more than it saves).
MIN_PIECE_PER_K = 8

#: ... and at least this many elements (a parallel region costs ~10 µs).
MIN_PIECE = 1 << 16

#: A seeded call (a summary that already holds k pairs taking a chunk) only
#: filters, at memory speed; below this many elements it runs on the calling
#: thread, above it in one parallel region (no hand-off to a pool).
#: Filtering 100 seeded chunks of 10^6 float32: 12.7-13.5 ms on one thread,
#: 11.8 ms in parallel regions, 22.7-24.5 ms through the thread pool.
SEEDED_ONE_THREAD_BELOW = 1 << 18

#: An in-memory row at least this long, and this many times ``k``, is first
#: sampled along its whole length: the best ``k`` of a strided sample are
#: ``k`` real elements, so the ``k``-th of them is a lower bound for the
#: ``k``-th of the row and seeds the filter.  Without it a row in ascending
#: order raised the threshold element by element (10^8 float32, k = 1000:
#: 360-530 ms against 15-23 ms for the same values in random order).
SAMPLE_ABOVE = 1 << 22
SAMPLE_PER_K = 64
#: Sample size (elements, spread evenly over the row).
SAMPLE = 1 << 16


def _pieces(rows: int, n: int, k: int, seeded: bool = False) -> int:
    nthreads = _topk_cpu_threads()
    if rows >= nthreads or (seeded and rows * n < SEEDED_ONE_THREAD_BELOW):
        return 1
    per = max(MIN_PIECE, MIN_PIECE_PER_K * k)
    return max(1, min(nthreads // rows, n // per))


def _topk_cpu_threads() -> int:
    import numba

    return int(numba.get_num_threads())


_NO_IDS = np.empty(0, np.int64)


def best_positions(
    x2: np.ndarray,
    k: int,
    largest: bool,
    nanbig: bool,
    ids: np.ndarray | None = None,
    seed: tuple[Any, int] | None = None,
    ordered: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Kernel call: best ``min(k, n)`` positions per row of ``x2`` and the counts.

    With ``seed=(score, id)`` only pairs that beat it are returned.  With
    ``ordered=False`` a row's positions may come in any order (no final sort
    where that saves one).
    """
    n = x2.shape[1]
    kk = min(k, n)
    xv = np.ascontiguousarray(kernel_view(x2))
    has_ids = ids is not None
    idv = ids if ids is not None else _NO_IDS
    with threads.sized():
        sampled = False
        if seed is None and not has_ids and x2.shape[0] == 1:
            if n >= SAMPLE_ABOVE and n >= SAMPLE_PER_K * kk:
                got = _filter.top_row(xv[0], kk, largest, nanbig, ordered, _pieces(1, n, kk))
                if got is not None:
                    return got.reshape(1, kk), np.array([kk])
            bound = _sample_bound(xv[0], kk, largest, nanbig)
            if bound is not None:
                # pairs strictly beating a value just worse than the bound: every
                # element at least as good as the bound, ties included
                sampled, sv, sid = True, bound, np.int64(-1)
        if not sampled:
            sv = kernel_view(np.asarray([seed[0] if seed else 0], x2.dtype))[0]
            sid = np.int64(seed[1] if seed else 0)
        return _best_positions_sized(
            x2,
            kk,
            largest,
            nanbig,
            xv,
            idv,
            has_ids,
            seed if not sampled else (sv, -1),
            sv,
            sid,
            sampled,
            ordered,
        )


def _sample_bound(xv: np.ndarray, k: int, largest: bool, nanbig: bool) -> Any:
    """A value just worse than the ``k``-th best of a strided sample of ``xv``, or None.

    The sample's best ``k`` are ``k`` elements of the row, so every element of
    the row's best ``k`` is at least as good as the sample's ``k``-th: all of
    them beat the returned value strictly.  None for short rows, too few
    non-NaN samples, or a ``k``-th best with nothing worse than it.
    """
    n = xv.shape[0]
    if n < SAMPLE_ABOVE or n < SAMPLE_PER_K * k:
        return None
    stride = n // max(SAMPLE, SAMPLE_PER_K * k // 4)
    sample = np.ascontiguousarray(xv[::stride])
    # unsorted: only the k-th best (the worst of the k) is needed
    best, _ = _cpu.topk_one(
        sample, _NO_IDS, False, k, largest, nanbig, False, sample[0], np.int64(0), False
    )
    if best.shape[0] < k:
        return None
    vals = sample[best]
    if xv.dtype.kind == "f":
        nans = np.isnan(vals)
        if nans.all() or (nans.any() and not largest):  # a NaN is the k-th best
            return None
        vals = vals[~nans]
    v = vals.min() if largest else vals.max()
    if xv.dtype.kind == "f":
        if np.isinf(v):
            return None
        return np.nextafter(v, -np.inf if largest else np.inf, dtype=xv.dtype)
    info = np.iinfo(xv.dtype)
    if v == (info.min if largest else info.max):
        return None
    return xv.dtype.type(v - 1 if largest else v + 1)


def _best_positions_sized(
    x2: np.ndarray,
    kk: int,
    largest: bool,
    nanbig: bool,
    xv: np.ndarray,
    idv: np.ndarray,
    has_ids: bool,
    seed: tuple[Any, int] | None,
    sv: Any,
    sid: Any,
    sampled: bool = False,
    ordered: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    rows, n = x2.shape
    pieces = _pieces(rows, n, kk, seed is not None and not sampled)
    if rows == 1 and pieces == 1:
        p1, _ = _cpu.topk_one(
            xv[0], idv, has_ids, kk, largest, nanbig, seed is not None, sv, sid, ordered
        )
        pos = np.zeros((1, kk), np.int64)
        pos[0, : p1.shape[0]] = p1
        return pos, np.array([p1.shape[0]])
    if rows == 1 and (seed is None or sampled):
        p1 = _one_row_threads(
            xv[0], idv, has_ids, kk, pieces, largest, nanbig, seed, sv, sid, ordered
        )
        pos = np.zeros((1, kk), np.int64)
        pos[0, : p1.shape[0]] = p1
        return pos, np.array([p1.shape[0]])
    pos, counts, _ = _cpu.topk_rows(
        xv, idv, has_ids, kk, pieces, largest, nanbig, seed is not None, sv, sid, ordered
    )
    return pos, counts


def _one_row_threads(
    x: np.ndarray,
    idv: np.ndarray,
    has_ids: bool,
    k: int,
    pieces: int,
    largest: bool,
    nanbig: bool,
    seed: Any,
    sv: Any,
    sid: Any,
    ordered: bool = True,
) -> np.ndarray:
    """One long row: a piece per thread through the GIL-free serial kernel, then merges.

    Sorted pieces are merged as sorted lists; with ``ordered=False`` the
    pieces stay unsorted and the best ``k`` of their candidates are selected
    by the same kernel (no sort anywhere).

    Python threads rather than a numba parallel region: on a 2-core machine
    shared with other work, a parallel region's barrier waits (spinning)
    for a descheduled thread; measured under load at n = 10^7, the region
    took 112 ms against 31 ms for threads that block on their result.
    """
    pool = threads.workers(max(1, pieces - 1))  # the calling thread takes piece 0
    n = x.shape[0]
    step = (n + pieces - 1) // pieces

    def run(q: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = q * step, min(n, (q + 1) * step)
        ids = idv[a:b] if has_ids else idv
        p, _ = _cpu.topk_one(  # sorted lists merge in O(k)
            x[a:b], ids, has_ids, k, largest, nanbig, seed is not None, sv, sid, ordered
        )
        p = p + a
        return p, (idv[p] if has_ids else p)

    # the calling thread takes piece 0 itself: one hand-off fewer
    futures = [pool.submit(run, q) for q in range(1, pieces)]
    parts = [run(0)] + [f.result() for f in futures]
    if not ordered:
        cand = np.concatenate([p for p, _ in parts])
        cids = np.concatenate([i for _, i in parts])
        at, _ = _cpu.topk_one(x[cand], cids, True, k, largest, nanbig, False, sv, sid, False)
        return cand[at]
    pos, ids = parts[0]
    for p2, i2 in parts[1:]:
        side, at = _cpu.merge_two(x[pos], ids, x[p2], i2, k, largest, nanbig)
        first = side == 0
        npos = np.empty(side.shape[0], np.int64)
        nids = np.empty(side.shape[0], np.int64)
        npos[first], nids[first] = pos[at[first]], ids[at[first]]
        npos[~first], nids[~first] = p2[at[~first]], i2[at[~first]]
        pos, ids = npos, nids
    return pos
