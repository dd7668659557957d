"""Numba kernels of the mutual fast multipole method (self-gravity: the targets are the sources).

Dehnen's scheme (falcON, J. Comput. Phys. 179, 27, 2002), on the pre-order
octrees of :mod:`._build`: one traversal of cell *pairs*, each unordered pair
visited once for both of its cells (``interact``, generated per order by
:func:`source`).

* A well-separated pair ``(A, B)``, ``r_A + r_B < theta |z_A - z_B|``, is one
  mutual M2L: the derivatives of the softened ``1/r`` are computed once at
  ``R = z_A - z_B`` and give both local expansions, since
  ``D_n(-R) = (-1)^|n| D_n(R)`` (:func:`m2l_source`: straight-line code per
  order).  The traversal collects :data:`BATCH` such pairs and translates
  them in one loop over the pairs that LLVM vectorizes
  (:func:`m2l_batch_source`).
* A pair whose body pairs cost less than that (``n_A n_B <= cheap``), or two
  leaves, is listed for the near field; a leaf with itself too.
* Otherwise the larger cell is split; a cell with itself becomes its
  children with themselves and with each other.

Per task, the near field then runs per target cell (:func:`near_bodies`):
the bodies of all its near partners gathered into one buffer, each body
summed one way in the tree walk's float32 loop.  Summing each body pair once
for both bodies was measured slower on AVX2/AVX-512 (docs/nbody.md,
section 7).  The separated pairs' interactions are antisymmetric, and the
near field's two sides of a pair agree to float32 rounding, so
``sum_i m_i a_i`` vanishes to rounding.

Threads write to two cells per interaction.  A cover of disjoint subtrees
(:func:`propopt_case_studies.nbody.fmm._items`) is paired up in rounds
(:func:`propopt_case_studies.nbody.fmm._schedule`): in each round every
subtree takes part in at most one task, so no two threads write the same
cell or body, without locks; every cell sees its interactions in one fixed
order, so the result does not depend on the thread count.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from propopt import jit
from propopt.separability.expansions import expansion_tables, l2l, l2p
from propopt.symmetry import spline_kernel
from propopt.threads import take

from ._near import CLOSE, TINY, near_field_checked

_INTERNAL = dict(no_cpython_wrapper=True, no_cfunc_wrapper=True)

# numba keys the on-disk cache of this file's kernels on this file alone: after editing
# _near.py (near_field_checked is compiled into near_bodies), change this line so that
# they recompile.
DEPENDS_ON = "_near.near_field_checked, CLOSE, TINY; propopt.threads.take"


@njit(cache=True, fastmath=True, error_model="numpy", **_INTERNAL)
def _near64(t, j0, j1, x, y, z, w, e2, spline):  # pragma: no cover - numba
    """Body ``t``'s pull from the bodies ``j0:j1`` in float64 (``psi, grad psi``)."""
    psi = 0.0
    gx = 0.0
    gy = 0.0
    gz = 0.0
    for j in range(j0, j1):
        if j == t:
            continue
        dx = x[j] - x[t]
        dy = y[j] - y[t]
        dz = z[j] - z[t]
        r2 = dx * dx + dy * dy + dz * dz
        if spline:
            h2 = max(e2[t], e2[j])
            if r2 == 0.0 and h2 == 0.0:
                continue
            g, p = spline_kernel(r2, np.sqrt(h2))
            psi -= w[j] * p
        else:
            s2 = r2 + 0.5 * (e2[t] + e2[j])
            if s2 == 0.0:
                continue
            inv = 1.0 / np.sqrt(s2)
            g = inv * inv * inv
            psi += w[j] * inv
        gx += w[j] * g * dx
        gy += w[j] * g * dy
        gz += w[j] * g * dz
    return psi, gx, gy, gz


