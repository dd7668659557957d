"""Audits for separability (numerical rank of far-field blocks) and locality (decay).

Pair functions
--------------
A *pair function* ``f(X_i, X_j)`` takes two arrays of points of shape
``(n, d)`` and returns the values of the interaction for the ``n`` pairs
``(X_i[k], X_j[k])``, shape ``(n,)`` or ``(n, ...)`` (a force vector, say);
it is called on batches, never one pair at a time.  The symmetric-pair audit
uses the same convention.

Separability: :func:`check_low_rank`
    The block ``K_ab = f(x_a, y_b)`` for two well-separated clusters has
    numerical rank ``k = #{sigma_i > rtol sigma_1}``.  When ``k`` is small, the
    far field factors (:func:`propopt.low_rank`, multipoles).

Locality: :func:`check_decay`
    ``|f(x, x + r u)|`` sampled over distances ``r``; a least-squares fit of
    ``log |f| = a - alpha log r`` gives the decay exponent and its ``R^2``.

Verdicts
--------
``"applies"``: the property licenses the transformation as is; ``"partial"``:
it holds but is not enough alone; ``"no"``.  ``ok`` is ``verdict == "applies"``.

* Rank: ``no`` when ``k >= min(m, n) / 2`` (factors no smaller than the
  block); otherwise ``applies`` when the rank has saturated, ``k <= 1.25
  k_half + 2`` with ``k_half`` the rank of the half-size block (first half
  of the rows and columns: the rank of a separable kernel does not grow with
  the number of points), and ``partial`` when it still grows (sample more
  points, ``n=``, to tell).
* Decay in ``d`` dimensions: ``applies`` when the far field is summable,
  ``alpha > d`` (the mass of a uniform medium beyond ``R``,
  ``int_R^inf r^(d-1) r^(-alpha) dr``, converges and a cutoff is
  licensed), or the decay is faster than any power (exponential, compact
  support); ``partial`` when ``0 < alpha <= d`` (each term decays, but the
  sum of the far field does not: gravity, ``alpha = 2`` in 3-D, needs a
  multipole far field besides locality); ``no`` when ``|f|`` does not fall
  (less than halves from ``r_min`` to ``r_max``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _validate
from ..arrays import as_numpy, generator, renamed

__all__ = ["DecayReport", "LowRankReport", "check_decay", "check_low_rank"]

SATURATION = 1.25
"""The rank has saturated when ``k <= SATURATION * k_half + 2``, ``k_half`` the rank
of the block of the first half of each cluster: a separable kernel's rank at a
tolerance does not grow with the number of points, a non-separable one's
doubles."""

MIN_R2 = 0.9
"""A power-law fit with a lower ``R^2`` is reported as a poor fit."""

PairFunction = Callable[[np.ndarray, np.ndarray], Any]


def _magnitudes(values: Any, n: int, what: str) -> np.ndarray:
    v = np.asarray(values)
    if v.shape[:1] != (n,):
        raise ValueError(
            f"{what} returned shape {v.shape}: a pair function f(X_i, X_j) must return one "
            f"value (or one array) per pair, leading axis {n}"
        )
    v = np.abs(v.reshape(n, -1).astype(np.complex128 if v.dtype.kind == "c" else np.float64))
    mag = np.sqrt((v**2).sum(axis=1))
    bad = ~np.isfinite(mag)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{what} is not finite for pair {i}: the audit needs finite values")
    return mag


@dataclass(frozen=True)
class LowRankReport:
    """Outcome of :func:`check_low_rank`.

    Attributes
    ----------
    verdict : str
        ``"applies"``, ``"partial"`` or ``"no"`` (see the module docstring).
    ok : bool
        ``verdict == "applies"``.
    rank : int
        Numerical rank ``#{sigma_i > rtol * sigma_1}``.
    rank_half : int
        The same for the block of the first half of the rows and columns.
    shape : (int, int)
        Shape of the block.
    rtol : float
    singular_values : ndarray
        All singular values of the block, relative to the largest.
    separation : float or None
        Distance of the cluster centres over the cluster radius (sampled clusters).
    name : str
    """

    verdict: str
    rank: int
    rank_half: int
    shape: tuple[int, int]
    rtol: float
    singular_values: np.ndarray = field(repr=False)
    separation: float | None
    name: str

    @property
    def ok(self) -> bool:
        return self.verdict == "applies"

    @property
    def compression(self) -> float:
        """Dense size over factor size: ``m n / (k (m + n))`` (inf for rank 0)."""
        m, n = self.shape
        return float("inf") if self.rank == 0 else m * n / (self.rank * (m + n))

    @property
    def evidence(self) -> str:
        """One line: the rank, the block and the half-size block's rank."""
        m, n = self.shape
        where = (
            f" between clusters {self.separation:g} radii apart"
            if self.separation is not None
            else ""
        )
        return (
            f"numerical rank {self.rank} of {min(m, n)} at rtol={self.rtol:g} for the "
            f"{m} x {n} block{where} ({self.rank_half} for the half-size block)"
        )

    def __str__(self) -> str:
        return (
            f"separability of {self.name}: {self.verdict}: {self.evidence}; factors "
            f"{self.compression:.3g}x smaller than the block"
        )


