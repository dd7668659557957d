"""logaddexp's own CPU scan: one ``exp`` per element and one ``log`` per output.

The generic kernels (``_cpu.py``) run ``logaddexp`` as a tree of combines,
each an ``exp`` and a ``log1p``, over ``log2`` of the tile's levels.  Here a
prefix is kept as a pair ``(M, S)`` standing for ``M + log(S)``, as in the
online softmax.  A tile of ``NT`` elements is cut into ``NC`` chunks of ``C``,
each done in turn (``C`` elements of scratch ``e``, in L1):

* ``M_c``, the running maximum at the end of chunk ``c`` (a vector maximum),
  and the carry rescaled to it, ``K <- K exp(M_{c-1} - M_c)``;
* ``e_j = exp(x_j - M_c)`` (vectorized: :func:`propopt.vmath.fexp_flush`);
* ``e_j <- K + e_0 + ... + e_j``, by vectors of one register: each scanned
  in its register by shifted adds, then given the running carry
  (:func:`_scan_chunk`); ``K`` becomes the last;
* ``out_j = M_c + log(e_j)`` (vectorized: :func:`propopt.vmath.flog_normal`).

``fexp_flush`` and ``flog_normal`` get the dtype's 1 as a run-time argument, so
that their constants stay in registers in these loops (see ``fexp``).

Cost, in cache on one thread of a 2-core AMD EPYC (``znver2``, AVX2),
quietest of 15 runs on the shared machine: a float32 tile 1.32 ns an
element, of which ``exp`` 0.43, ``log`` 0.40, the prefix sums 0.28 and the
rest (maxima, carries, the passes' loads and stores) 0.23; float64 3.08
(``exp`` 1.25, ``log`` 1.17, prefix sums 0.35, the rest 0.31).  Before
(constants reloaded in each iteration, ``floor`` and clamps in ``exp``, a
compare and select in ``log``, longer series, 16 interleaved scalar prefix
chains): 1.89 and 5.05.

A tile falls back to the plain sequential fold of the scalar combine when it
holds a NaN or ``+inf`` (found in its totals, not by a pass of its own), or
when some ``e_j`` is below ``2^-60`` (float32; ``2^-900``
float64), where the terms that ``exp`` flushed to zero could matter (a
prefix far below its chunk's maximum).  Prefixes of ``-inf`` alone (before
the first element above ``-inf``, from the identity) are exactly 0, not
flushed: the test starts after them and their outputs are ``-inf`` (the
carry's value on threads 1..), so mostly ``-inf`` data is scanned, not
folded.  A last part tile of at least ``PAD_MIN`` elements (a short row, the
end of a long one) is scanned padded with ``-inf`` to whole chunks; a shorter
one is folded.  From a NaN or ``+inf`` carry the
rest is written as the fold gives it (NaN; ``+inf`` up to the first NaN).
So NaN, ``+inf`` and the identity ``-inf`` give what the fold gives.  The
rounding differs from the fold's and between thread counts (the carries
combine in another order): within 2e-5 of the float64 fold in float32 and
1e-12 in float64 in tests/associativity/test_scan_logsum.py.

A reverse or exclusive scan scans each tile in scratch and copies it out
reversed or shifted by one (the carry's value first).  Scans along another
axis keep the generic kernels.

Threads: the array is walked in super-blocks, as in ``_cpu_tile``'s
reduce-then-scan; thread 0 scans its block from the running carry.  In a
forward inclusive scan the other parts are scanned from the identity
without the ``log`` (the unlogged prefixes and each chunk's maximum kept)
and, a super-block later with the carry known, each output's ``log`` is
taken with the carry folded in by one multiply-add, all in one parallel
region (``_cpu_logsum_threads.py``, which also gives the fallbacks): in cache on one
thread, float32, 1.49 ns an element against 1.99 for a reduce (a maximum and
a sum of ``exp(x - M)``, read only) and a scan, which reverse and exclusive
scans still do, the scan of the super-block before while it is in cache.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba import prange

from .. import threads
from .._memory import settle_allocator
from . import _cpu_logsum_threads as lt
from ._cpu_logsum_tile import (
    FM as FM,
    NT as NT,
    C as C,
    _as,
    _block,
    _join,
    _reduce,
    _tile as _tile,
)
from .monoid import _logaddexp

#: Bytes of input of one thread's block per super-block (fits the 512 KiB L2).
BLOCK_BYTES = 256 * 1024

#: In reverse and exclusive scans, thread 0 scans ``1 + LEAD_SHARE[itemsize]``
#: times the elements of each other thread, which also reduce theirs: in cache
#: on one thread of a 2-core AMD EPYC (``znver2``), float32, a block scanned
#: 1.30 ns an element and reduced 0.61 (float64 3.11 and 1.22), so that thread
#: 0 takes about 1.45 (1.4) times as many.
LEAD_SHARE = {4: 0.45, 8: 0.4}


def serves(monoid: Any, leaves: Sequence[Any], axis: int, reverse: bool, exclusive: bool) -> bool:
    """Whether :func:`scan` runs this scan itself: a ``logaddexp`` scan (either direction,
    inclusive or exclusive) of one float32 or float64 array along its last axis."""
    del reverse, exclusive  # all four variants
    if getattr(monoid, "scalar", None) is not _logaddexp or len(leaves) != 1:
        return False
    x = leaves[0]
    nd = getattr(x, "ndim", 0)
    return (
        nd >= 1 and axis in (-1, nd - 1) and getattr(x, "dtype", None) in (np.float32, np.float64)
    )


@numba.njit(parallel=True, nogil=True, cache=True)
def _scan_1d(x, o, T, BK, B0, th, one, zero, rev, excl):  # type: ignore[no-untyped-def]
    """Scan one row on ``T`` threads: thread 0 scans ``B0`` elements of each
    super-block, threads 1.. reduce ``BK`` each and scan them in the next region."""
    N = x.shape[0]
    ninf = _as(-np.inf, zero)
    tm = np.empty(T, x.dtype)
    ts = np.empty(T, x.dtype)
    km = np.empty(T, x.dtype)
    ksum = np.empty(T, x.dtype)
    m, s = ninf, zero
    SB = B0 + (T - 1) * BK
    nsb = (N + SB - 1) // SB
    for b in range(nsb + 1):
        s0 = b * SB
        for t in prange(T):
            if b > 0 and t > 0:
                plo = min(s0 - SB + B0 + (t - 1) * BK, N)
                _block(x, o, plo, min(plo + BK, N), km[t], ksum[t], th, one, zero, rev, excl)
            lo = min(s0 + (0 if t == 0 else B0 + (t - 1) * BK), N)
            hi = min(lo + (B0 if t == 0 else BK), N)
            if b < nsb:
                if t == 0:
                    r = _block(x, o, lo, hi, m, s, th, one, zero, rev, excl)
                else:
                    r = (
                        _reduce(x, N - hi, N - lo, one, zero)
                        if rev
                        else _reduce(x, lo, hi, one, zero)
                    )
                tm[t] = r[0]
                ts[t] = r[1]
        if b < nsb:
            m, s = tm[0], ts[0]
            for t in range(1, T):
                km[t] = m
                ksum[t] = s
                m, s = _join(m, s, tm[t], ts[t], one, zero)


@numba.njit(parallel=True, nogil=True, cache=True)
def _scan_rows(x, o, th, one, zero, rev, excl):  # type: ignore[no-untyped-def]
    ninf = _as(-np.inf, zero)
    for p in prange(x.shape[0]):
        _block(x[p], o[p], 0, x.shape[1], ninf, zero, th, one, zero, rev, excl)


def _consts(dtype: np.dtype) -> tuple[Any, Any, Any]:
    """``th`` (see the module docstring), one and zero in ``dtype``."""
    th = 2.0**-60 if dtype == np.float32 else 2.0**-900
    return dtype.type(th), dtype.type(1), dtype.type(0)


def scan(
    x: np.ndarray, out: np.ndarray | None = None, reverse: bool = False, exclusive: bool = False
) -> np.ndarray:
    """The ``logaddexp`` scan of ``x`` (float32 or float64) along its last axis (from the
    last element to the first where ``reverse``; each output leaving its own element
    out where ``exclusive``)."""
    x = np.ascontiguousarray(x)
    shape, n = x.shape, x.shape[-1]
    p = math.prod(shape[:-1])
    x2 = x.reshape(p, n)
    if out is None:
        if x.nbytes >= 1 << 17:
            settle_allocator()
        # not faulted in first (mapped_empty): where pages are not yet mapped the
        # threads that write them map them, while they compute (2^22, two threads,
        # quiet, 3 rounds, results reassigned: forward 1.88-2.05x np.copy against
        # 1.99-2.13x, rows 1.69-1.87x against 1.78-1.95x, reverse 2.83-3.11x
        # against 2.92-3.16x; float64, a fresh 32 MiB mapping each call: forward
        # 2.00-2.11x against 2.22-2.38x, reverse 2.51-2.53x against 2.90-2.92x)
        out = np.empty(shape, x.dtype)
    o2 = out.reshape(p, n)
    k = _consts(x.dtype)
    rev, excl = bool(reverse), bool(exclusive)
    bk = max(NT, BLOCK_BYTES // x.itemsize // NT * NT)
    ninf = x.dtype.type(-np.inf)
    if p * n <= 2 * bk:
        for r in range(p):
            _block(x2[r], o2[r], 0, n, ninf, k[2], *k, rev, excl)
        return out
    with threads.sized() as T:
        if T == 1:
            for r in range(p):
                _block(x2[r], o2[r], 0, n, ninf, k[2], *k, rev, excl)
        elif p >= 2 * T or n <= 2 * bk:
            _scan_rows(x2, o2, *k, rev, excl)
        else:
            fwd = not rev and not excl
            share = (lt.LEAD_SHARE if fwd else LEAD_SHARE)[x.itemsize]
            b0 = bk + int(bk * share) // NT * NT
            for r in range(p):
                if fwd:
                    lt.scan_1d(x2[r], o2[r], T, bk, b0, *k)
                else:
                    _scan_1d(x2[r], o2[r], T, bk, b0, *k, rev, excl)
    return out
