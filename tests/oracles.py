"""Slow, obviously correct float64 NumPy references that share no code with propopt."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np


def gravity(
    pos: np.ndarray,
    mass: np.ndarray,
    e2: np.ndarray,
    targets: np.ndarray | None = None,
    te2: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact softened gravity (G = 1), pair softening ``(eps_i^2 + eps_j^2) / 2``.

    With ``targets=None`` the bodies are the targets and ``j = i`` is left out;
    a pair at zero distance and zero softening contributes nothing.
    """
    pos = np.asarray(pos, np.float64)
    mass = np.asarray(mass, np.float64)
    e2 = np.broadcast_to(np.asarray(e2, np.float64), mass.shape)
    self_ = targets is None
    T = pos if self_ else np.asarray(targets, np.float64)
    t2 = e2 if self_ else np.broadcast_to(np.asarray(te2, np.float64), (T.shape[0],))
    acc = np.zeros((T.shape[0], 3))
    pot = np.zeros(T.shape[0])
    for i0 in range(0, T.shape[0], 256):
        sl = slice(i0, i0 + 256)
        d = pos[None, :, :] - T[sl, None, :]
        # s = sqrt(|d|^2 + eps^2) by hypot, and d / s^3 as ((d / s) / s) / s: no
        # intermediate overflows or underflows for |d| from 1e-150 to 1e300
        soft = np.sqrt(0.5 * (t2[sl, None] + e2[None, :]))
        s = np.hypot(np.hypot(np.hypot(d[..., 0], d[..., 1]), d[..., 2]), soft)
        with np.errstate(divide="ignore"):
            inv = np.where(s > 0, 1.0 / np.where(s > 0, s, 1.0), 0.0)
        if self_:
            idx = np.arange(i0, min(i0 + 256, T.shape[0]))
            inv[idx - i0, idx] = 0.0
        w = mass[None, :] * inv
        acc[sl] = np.einsum("tj,tjk->tk", w * inv, d * inv[..., None])
        pot[sl] = -w.sum(1)
    return acc, pot


