"""logaddexp's forward inclusive scan of one row on several threads, the log deferred.

The row is walked in super-blocks, as in ``_cpu_logsum._scan_1d``: thread 0
scans ``B0`` elements of each from the running carry; each other thread
owns ``BK`` elements, which it scans in two parallel regions:

* pass 1 (:func:`_pass1`), carry unknown: its block scanned from the
  identity by ``_cpu_logsum._tile``'s chunks without the ``log``: ``o[j]``
  gets the unlogged prefix ``K_c + e_0 + ... + e_j`` relative to the
  chunk's running maximum ``M_c``, kept in a small per-thread array; the
  block's state ``(M, S)`` joins the carries' chain;
* pass 2 (:func:`_pass2`), in the next region, block still in L2, carry
  ``(Mk, Sk)`` known: per chunk ``M' = max(Mk, M_c)``, ``f = exp(M_c - M')``,
  ``g = Sk exp(Mk - M')``, then per element ``o[j] = M' + log(o[j] f + g)``
  (one multiply-add and :func:`propopt.vmath.flog_normal`).

So every thread does about one tile's work per element (the ``exp`` pass, the
prefix sums and the ``log`` pass) instead of a reduce and a scan.

Fallbacks keep ``_cpu_logsum``'s semantics: a block holding a NaN or ``+inf``,
a tile whose first prefix in some chunk is below ``th`` (see below), or a
block not a whole number of tiles (the row's last) gets its state by
``_cpu_logsum._reduce`` in pass 1 and is scanned again in pass 2 by
``_cpu_logsum._block`` from the carry; so is every block whose carry is NaN or
``+inf``.

Why the ``th`` test of pass 1 still holds once the carry is added: ``th``
bounds, relative to an unlogged prefix ``p = o[j]``, the terms ``exp``
flushed to 0 (each below the smallest normal, at most one per element), so
``p`` has the relative precision of the float.  Pass 2 takes
``p f + g``, ``f, g >= 0``, and one of ``f`` and ``exp(Mk - M')`` is 1:

* ``f = 1`` (``M_c >= Mk``): ``p + g`` is a sum of two nonnegative terms,
  each as precise relative to itself, so relative to their sum; ``g``'s
  flushed part (``exp(Mk - M')`` below the smallest normal) is below
  ``Sk`` times that, negligible against ``p >= th``;
* ``f < 1`` (``Mk > M_c``): ``g = Sk >= 1`` (a state's ``S`` holds
  ``exp(0)`` for its maximum), so what ``f`` flushes in ``p f``, below the
  smallest normal, is negligible against ``g``.

And the argument of the ``log`` is a positive normal float (``>= th`` or
``>= 1``), except where ``M'`` is ``-inf`` (all of it so far ``-inf``):
the argument is then 0 and the output ``-inf``, as in ``_tile``.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from .. import vmath
from ._cpu_logsum_tile import FM, NC, NT, C, _as, _block, _join, _least, _max, _reduce, _scan_chunk, _value

#: Thread 0 scans ``1 + LEAD_SHARE[itemsize]`` times the elements of each other
#: thread: in cache on one thread of a 2-core AMD EPYC (``znver2``), a block
#: scanned 1.36 ns an element against pass 1 and pass 2 together 1.49 (pass 1
#: 0.84; float64 3.13 against 3.40), about 1.1 times as much.  Where thread
#: 1's blocks fall back (+inf or NaN, prefixes below ``th``) it reduces and
#: scans again; since the reduce stops at the first +inf and the saturated
#: fold fills whole tiles, that costs little.  Measured at 2^22, two threads,
#: quiet, float32 at 0.1, 0.15, 0.2, 0.25 and 0.35: U(0.5, 1) 4.00, 3.93,
#: 4.01, 4.09 and 4.21 ms; half +inf 2.05, 2.04, 1.97, 2.02 and 2.22;
#: 1e30 N(0, 1) (every tile falls back) 5.35, 5.42, 5.28, 5.17 and 5.00.
#: float64 at 0.1, 0.2 and 0.35: U(0.5, 1) 13.1, 13.6 and 13.8 ms.
LEAD_SHARE = {4: 0.15, 8: 0.1}


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _tile_unlogged(x, o, b, cm, cs, mcs, q, th, one, zero):  # type: ignore[no-untyped-def]
    """``_tile`` without its ``log``: the unlogged prefixes of x[b:b + NT] from state
    (cm, cs) into o, each chunk's maximum into mcs[q:q + NC]; returns (M, S, ok)."""
    ninf = _as(-np.inf, zero)
    ub = np.uintp(b)
    cc = np.uintp(C)
    m, k = cm, cs
    ok = True
    for c in range(np.uintp(NC)):
        xb = ub + c * cc
        mc = _max(x, xb, xb + cc, m)
        if mc > ninf:
            k = k * vmath.fexp_flush(m - mc)
        r = mc if mc > ninf else zero
        for j in range(cc):
            o[xb + j] = vmath.fexp_flush(x[xb + j] - r, one)
        k = _scan_chunk(o[xb : xb + cc], k)
        if mc > ninf:
            ok = ok and o[xb + _least(x, xb, m)] >= th  # the chunk's least prefix
        mcs[q + c] = mc
        m = mc
    return m, k, ok and k < np.inf and m < np.inf


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _pass1(x, o, lo, hi, mcs, th, one, zero):  # type: ignore[no-untyped-def]
    """The unlogged scan of x[lo:hi] from the identity; returns (M, S, deferred):
    ``deferred`` False where the block falls back (its state then by ``_reduce``)."""
    if (hi - lo) % NT == 0:
        m, s = _as(-np.inf, zero), zero
        ok = True
        for t in range((hi - lo) // NT):
            m, s, ok = _tile_unlogged(x, o, lo + t * NT, m, s, mcs, t * NC, th, one, zero)
            if not ok:
                break
        if ok:
            return m, s, True
    m, s = _reduce(x, lo, hi, one, zero)
    return m, s, False


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _pass2(x, o, lo, hi, mk, sk, mcs, deferred, th, one, zero):  # type: ignore[no-untyped-def]
    """x[lo:hi]'s outputs from carry (mk, sk): the logs of pass 1's prefixes
    rescaled, or where it fell back or the carry is NaN or +inf, ``_block``."""
    if not deferred or not (mk < np.inf):
        _block(x, o, lo, hi, mk, sk, th, one, zero, False, False)
        return
    ninf = _as(-np.inf, zero)
    ub = np.uintp(lo)
    cc = np.uintp(C)
    for c in range(np.uintp((hi - lo) // C)):
        mc = mcs[c]
        mp = mc if mc > mk else mk
        f = vmath.fexp_flush(mc - mp, one) if mc > ninf else zero
        g = sk * vmath.fexp_flush(mk - mp, one) if mk > ninf else zero
        xb = ub + c * cc
        for j in range(cc):
            o[xb + j] = mp + vmath.flog_normal(o[xb + j] * f + g, one)
        if mc > ninf and (c == 0 or not (mcs[c - 1] > ninf)):
            # the block's first chunk above -inf: its prefixes of -inf alone are
            # the carry's value (pass 1 left them 0)
            v = _value(mk, sk)
            for j in range(_least(x, xb, ninf)):
                o[xb + j] = v


@numba.njit(parallel=True, nogil=True, cache=True)
def scan_1d(x, o, T, BK, B0, th, one, zero):  # type: ignore[no-untyped-def]
    """The forward inclusive scan of one row on ``T`` threads: thread 0 scans ``B0``
    elements of each super-block, threads 1.. ``BK`` each in two passes, the second
    in the next region."""
    N = x.shape[0]
    ninf = _as(-np.inf, zero)
    tm = np.empty(T, x.dtype)
    ts = np.empty(T, x.dtype)
    km = np.empty(T, x.dtype)
    ksum = np.empty(T, x.dtype)
    dfr = np.zeros(T, np.bool_)
    mcs = np.empty((T, BK // C), x.dtype)
    m, s = ninf, zero
    SB = B0 + (T - 1) * BK
    nsb = (N + SB - 1) // SB
    for b in range(nsb + 1):
        s0 = b * SB
        for t in prange(T):
            if b > 0 and t > 0:
                plo = min(s0 - SB + B0 + (t - 1) * BK, N)
                _pass2(x, o, plo, min(plo + BK, N), km[t], ksum[t], mcs[t], dfr[t], th, one, zero)
            lo = min(s0 + (0 if t == 0 else B0 + (t - 1) * BK), N)
            hi = min(lo + (B0 if t == 0 else BK), N)
            if b < nsb:
                if t == 0:
                    m0, s0_ = _block(x, o, lo, hi, m, s, th, one, zero, False, False)
                    tm[t] = m0
                    ts[t] = s0_
                else:
                    m1, s1, d1 = _pass1(x, o, lo, hi, mcs[t], th, one, zero)
                    tm[t] = m1
                    ts[t] = s1
                    dfr[t] = d1
        if b < nsb:
            m, s = tm[0], ts[0]
            for t in range(1, T):
                km[t] = m
                ksum[t] = s
                m, s = _join(m, s, tm[t], ts[t], one, zero)