@njit(cache=True, error_model="numpy", **_INTERNAL)
def near_bodies(near, nn, lo, hi, start, rec, x, y, z, w, e2, out, nb,
                spline):  # fmt: skip  # pragma: no cover - numba
    """The body pairs of the cell pairs ``near[:nn]`` (``(a, b)``: both ways; ``(a, a)``: the
    pairs within ``a``), added to ``out`` (rows ``dpsi/dx, dpsi/dy, dpsi/dz, psi``).

    The cells lie in the node ranges ``lo[0]:hi[0]`` and ``lo[1]:hi[1]`` (a
    task's two subtrees), by which the pairs are grouped per target cell
    (a counting sort).  Per target cell the bodies of all its partners are
    gathered into one buffer (``nb``: x, y, z relative to the cell's centre,
    m, eps^2), and each of its bodies runs down it in one loop that LLVM
    vectorizes (:func:`._near.near_field_checked`, float32).  A body with a
    partner closer than ``CLOSE`` times its cell's radius, besides itself,
    is summed again in float64, as in the tree walk and the one-way FMM;
    with ``spline`` every body is (:func:`_near64`).  A body's own entry in
    the buffer weighs 0 in its own sum.  Returns the buffer, grown as needed.

    Summing each pair once for both bodies was measured slower here: in
    float32, with an approximate reciprocal square root, a pair costs
    little beside the read-modify-write of the partner's four sums (0.78 ns
    a pair for both bodies against 0.31 ns a body one way, 2 cores).
    """
    n0 = hi[0] - lo[0]
    size = n0 + hi[1] - lo[1]
    ptr = np.zeros(size + 1, np.int64)
    for q in range(nn):
        for s in range(2):
            a = near[q, s]
            ptr[(a - lo[0] if a < hi[0] else n0 + a - lo[1]) + 1] += 1
            if near[q, 0] == near[q, 1]:
                break
    for i in range(size):
        ptr[i + 1] += ptr[i]
    src = np.empty(ptr[size], np.int64)
    for q in range(nn):
        for s in range(2):
            a = near[q, s]
            k = a - lo[0] if a < hi[0] else n0 + a - lo[1]
            src[ptr[k]] = near[q, 1 - s]
            ptr[k] += 1
            if near[q, 0] == near[q, 1]:
                break
    c = np.array([0.0, 0.5, 1.0], np.float32)
    g0 = 0
    for k in range(size):
        g1 = ptr[k]
        if g1 == g0:
            continue
        a = lo[0] + k if k < n0 else lo[1] + k - n0
        nq = 0
        own = False
        for g in range(g0, g1):
            nq += int(rec[src[g], 7])
            own = own or src[g] == a
        if nq > nb.shape[1]:
            nb = np.empty((5, 2 * nq), np.float32)
        ox = rec[a, 0]
        oy = rec[a, 1]
        oz = rec[a, 2]
        q = 0
        mine = -1  # where the cell's own bodies begin in the buffer
        if not spline:
            for g in range(g0, g1):
                b = src[g]
                if b == a:
                    mine = q
                for j in range(start[b], start[b] + int(rec[b, 7])):
                    nb[0, q] = x[j] - ox
                    nb[1, q] = y[j] - oy
                    nb[2, q] = z[j] - oz
                    nb[3, q] = w[j]
                    nb[4, q] = e2[j]
                    q += 1
        thr2 = np.float32(max(CLOSE * CLOSE * rec[a, 3] * rec[a, 3], TINY * TINY))
        allowed = 1.0 if own else 0.0
        for t in range(start[a], start[a] + int(rec[a, 7])):
            close = 2.0
            if not spline:
                if mine >= 0:  # the body itself weighs nothing in its own sum
                    wt = nb[3, mine + t - start[a]]
                    nb[3, mine + t - start[a]] = 0.0
                p, gx, gy, gz, close = near_field_checked(
                    np.float32(x[t] - ox), np.float32(y[t] - oy), np.float32(z[t] - oz),
                    np.float32(e2[t]), nb, nq, c, thr2,
                )  # fmt: skip
                if mine >= 0:
                    nb[3, mine + t - start[a]] = wt
            if spline or close > allowed:
                p = gx = gy = gz = 0.0
                for g in range(g0, g1):
                    b = src[g]
                    p1, gx1, gy1, gz1 = _near64(t, start[b], start[b] + int(rec[b, 7]), x, y, z,
                                                w, e2, spline)  # fmt: skip
                    p += p1
                    gx += gx1
                    gy += gy1
                    gz += gz1
            out[0, t] += gx
            out[1, t] += gy
            out[2, t] += gz
            out[3, t] += p
        g0 = g1
    return nb