def gravity_field(
    pos: Any,
    mass: Any = None,
    eps: Any = 0.0,
    G: float = 1.0,
    targets: Any = None,
    teps: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``gravity`` in ``direct_gravity``'s arguments: softening lengths, unit masses by default.

    ``teps`` (the targets' softening) defaults to ``eps``.
    """
    P = np.asarray(pos, dtype=np.float64).reshape(-1, 3)
    m = (
        np.ones(len(P))
        if mass is None
        else np.broadcast_to(np.asarray(mass, np.float64), (len(P),))
    )
    e = np.asarray(eps, np.float64)
    if targets is None:
        acc, pot = gravity(P, m, e * e)
    else:
        T = np.asarray(targets, np.float64).reshape(-1, 3)
        te = e if teps is None else np.asarray(teps, np.float64)
        acc, pot = gravity(P, m, e * e, T, np.broadcast_to(te * te, (len(T),)))
    return G * acc, G * pot


def unsoftened_pull(pos, m, targets=None):
    """Plain float64 sum ``sum_j m_j d / |d|^3`` (eps = 0; identical positions skipped)."""
    pos = np.asarray(pos, np.float64)
    T = pos if targets is None else np.asarray(targets, np.float64)
    acc = np.zeros((len(T), 3))
    for i, t in enumerate(T):
        d = pos - t
        r2 = (d * d).sum(1)
        ok = r2 > 0
        acc[i] = (m[ok, None] * d[ok] / r2[ok, None] ** 1.5).sum(0)
    return acc


def fold(op: Callable[[Any, Any], Any], xs: list[Any]) -> list[Any]:
    """Inclusive left fold, one Python step per element."""
    out, acc = [], None
    for i, x in enumerate(xs):
        acc = x if i == 0 else op(acc, x)
        out.append(acc)
    return out


def cumsum64(x: Any) -> np.ndarray:
    return np.array(fold(lambda a, b: a + b, [float(v) for v in np.ravel(x)]))


def wrap(v: int, bits: int, signed: bool) -> int:
    v %= 1 << bits
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def cumsum_int(xs: list[int], bits: int, signed: bool) -> np.ndarray:
    acc, out = 0, []
    for v in xs:
        acc = wrap(acc + int(v), bits, signed)
        out.append(acc)
    return np.array(out, dtype=object)


def linrec64(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    pa, h, A, H = 1.0, 0.0, [], []
    for ai, bi in zip(np.ravel(a), np.ravel(b)):
        pa, h = pa * float(ai), float(ai) * h + float(bi)
        A.append(pa)
        H.append(h)
    return np.array(A), np.array(H)


def topk_ref(
    x: Any, k: int, largest: bool = True, nan: str = "ignore"
) -> tuple[np.ndarray, np.ndarray]:
    """1-D top-k by a Python sort of (value, index) pairs, ties to the smaller index."""
    vals = [
        float(v) if not isinstance(v, (int, np.integer)) else int(v) for v in np.ravel(x).tolist()
    ]
    pairs = [(v, i) for i, v in enumerate(vals) if not (nan == "ignore" and v != v)]

    def key(p: tuple[Any, int]) -> tuple[Any, ...]:
        v, i = p
        isnan = v != v
        if largest:
            return (0 if isnan else 1, -v if not isnan else 0, i)
        return (1 if isnan else 0, v if not isnan else 0, i)

    best = sorted(pairs, key=key)[:k]
    return np.array([v for v, _ in best]), np.array([i for _, i in best], dtype=np.int64)


def topk_rows(
    x: np.ndarray, k: int, axis: int = -1, largest: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    xm = np.moveaxis(np.asarray(x), axis, -1)
    flat = xm.reshape(-1, xm.shape[-1])
    vs, ids = zip(*(topk_ref(r, k, largest) for r in flat)) if flat.shape[0] else ((), ())
    kk = min(k, xm.shape[-1])
    v = np.array(vs).reshape(xm.shape[:-1] + (kk,)) if vs else np.empty(xm.shape[:-1] + (kk,))
    i = (
        np.array(ids).reshape(xm.shape[:-1] + (kk,))
        if ids
        else np.empty(xm.shape[:-1] + (kk,), np.int64)
    )
    return np.moveaxis(v, -1, axis), np.moveaxis(i, -1, axis)


def morton_cells_ref(points: Any, box: Any = None) -> np.ndarray:
    """Exact cell coordinates (Fractions) in the bounding cube (or ``box``), shape (n, dim)."""
    P = np.asarray(points, dtype=np.float64)
    n, dim = P.shape
    bits = {2: 32, 3: 21}[dim]
    if box is None:
        lo = [Fraction(float(P[:, a].min())) for a in range(dim)]
        side = max(Fraction(float(P[:, a].max())) - lo[a] for a in range(dim))
        side = side if side > 0 else Fraction(1)
        hi = [x + side for x in lo]
    else:
        lo = [Fraction(float(v)) for v in box[0]]
        hi = [Fraction(float(v)) for v in box[1]]
    top = (1 << bits) - 1
    q = np.zeros((n, dim), dtype=np.int64)
    for i in range(n):
        for a in range(dim):
            c = math.floor((Fraction(float(P[i, a])) - lo[a]) * (1 << bits) / (hi[a] - lo[a]))
            q[i, a] = min(max(c, 0), top)
    return q


def deinterleave(keys: Any, dim: int) -> np.ndarray:
    bits = {2: 32, 3: 21}[dim]
    out = np.zeros((len(keys), dim), dtype=np.int64)
    for i, k in enumerate(np.asarray(keys).tolist()):
        for m in range(bits):
            for a in range(dim):
                out[i, a] |= ((int(k) >> (dim * m + a)) & 1) << m
    return out


def matmul64(A: Any, B: Any) -> np.ndarray:
    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    C = np.zeros((A.shape[0], B.shape[1]))
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            s = 0.0
            for k in range(A.shape[1]):
                s += float(A[i, k]) * float(B[k, j])
            C[i, j] = s
    return C


def moments_ref(points: Any, masses: Any = None) -> np.ndarray:
    """mass, centre of mass and the 6 second moments about it, by loops over Fractions."""
    P = np.asarray(points, np.float64).reshape(-1, 3)
    m = (
        [Fraction(1)] * len(P)
        if masses is None
        else [
            Fraction(float(v)) for v in np.broadcast_to(np.asarray(masses, np.float64), (len(P),))
        ]
    )
    M = sum(m, Fraction(0))
    c = [
        sum((mi * Fraction(float(p[a])) for mi, p in zip(m, P)), Fraction(0)) / M
        if M
        else Fraction(0)
        for a in range(3)
    ]
    S = []
    for a, b in ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)):
        S.append(
            sum(
                (
                    mi * (Fraction(float(p[a])) - c[a]) * (Fraction(float(p[b])) - c[b])
                    for mi, p in zip(m, P)
                ),
                Fraction(0),
            )
        )
    return np.array([float(M), *map(float, c), *map(float, S)])


def softplus(v: float) -> float:
    return v if v > 20 else math.log1p(math.exp(v))


def mamba_ref(
    u: Any,
    delta: Any,
    A: Any,
    B: Any,
    C: Any,
    D: Any = None,
    z: Any = None,
    bias: Any = None,
    sp: bool = False,
) -> np.ndarray:
    """mamba_ssm's selective scan, one token at a time, float64; B, C per token (batch, N, L)."""
    u, delta, A, B, C = (np.asarray(v, dtype=np.float64) for v in (u, delta, A, B, C))
    b, d, L = u.shape
    N = A.shape[1]
    out = np.zeros((b, d, L))
    for bi in range(b):
        for di in range(d):
            h = [0.0] * N
            for t in range(L):
                dt = float(delta[bi, di, t]) + (0.0 if bias is None else float(bias[di]))
                dt = softplus(dt) if sp else dt
                y = 0.0
                for n in range(N):
                    Bt = B[di, n] if B.ndim == 2 else B[bi, n, t]
                    Ct = C[di, n] if C.ndim == 2 else C[bi, n, t]
                    h[n] = math.exp(dt * A[di, n]) * h[n] + dt * Bt * u[bi, di, t]
                    y += Ct * h[n]
                if D is not None:
                    y += float(D[di]) * u[bi, di, t]
                if z is not None:
                    zz = float(z[bi, di, t])
                    y *= zz / (1 + math.exp(-zz))
                out[bi, di, t] = y
    return out