@dataclass(frozen=True)
class DecayReport:
    """Outcome of :func:`check_decay`.

    Attributes
    ----------
    verdict : str
        ``"applies"``, ``"partial"`` or ``"no"`` (see the module docstring).
    ok : bool
        ``verdict == "applies"``.
    exponent : float
        ``alpha`` of the least-squares fit ``log |f| = a - alpha log r``.
    r2 : float
        ``R^2`` of that fit (1 for an exact power law).
    model : str
        ``"power"``, ``"faster than any power"`` (exponential fits better, or
        ``|f|`` reaches 0: compact support) or ``"none"`` (no decay).
    distances, magnitudes : ndarray
        The sampled distances and the mean ``|f|`` at each.
    dim : int
    name : str
    """

    verdict: str
    exponent: float
    r2: float
    model: str
    distances: np.ndarray = field(repr=False)
    magnitudes: np.ndarray = field(repr=False)
    dim: int
    name: str

    @property
    def ok(self) -> bool:
        return self.verdict == "applies"

    @property
    def evidence(self) -> str:
        """One line: the fitted power law, its R^2 and the range of distances."""
        r0, r1 = self.distances[0], self.distances[-1]
        g = self.magnitudes
        if self.model == "faster than any power":
            if (g == 0).any():
                rz = self.distances[int(np.argmax(g == 0))]
                return (
                    f"|f| is 0 from r = {rz:.3g} on (r in [{r0:g}, {r1:g}]): faster than any "
                    "power (compact support or underflow)"
                )
            return (
                f"|f| falls {g[0] / g[-1]:.2g}x over r in [{r0:g}, {r1:g}], log |f| closer to "
                "linear in r than in log r: faster than any power"
            )
        return (
            f"|f| ~ r^{-self.exponent + 0.0:.3g} (R^2 = {self.r2:.3f}) over r in [{r0:g}, {r1:g}]"
        )

    def __str__(self) -> str:
        if self.model == "faster than any power":
            return f"locality of {self.name}: {self.verdict}: {self.evidence}; a cutoff is licensed"
        elif self.verdict == "applies":
            why = f"exponent > dim = {self.dim}: the far field is summable, a cutoff is licensed"
        elif self.verdict == "partial":
            why = (
                f"decays, but exponent <= dim = {self.dim}: the far field does not sum to a "
                "small remainder; pair locality with a far-field expansion (separability)"
            )
        else:
            why = "|f| does not fall with distance"
        fit = f"|f| ~ r^{-self.exponent + 0.0:.3g} (R^2 = {self.r2:.3f})"
        r0, r1 = self.distances[0], self.distances[-1]
        return f"locality of {self.name}: {self.verdict}: {fit} over r in [{r0:g}, {r1:g}]; {why}"