@njit(cache=True, nogil=True, error_model="numpy")
def downward(counter, items, nxt, leaf, parent, ctr, start, end, L, x, y, z, mono, trip, grad,
             out):  # fmt: skip  # pragma: no cover - numba
    """L2L down each subtree ``items[...]`` (pre-order: parents first), L2P at the leaves.

    Adds each body's far field to ``out`` (rows ``dpsi/dx, dpsi/dy, dpsi/dz, psi``).
    """
    w = np.empty(L.shape[1])
    while True:
        it = take(counter)
        if it >= items.shape[0]:
            break
        a0 = items[it]
        for a in range(a0, nxt[a0]):
            if a > a0:
                u = parent[a]
                l2l(L[u], ctr[a, 0] - ctr[u, 0], ctr[a, 1] - ctr[u, 1], ctr[a, 2] - ctr[u, 2],
                    mono, trip, L[a])  # fmt: skip
            if leaf[a]:
                for t in range(start[a], end[a]):
                    psi, gx, gy, gz = l2p(L[a], x[t] - ctr[a, 0], y[t] - ctr[a, 1],
                                          z[t] - ctr[a, 2], mono, grad, w)  # fmt: skip
                    out[0, t] += gx
                    out[1, t] += gy
                    out[2, t] += gz
                    out[3, t] += psi


# ------------------------------------------------ the traversal, generated per order
UNROLLED = 6
"""The highest order of the mutual method: its M2L is straight-line code per order
(:func:`m2l_source`), which takes longer to compile as the order grows (5-8 s at 6)."""


def _m2l_lines(
    p: int,
    pad: str,
    ma: Callable[[int], str],
    mb: Callable[[int], str],
    la: Callable[[int], str],
    lb: Callable[[int], str],
    op: str,
) -> list[str]:
    """The statements of the mutual M2L of order ``p`` (after ``i2`` and ``D0``), indented by
    ``pad``: multipole term ``v`` read as ``ma(v)``, local term ``u`` written ``la(u) op``."""
    tab = expansion_tables(p)
    deg = tab.idx.sum(axis=1)
    lines = []
    R = ("dx", "dy", "dz")
    for t in range(1, tab.nterms):
        terms = []
        for i in range(3):
            j, c = int(tab.rec1[t, i, 0]), float(tab.rec1[t, i, 1])
            if c != 0.0:
                terms.append(f"{c!r} * {R[i]} * D{j}")
            j, c = int(tab.rec2[t, i, 0]), float(tab.rec2[t, i, 1])
            if c != 0.0:
                terms.append(f"{c!r} * D{j}")
        lines.append(f"{pad}D{t} = ({' + '.join(terms)}) * i2")
    for v in range(tab.nterms):
        if deg[v] != 1:
            lines.append(f"{pad}ma{v} = {ma(v)}")
            lines.append(f"{pad}mb{v} = {mb(v)}")
    by_u: dict[int, list[tuple[int, int]]] = {}
    for s_, u, v in tab.trip:
        if deg[v] != 1:
            by_u.setdefault(int(u), []).append((int(s_), int(v)))
    for u, sv in sorted(by_u.items()):
        a = " + ".join(f"mb{v} * D{s_}" for s_, v in sv)
        b = " + ".join(f"{'-' if deg[s_] % 2 else ''}ma{v} * D{s_}" for s_, v in sv)
        lines.append(f"{pad}{la(u)} {op} {a}")
        lines.append(f"{pad}{lb(u)} {op} {b}")
    return lines


def m2l_source(p: int) -> str:
    """Source of ``m2l(dx, dy, dz, e2, Ma, Mb, La, Lb)``: the mutual M2L of order ``p``, unrolled.

    The derivatives of ``(|R|^2 + e2)^(-1/2)`` at ``R = (dx, dy, dz)`` by the
    recurrence of :func:`propopt.separability.expansions.derivatives`, then
    ``La[k] += sum_n Mb[n] D_{n+k}(R)`` and ``Lb[k] += sum_n Ma[n] D_{n+k}(-R)``,
    the signs ``(-1)^|n+k|`` folded in as constants; dipole terms of the
    multipoles (0 about a centre of mass) are left out.
    """
    lines = [
        "@njit(cache=True, fastmath=True, error_model='numpy', inline='always')",
        "def m2l(dx, dy, dz, e2, Ma, Mb, La, Lb):",
        "    i2 = 1.0 / (dx * dx + dy * dy + dz * dz + e2)",
        "    D0 = np.sqrt(i2)",
    ]
    lines += _m2l_lines(p, "    ", "Ma[{}]".format, "Mb[{}]".format, "La[{}]".format,
                        "Lb[{}]".format, "+=")  # fmt: skip
    return "\n".join(lines) + "\n"


BATCH = 64
"""Separated pairs the mutual traversal collects before their M2L (:func:`m2l_batch_source`)."""


