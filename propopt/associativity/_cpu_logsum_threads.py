"""logaddexp's forward inclusive scan of one row on several threads, the log deferred.

The row is walked in super-blocks, as in ``_cpu_logsum._scan_1d``: part 0
of each (``B0`` elements) is scanned from the running carry; each other part
(``BK`` elements) in two passes:

* pass 1 (:func:`_pass1`), carry unknown: the part scanned from the
  identity by ``_cpu_logsum._tile``'s chunks without the ``log``: ``o[j]``
  gets the unlogged prefix ``K_c + e_0 + ... + e_j`` relative to the
  chunk's running maximum ``M_c``, kept in a small array; the part's state
  ``(M, S)`` joins the carries' chain;
* pass 2 (:func:`_pass2`), a super-block later, the part still in cache, carry
  ``(Mk, Sk)`` known: per chunk ``M' = max(Mk, M_c)``, ``f = exp(M_c - M')``,
  ``g = Sk exp(Mk - M')``, then per element ``o[j] = M' + log(o[j] f + g)``
  (one multiply-add and :func:`propopt.vmath.flog_normal`).

So every element costs about one tile's work (the ``exp`` pass, the prefix
sums and the ``log`` pass) instead of a reduce and a scan.  The parts are
work items that the threads take in order, in one parallel region
(:func:`scan_1d`).

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

from .. import threads, vmath
from ._cpu_logsum_tile import (
    FM,
    NC,
    NT,
    C,
    _as,
    _block,
    _join,
    _least,
    _max,
    _reduce,
    _scan_chunk,
    _value,
)

#: Part 0 of a super-block holds ``1 + LEAD_SHARE[itemsize]`` times the
#: elements of each other part: in cache on one thread of a 2-core AMD EPYC
#: (``znver2``), part 0 costs 1.36 ns an element against pass 1 and pass 2
#: together 1.49 (pass 1 0.84; float64 3.13 against 3.40).  Measured at 2^22,
#: two threads, one region, quiet, float32 at 0, 0.1, 0.2 and 0.3: U(0.5, 1)
#: 3.69, 3.68, 3.73 and 3.85 ms; N(0, 1) 3.63, 3.65, 3.74 and 3.79; 1e30 N(0, 1)
#: (every tile falls back) 4.60, 4.50, 4.48 and 4.50.  float64 at 0, 0.1 and
#: 0.2: U(0.5, 1) 12.3, 12.1 and 12.6 ms.
LEAD_SHARE = {4: 0.1, 8: 0.1}


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


@numba.njit(nogil=True, cache=True, fastmath=FM)
def _carry(am, as_, pm, ps, b, t, one, zero):  # type: ignore[no-untyped-def]
    """The state before part ``t`` of super-block ``b``: the state after its part 0
    joined with the states of its parts 1..t-1."""
    m, s = am[b], as_[b]
    for u in range(1, t):
        m, s = _join(m, s, pm[b, u], ps[b, u], one, zero)
    return m, s


@numba.njit(parallel=True, nogil=True, cache=True)
def scan_1d(x, o, T, BK, B0, th, one, zero):  # type: ignore[no-untyped-def]
    """The forward inclusive scan of one row on ``T`` threads in one parallel region.

    Super-block ``b`` has part 0 (``B0`` elements, scanned from the carry) and
    parts ``t`` = 1..T-1 (``BK`` each, pass 1 and, once the carry is known,
    pass 2).  The threads take work items in this order, each for step
    ``b`` = 0..nsb: pass 1 of the parts of ``b``, pass 2 of the parts of
    ``b - 1``, part 0 of ``b``.  An item depends only on items before it
    (part 0 of ``b`` on part 0 and the passes 1 of ``b - 1``; pass 2 of part
    ``t`` of ``b - 1`` on part 0 and the passes 1 of parts 1..t of ``b - 1``,
    its own included), so a thread that must wait waits for a running one, and
    one thread alone never waits.  A wait spins: the regions per super-block that this replaces each
    cost about 16 us (waking the pool's threads) on a 2-core AMD EPYC.
    """
    N = x.shape[0]
    P = T - 1
    SB = B0 + P * BK
    nsb = (N + SB - 1) // SB
    per = 2 * P + 1  # items per step
    nitems = (nsb + 1) * per
    counter = np.zeros(1, np.int64)
    done = np.zeros(nitems, np.int64)
    am = np.empty(nsb, x.dtype)  # the state after part 0 of each super-block
    as_ = np.empty(nsb, x.dtype)
    pm = np.empty((nsb, T), x.dtype)  # pass 1's states of parts 1..
    ps = np.empty((nsb, T), x.dtype)
    dfr = np.zeros((nsb, T), np.bool_)
    mcs = np.empty((nsb, T, BK // C), x.dtype)
    ninf = _as(-np.inf, zero)
    for _ in prange(T):
        while True:
            i = threads.take(counter)
            if i >= nitems:
                break
            b, r = i // per, i % per
            if r < P:  # pass 1 of part t of b
                t = r + 1
                if b < nsb:
                    lo = min(b * SB + B0 + (t - 1) * BK, N)
                    m1, s1, d1 = _pass1(x, o, lo, min(lo + BK, N), mcs[b, t], th, one, zero)
                    pm[b, t] = m1
                    ps[b, t] = s1
                    dfr[b, t] = d1
            elif r < 2 * P:  # pass 2 of part t of b - 1
                t = r - P + 1
                c = b - 1
                if c >= 0:
                    threads.wait_for(done, c * per + 2 * P)
                    for u in range(1, t + 1):  # its own pass 1 too
                        threads.wait_for(done, c * per + u - 1)
                    mk, sk = _carry(am, as_, pm, ps, c, t, one, zero)
                    lo = min(c * SB + B0 + (t - 1) * BK, N)
                    _pass2(x, o, lo, min(lo + BK, N), mk, sk, mcs[c, t], dfr[c, t], th, one, zero)
            elif b < nsb:  # part 0 of b
                m, s = ninf, zero
                if b > 0:
                    threads.wait_for(done, (b - 1) * per + 2 * P)
                    for u in range(1, T):
                        threads.wait_for(done, (b - 1) * per + u - 1)
                    m, s = _carry(am, as_, pm, ps, b - 1, T, one, zero)
                lo = min(b * SB, N)
                m0, s0 = _block(x, o, lo, min(lo + B0, N), m, s, th, one, zero, False, False)
                am[b] = m0
                as_[b] = s0
            threads.publish(done, i)