def _ball(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``n`` points uniform in the unit ball of ``R^dim``."""
    g = rng.standard_normal((n, dim))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return g * rng.uniform(0, 1, (n, 1)) ** (1.0 / dim)


@renamed(dim="ndim")
def check_low_rank(
    kernel_or_matrix: Any,
    X: Any = None,
    Y: Any = None,
    *,
    rtol: float = 1e-6,
    ndim: int = 3,
    n: int = 200,
    separation: float = 4.0,
    seed: int = 0,
) -> LowRankReport:
    """Numerical rank of a matrix, or of a kernel's block between two separated clusters.

    Separability: ``K(x, y) ~= sum_{r < k} u_r(x) v_r(y)`` to ``rtol`` for
    ``x`` in one cluster and ``y`` in another, i.e. the block ``K_ab`` has
    ``sigma_{k+1} <= rtol sigma_1``.

    Parameters
    ----------
    kernel_or_matrix : 2-D array or pair function
        A matrix (audited as is), or a pair function ``f(X_i, X_j)`` (batches
        of ``(n, d)`` points, one value per pair; for vector values the block
        holds the first component).  Complex values are ranked as complex
        (``exp(i k r)`` has another rank than its real part).
    X, Y : arrays (n, d), optional
        The two clusters; by default ``n`` points uniform in a unit ball and in
        a unit ball whose centre is ``separation`` radii away along the first axis.
    rtol : float, default 1e-6
        Relative singular-value threshold, in (0, 1).
    ndim, n, separation, seed
        Shape of the sampled clusters (``ndim``: the points' dimensions, ``dim=``
        before this release).

    Returns
    -------
    LowRankReport
        Rank, block shape, verdict; ``str()`` reads as a sentence.

    Notes
    -----
    Cost: ``n^2`` kernel values in one batched call and a dense SVD, ``O(n^3)``.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.audit import check_low_rank
    >>> def newton(xi, xj):
    ...     return 1.0 / np.linalg.norm(xi - xj, axis=-1)
    >>> rep = check_low_rank(newton, rtol=1e-6)
    >>> rep.verdict, rep.rank < 40
    ('applies', True)
    """
    _number("rtol", rtol)
    if not (np.isfinite(rtol) and 0.0 < rtol < 1.0):
        raise ValueError(f"rtol={rtol}: must lie in the open interval (0, 1), e.g. rtol=1e-6")
    sep: float | None = None
    if callable(kernel_or_matrix):
        f = kernel_or_matrix
        name = _validate.name_of(f)
        rng = generator("seed", seed)
        if X is None or Y is None:
            if not (isinstance(n, (int, np.integer)) and n >= 1):
                raise ValueError(f"n={n!r}: must be an int >= 1 (points per cluster)")
            if not (isinstance(ndim, (int, np.integer)) and ndim >= 1):
                raise ValueError(f"ndim={ndim!r}: must be an int >= 1")
            if not (np.isfinite(separation) and separation > 2.0):
                raise ValueError(
                    f"separation={separation}: must be > 2 (centre distance over radius) "
                    "so that the clusters do not overlap"
                )
            sep = float(separation)
            X = _ball(rng, n, ndim) if X is None else X
            Y = _ball(rng, n, ndim) + np.eye(ndim)[0] * sep if Y is None else Y
        X = _pts("X", X)
        Y = _pts("Y", Y, X.shape[1])
        a = np.repeat(X, Y.shape[0], axis=0)
        b = np.tile(Y, (X.shape[0], 1))
        vals = np.asarray(f(a, b))
        _magnitudes(vals, a.shape[0], f"{name}(X_i, X_j)")
        block = vals.reshape(a.shape[0], -1)[:, 0].reshape(X.shape[0], Y.shape[0])
    else:
        block = np.asarray(as_numpy(kernel_or_matrix))
        name = f"a {'x'.join(map(str, block.shape))} matrix"
        if block.ndim != 2:
            raise ValueError(
                f"kernel_or_matrix has ndim {block.ndim}: pass a 2-D matrix or a pair function"
            )
        if block.dtype.kind not in "biufc":
            raise TypeError(
                f"kernel_or_matrix has dtype {block.dtype}: pass a numeric matrix or a pair "
                "function"
            )
        if not np.isfinite(block).all():
            i, j = np.argwhere(~np.isfinite(block))[0]
            raise ValueError(
                f"kernel_or_matrix[{i}, {j}] is not finite: the audit needs finite values"
            )
    # complex blocks keep their imaginary part: the real part alone has another rank
    block = np.asarray(block, dtype=np.complex128 if block.dtype.kind == "c" else np.float64)
    k = _numerical_rank(block, rtol)
    half = block[: (block.shape[0] + 1) // 2, : (block.shape[1] + 1) // 2]
    k_half = _numerical_rank(half, rtol)
    kmax = min(block.shape)
    saturated = k <= SATURATION * k_half + 2
    if 2 * k >= kmax:
        verdict = "no"
    elif saturated:
        verdict = "applies"
    else:
        verdict = "partial"
    s = np.linalg.svd(block, compute_uv=False) if block.size else np.zeros(0)
    rel = s / s[0] if s.size and s[0] > 0 else np.zeros_like(s)
    return LowRankReport(verdict, k, k_half, (block.shape[0], block.shape[1]), rtol, rel, sep, name)


def _number(name: str, v: Any) -> None:
    """A real number (checked before ``np.isfinite`` meets a string)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}={v!r}: must be a real number")


def _numerical_rank(a: np.ndarray, rtol: float) -> int:
    if a.size == 0:
        return 0
    s = np.linalg.svd(a, compute_uv=False)
    return int(np.count_nonzero(s > rtol * s[0])) if s[0] > 0 else 0