def m2l_batch_source(p: int) -> str:
    """Source of ``m2l_batch(nk, X, Y)``: :func:`m2l_source`'s M2L for ``nk <= BATCH`` pairs.

    ``X`` and ``Y`` are flat float64 arrays of rows of :data:`BATCH` entries, entry
    ``k`` of each row for pair ``k``: ``X`` holds the rows ``dx, dy, dz, e2`` and then
    the two cells' multipoles (``nterms`` rows each), ``Y`` receives (not adds) the two
    local expansions.  Rows at constant offsets of two arrays let LLVM vectorize the
    loop over pairs without aliasing checks per row: at order 4, 52 ns a pair against
    140 ns one pair at a time (:func:`m2l_source`), one AMD EPYC core.
    """
    nt = expansion_tables(p).nterms
    lines = [
        "@njit(cache=True, fastmath=True, error_model='numpy')",
        "def m2l_batch(nk, X, Y):",
        "    for k in range(nk):",
        "        dx = X[k]",
        f"        dy = X[{BATCH} + k]",
        f"        dz = X[{2 * BATCH} + k]",
        f"        i2 = 1.0 / (dx * dx + dy * dy + dz * dz + X[{3 * BATCH} + k])",
        "        D0 = np.sqrt(i2)",
    ]
    lines += _m2l_lines(
        p, "        ", lambda v: f"X[{(4 + v) * BATCH} + k]",
        lambda v: f"X[{(4 + nt + v) * BATCH} + k]", lambda u: f"Y[{u * BATCH} + k]",
        lambda u: f"Y[{(nt + u) * BATCH} + k]", "=",
    )  # fmt: skip
    return "\n".join(lines) + "\n"


def source(p: int) -> str:
    """The module of order ``p``: its ``m2l`` and the traversal ``interact`` that calls it."""
    head = (
        f"# the mutual traversal of order {p}; sources of _mutual, _fmm, _near, _control: "
        f"{_SELF_HASH}\n"
        "import numpy as np\n"
        "from numba import njit\n"
        "from propopt.threads import take\n"
        "from propopt_case_studies.nbody import _mutual\n"
        "from propopt_case_studies.nbody._control import bound\n"
        "from propopt_case_studies.nbody._fmm import _grow\n\n"
        f"BATCH = {BATCH}\n\n\n"
    )
    if not 1 <= p <= UNROLLED:
        raise ValueError(f"p={p!r}: the mutual method runs orders 1 to {UNROLLED}")
    return head + m2l_source(p) + "\n\n" + m2l_batch_source(p) + "\n\n" + _INTERACT


@functools.cache
def kernels(p: int) -> Any:
    """The generated module of order ``p`` (numba caches it on disk)."""
    return jit.load_module(source(p), f"nbody_mutual_p{p}")


# the generated modules call this file's kernels and, through them, _fmm's and _near's:
# their source carries a hash of all three, so that an edit to any recompiles them
_SELF_HASH = hashlib.sha256(
    b"".join(
        (Path(__file__).parent / f).read_bytes()
        for f in ("_mutual.py", "_fmm.py", "_near.py", "_control.py")
    )
).hexdigest()[:16]

