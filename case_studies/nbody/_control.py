"""Error control of the FMM: an a priori bound of each M2L's force error, checked per pair.

A target cell ``A`` (centre ``z_A``, radius ``r_A``) takes a source cell ``B``
(centre of mass ``z_B``, radius ``r_B``) through one M2L of order ``p`` and
the L2P's gradient; what that drops is the tail, from degree ``p`` on, of the
Taylor series of ``grad 1/|R + s|`` in ``s = u - v`` (``R = z_A - z_B``,
``u`` a target's offset from ``z_A``, ``v`` a source's from ``z_B``): the
truncation at total degree ``p`` in ``(u, v)`` is the truncation in ``s``.
The degree-``n`` term of that series is at most ``(n + 1) |s|^n / d^(n + 2)``
(the Legendre bound, ``d = |R|``), and ``|s|^n <= sum_k C(n, k) r_A^(n-k)
|v|^k``; summed over the source's bodies that is the *multipole power*
``P_k = sum_j m_j |x_j - z_B|^k`` of ``B`` (:func:`power`).  With ``S_n =
sum_k C(n, k) r_A^(n-k) P_k`` and ``S_(n+1) <= (r_A + r_B) S_n``, the force
error of the interaction is at most

    E_AB = S_p / d^(p + 2) * ((p + 1) / (1 - rho) + rho / (1 - rho)^2),
    rho = (r_A + r_B) / d,

(:func:`bound`), up to the factor ``sqrt(2)`` by which the gradient of a
zonal harmonic can exceed ``n r^(n-1)`` off its axis.  A centrally
concentrated cell has ``P_k`` far below ``M_B r_B^k``: its bound is that
much smaller than the opening angle alone would say.

The control: a pair that passes the opening angle of its ``(p, theta)``
(the table's, now a first guess and an upper limit) is translated only if
``E_AB <= eta tol a_A``, with ``a_A`` the smallest force estimate among the
target cell's bodies (:func:`node_min`), from a cheap first pass; otherwise
the larger cell is split, as for a pair that fails the angle.  The estimates
are first raised to their ``(1 - quantile) / 2`` quantile: the bodies below
it (0.5% for the 99th percentile, 25% for the median) may err by more
without moving the quantile that ``tol`` bounds, and they are the ones whose
pull nearly cancels, which would otherwise open every cell around them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["allowance", "binomials", "bound", "node_min", "power"]


@njit(cache=True, inline="always")
def bound(ra, rb, d2, pw, binom):  # pragma: no cover - numba
    """``E_AB``: the force error bound of one M2L + L2P of order ``p = len(binom) - 1``.

    ``ra``, ``rb``: the cells' radii; ``d2``: their centres' squared distance;
    ``pw[k]``: the source's multipole power of degree ``k``; ``binom[k] = C(p, k)``.
    Infinite when the radii reach the distance (no convergence).
    """
    p = binom.shape[0] - 1
    d = np.sqrt(d2)
    rho = (ra + rb) / d
    if rho >= 1.0:
        return np.inf
    s = 0.0
    rk = 1.0
    for k in range(p, -1, -1):
        s += binom[k] * rk * pw[k]
        rk *= ra
    q = 1.0 - rho
    return s / d ** (p + 2) * ((p + 1) / q + rho / (q * q))


@njit(cache=True)
def power(x, y, z, w, start, end, nxt, leaf, ctr, rad, wsum, p):  # pragma: no cover - numba
    """``P[i, k] >= sum_j m_j |x_j - c_i|^k`` for every node ``i`` and ``k = 0..p``.

    Exact at leaves; a parent takes the binomial bound of its children's,
    ``sum_t C(k, t) P_t(child) |c_child - c|^(k - t)``, capped by ``M r^k``.
    Pre-order nodes: a parent's children follow it, so a reverse loop has
    them done first.
    """
    k = start.shape[0]
    P = np.zeros((k, p + 1))
    for i in range(k - 1, -1, -1):
        if leaf[i]:
            for j in range(start[i], end[i]):
                r = np.sqrt(
                    (x[j] - ctr[i, 0]) ** 2 + (y[j] - ctr[i, 1]) ** 2 + (z[j] - ctr[i, 2]) ** 2
                )
                v = w[j]
                for q in range(p + 1):
                    P[i, q] += v
                    v *= r
        else:
            c = i + 1
            while c < nxt[i]:
                dd = np.sqrt(
                    (ctr[c, 0] - ctr[i, 0]) ** 2 + (ctr[c, 1] - ctr[i, 1]) ** 2
                    + (ctr[c, 2] - ctr[i, 2]) ** 2
                )  # fmt: skip
                for q in range(p + 1):
                    b = 1.0  # C(q, t), t from q down
                    v = 0.0
                    dk = 1.0
                    for t in range(q, -1, -1):
                        v += b * P[c, t] * dk
                        b = b * t / (q - t + 1)
                        dk *= dd
                    P[i, q] += v
                c = nxt[c]
            v = wsum[i]
            for q in range(p + 1):
                P[i, q] = min(P[i, q], v)
                v *= rad[i]
    return P


@njit(cache=True)
def node_min(v, start, end, nxt, leaf):  # pragma: no cover - numba
    """``min(v[start[i]:end[i]])`` for every node ``i`` (pre-order nodes)."""
    k = start.shape[0]
    out = np.empty(k)
    for i in range(k - 1, -1, -1):
        m = np.inf
        if leaf[i]:
            for j in range(start[i], end[i]):
                m = min(m, v[j])
        else:
            c = i + 1
            while c < nxt[i]:
                m = min(m, out[c])
                c = nxt[c]
        out[i] = m
    return out


def binomials(p: int) -> np.ndarray:
    """``C(p, k)`` for ``k = 0..p``, float64."""
    return np.array([math.comb(p, k) for k in range(p + 1)], np.float64)


def allowance(amag: np.ndarray, start: np.ndarray, end: np.ndarray, nxt: np.ndarray,
              leaf: np.ndarray, tol: float, eta: float, quantile: float) -> np.ndarray:  # fmt: skip
    """Per target node, the largest bound ``E_AB`` a pair may have: ``eta tol a_A``.

    ``amag``: each target's force estimate (target order); raised to its
    ``(1 - quantile) / 2`` quantile, then the smallest of each node's.
    """
    if amag.shape[0] == 0:
        return np.zeros(start.shape[0])
    a = np.maximum(amag, np.quantile(amag, 0.5 * (1.0 - quantile)))
    return eta * tol * node_min(a, start, end, nxt, leaf)