def _pts(name: str, x: Any, d: int | None = None) -> np.ndarray:
    a = np.asarray(as_numpy(x), dtype=np.float64)
    if a.ndim != 2 or (d is not None and a.shape[1] != d):
        want = f"(n, {d})" if d is not None else "(n, d)"
        raise ValueError(f"{name} has shape {a.shape}: must be {want} points")
    bad = ~np.isfinite(a).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] = {a[i].tolist()} is not finite: coordinates must be finite")
    return a


@renamed(dim="ndim")
def check_decay(
    pair_function: PairFunction,
    *,
    ndim: int = 3,
    r_min: float = 1.0,
    r_max: float = 1000.0,
    distances: int = 16,
    pairs: int = 64,
    seed: int = 0,
) -> DecayReport:
    """Fit the exponent with which ``|f(x, y)|`` falls with ``r = |x - y|`` (locality).

    For ``distances`` values of ``r`` log-spaced in ``[r_min, r_max]``, ``pairs``
    random pairs ``(x, x + r u)`` (``x`` uniform in the unit cube, ``u`` a random
    unit vector) give the mean magnitude ``g(r)``; a least-squares line through
    ``(log r, log g)`` over the far half of the distances (the asymptotic
    regime) gives ``g ~ r^-alpha`` and its ``R^2``.

    Parameters
    ----------
    pair_function : callable
        ``f(X_i, X_j)`` on batches of ``(n, d)`` points, one value (or array,
        counted by its norm) per pair.
    ndim : int, default 3
    r_min, r_max : float
        Range of distances, ``0 < r_min < r_max``.
    distances, pairs : int
        Sample sizes (``distances >= 3``).
    seed : int

    Returns
    -------
    DecayReport
        Exponent, fit quality, verdict; ``str()`` reads as a sentence.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.audit import check_decay
    >>> def gravity(xi, xj):
    ...     d = xj - xi
    ...     return d / np.linalg.norm(d, axis=-1, keepdims=True) ** 3
    >>> rep = check_decay(gravity)
    >>> rep.verdict, round(rep.exponent, 2)
    ('partial', 2.0)
    """
    if not callable(pair_function):
        raise TypeError(f"pair_function={pair_function!r}: must be callable f(X_i, X_j)")
    _number("r_min", r_min)
    _number("r_max", r_max)
    if not (np.isfinite(r_min) and np.isfinite(r_max) and 0 < r_min < r_max):
        raise ValueError(f"r_min={r_min}, r_max={r_max}: need 0 < r_min < r_max, both finite")
    for nm, v, lo in (("ndim", ndim, 1), ("distances", distances, 3), ("pairs", pairs, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{nm}={v!r}: must be an int >= {lo}")
    name = _validate.name_of(pair_function)
    rng = generator("seed", seed)
    r = np.geomspace(r_min, r_max, distances)
    x = rng.uniform(0, 1, (distances * pairs, ndim))
    u = rng.standard_normal((distances * pairs, ndim))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    y = x + np.repeat(r, pairs)[:, None] * u
    mag = _magnitudes(pair_function(x, y), x.shape[0], f"{name}(X_i, X_j)")
    g = mag.reshape(distances, pairs).mean(axis=1)
    if g[0] == 0:
        raise ValueError(
            f"{name} is 0 at the smallest distance r_min={r_min:g}: nothing to fit; lower r_min"
        )
    zero = g == 0
    if zero.any():  # compact support: exactly zero beyond some distance
        k = int(np.argmax(zero))
        alpha, r2 = _fit(np.log(r[: max(k, 2)]), np.log(g[: max(k, 2)]))
        return DecayReport("applies", alpha, r2, "faster than any power", r, g, ndim, name)
    lr, lg = np.log(r), np.log(g)
    tail = slice(distances // 2, None)  # the asymptotic regime: the far half of the range
    alpha, r2 = _fit(lr[tail], lg[tail])
    _, r2_exp = _fit(r[tail], lg[tail])
    falls = lg[-1] < lg[0] - np.log(2.0)  # at least halves over the range
    if falls and r2_exp > max(r2, MIN_R2) and alpha > ndim:
        return DecayReport("applies", alpha, r2, "faster than any power", r, g, ndim, name)
    if not falls or alpha <= 0:
        return DecayReport("no", alpha, r2, "none", r, g, ndim, name)
    verdict = "applies" if alpha > ndim else "partial"
    return DecayReport(verdict, alpha, r2, "power", r, g, ndim, name)


def _fit(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Slope (negated) and R^2 of the least-squares line ``y = a + b t``."""
    A = np.stack([np.ones_like(t), t], axis=1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ coef
    ss = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss if ss > 0 else 1.0
    return -float(coef[1]), r2