_INTERACT = '''@njit(cache=True, error_model="numpy", no_cpython_wrapper=True)
def _flush(nk, pair, X, Y, L):
    """The M2L of the ``nk`` waiting pairs (:func:`m2l_batch`), added to both cells' ``L``
    in the order the pairs were found."""
    m2l_batch(nk, X, Y)
    nt = L.shape[1]
    for k in range(nk):
        a = pair[0, k]
        b = pair[1, k]
        for u in range(nt):
            L[a, u] += Y[u * BATCH + k]
            L[b, u] += Y[(nt + u) * BATCH + k]


@njit(cache=True, nogil=True, error_model="numpy")
def interact(counter, tasks, items, rec, start, me2, hmax, M, L, x, y, z, w, e2, rcrit, cheap,
             spline, out, counts, allow, spow, binom):
    """The tasks of one round, each a pair ``(i, j)`` of subtrees ``items[i]``, ``items[j]``.

    Serial and GIL-free, the next task taken from the shared ``counter``
    (:func:`propopt.threads.run_threads`).  ``rec`` (k, 8): per node ``cx, cy,
    cz, radius, weight, leaf, next, count`` (:func:`._fmm.records`); bodies
    ``start[a]:start[a] + count`` of node ``a``.  With ``spline`` a pair is
    translated only when its radii plus the larger support ``hmax`` is below
    the distance (every pair it covers is Newtonian).  A pair is translated only if
    the error bound of each side (:func:`._control.bound`, multipole powers ``spow``,
    ``binom[k] = C(p, k)``) is at most ``allow`` of the cell it is added to.
    ``counts[task]``: M2L pairs and body pairs.
    """
    st = np.empty((512, 2), np.int64)
    buf = np.empty((5, 1024), np.float32)
    lo = np.empty(2, np.int64)
    hi = np.empty(2, np.int64)
    near = np.empty((256, 2), np.int64)
    nt = M.shape[1]
    pair = np.empty((2, BATCH), np.int64)  # the separated pairs waiting for their M2L
    X = np.empty((4 + 2 * nt) * BATCH)  # their offsets and multipoles, one row per term
    Y = np.empty(2 * nt * BATCH)
    while True:
        it = take(counter)
        if it >= tasks.shape[0]:
            break
        nm = 0
        npp = 0
        nn = np.int64(0)
        nk = 0
        st[0, 0] = items[tasks[it, 0]]
        st[0, 1] = items[tasks[it, 1]]
        sp = 1
        while sp > 0:
            sp -= 1
            a = st[sp, 0]
            b = st[sp, 1]
            na = rec[a, 7]
            if a == b:
                if rec[a, 5] != 0.0 or 0.5 * na * (na - 1.0) <= cheap:
                    if nn == near.shape[0]:
                        near = _grow(near, nn)
                    near[nn, 0] = a
                    near[nn, 1] = a
                    nn += 1
                    npp += int(0.5 * na * (na - 1.0))
                    continue
                end = int(rec[a, 6])
                if sp + 64 >= st.shape[0]:
                    st = _grow(st, sp)
                c = a + 1
                while c < end:
                    st[sp, 0] = c
                    st[sp, 1] = c
                    sp += 1
                    d = int(rec[c, 6])
                    while d < end:
                        st[sp, 0] = c
                        st[sp, 1] = d
                        sp += 1
                        d = int(rec[d, 6])
                    c = int(rec[c, 6])
                continue
            nb = rec[b, 7]
            dx = rec[a, 0] - rec[b, 0]
            dy = rec[a, 1] - rec[b, 1]
            dz = rec[a, 2] - rec[b, 2]
            d2 = dx * dx + dy * dy + dz * dz
            ra = rec[a, 3]
            rb = rec[b, 3]
            r = ra + rb
            separated = (
                (rcrit[a] + rcrit[b]) ** 2 < d2
                and (not spline or (r + max(hmax[a], hmax[b])) ** 2 < d2)
                and bound(ra, rb, d2, spow[b], binom) <= allow[a]
                and bound(rb, ra, d2, spow[a], binom) <= allow[b]
            )
            aleaf = rec[a, 5] != 0.0
            bleaf = rec[b, 5] != 0.0
            if na * nb <= cheap or (aleaf and bleaf and not separated):
                if nn == near.shape[0]:
                    near = _grow(near, nn)
                near[nn, 0] = min(a, b)
                near[nn, 1] = max(a, b)
                nn += 1
                npp += int(na * nb)
            elif separated:
                pair[0, nk] = a
                pair[1, nk] = b
                X[nk] = dx
                X[BATCH + nk] = dy
                X[2 * BATCH + nk] = dz
                X[3 * BATCH + nk] = 0.5 * (me2[a] + me2[b])
                for v in range(nt):
                    X[(4 + v) * BATCH + nk] = M[a, v]
                    X[(4 + nt + v) * BATCH + nk] = M[b, v]
                nk += 1
                nm += 1
                if nk == BATCH:
                    _flush(nk, pair, X, Y, L)
                    nk = 0
            else:
                if bleaf or (not aleaf and ra >= rb):
                    split, other = a, b
                else:
                    split, other = b, a
                if sp + 8 >= st.shape[0]:
                    st = _grow(st, sp)
                end = int(rec[split, 6])
                c = split + 1
                while c < end:
                    st[sp, 0] = c
                    st[sp, 1] = other
                    sp += 1
                    c = int(rec[c, 6])
        if nk:
            _flush(nk, pair, X, Y, L)
        if nn:
            lo[0] = items[tasks[it, 0]]
            lo[1] = items[tasks[it, 1]]
            hi[0] = int(rec[lo[0], 6])
            hi[1] = int(rec[lo[1], 6]) if lo[1] != lo[0] else lo[1]
            buf = _mutual.near_bodies(near, nn, lo, hi, start, rec, x, y, z, w, e2, out, buf,
                                      spline)  # fmt: skip
        counts[it, 0] += nm
        counts[it, 1] += npp
'''
