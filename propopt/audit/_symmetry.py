"""Audit of the symmetry law that :func:`propopt.pairwise_sum` relies on.

Halving a pair sum is correct only when the pair function satisfies

.. math:: f(x_j, x_i) = f(x_i, x_j) \\quad\\text{(symmetric)}
          \\qquad\\text{or}\\qquad
          f(x_j, x_i) = -f(x_i, x_j) \\quad\\text{(antisymmetric)}.

:func:`check_symmetric` evaluates both orders on random pairs of sample
points, all pairs at once in two batched calls, and reports the worst
violation relative to a floating-point tolerance together with the pair.

A pair counts as a violation when ``|f(x_j, x_i) -/+ f(x_i, x_j)| > atol +
rtol * max(|f(x_i, x_j)|, |f(x_j, x_i)|)`` in some component.  The default
``rtol`` is 1e-4 for float32 values and 1e-10 for float64 (a few hundred
ulps: both orders round differently, ``x_j - x_i`` is exact in either order
but a kernel may sum terms in a different order); ``atol`` is 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .. import _validate
from .._reports import verdict
from ..arrays import as_numpy, flag, generator

__all__ = ["PairCounterexample", "SymmetryReport", "check_symmetric"]

_DEFAULT_RTOL = {2: 1e-2, 4: 1e-4, 8: 1e-10}


class PairCounterexample(NamedTuple):
    """The worst pair: ``f_ij = f(x_i, x_j)`` and ``f_ji = f(x_j, x_i)``."""

    x_i: np.ndarray
    x_j: np.ndarray
    f_ij: np.ndarray
    f_ji: np.ndarray


@dataclass(frozen=True)
class SymmetryReport:
    """Outcome of :func:`check_symmetric`.

    Attributes
    ----------
    ok : bool
        Whether the law held within tolerance on every sampled pair.
    trials : int
        Number of pairs evaluated.
    worst : float
        Worst violation in units of the tolerance (``<= 1`` within it, ``inf``
        for a difference where none is tolerated, e.g. a NaN on one side).
    max_abs_diff : float
        Largest ``|f(x_j, x_i) -/+ f(x_i, x_j)|``.
    counterexample : PairCounterexample or None
        The worst pair when the law fails.
    rtol, atol : float
    name : str
    law : str
        ``'symmetry'`` or ``'antisymmetry'``.
    where : int
        Component of the worst violation (0 for scalar values).
    """

    ok: bool
    trials: int
    worst: float
    max_abs_diff: float
    counterexample: PairCounterexample | None
    rtol: float
    atol: float
    name: str
    law: str = "symmetry"
    where: int = 0

    @property
    def equation(self) -> str:
        sign = "" if self.law == "symmetry" else "-"
        return f"f(x_j, x_i) = {sign}f(x_i, x_j)"

    def __str__(self) -> str:
        head = f"{self.law} of {self.name} ({self.equation})"
        text = verdict(
            head,
            self.ok,
            self.trials,
            "random pairs",
            self.worst,
            self.max_abs_diff,
            self.rtol,
            self.atol,
        )
        ce = self.counterexample
        if self.ok or ce is None:
            return text
        c = self.where
        comp = f" (component {c})" if np.size(ce.f_ij) > 1 else ""
        return (
            f"{text}; counterexample{comp}: x_i={ce.x_i.tolist()}, x_j={ce.x_j.tolist()}: "
            f"f(x_i, x_j) = {np.ravel(ce.f_ij)[c]!r} but f(x_j, x_i) = {np.ravel(ce.f_ji)[c]!r}"
        )


def _values(f: Callable[..., Any], a: np.ndarray, b: np.ndarray, name: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        v = np.asarray(f(a, b))
    n = a.shape[0]
    if v.shape[:1] != (n,):
        raise ValueError(
            f"{name}(X_i, X_j) returned shape {v.shape} for {n} pairs: a pair function takes "
            "two (n, d) batches and returns one value (or one array) per pair, leading axis n"
        )
    return v.reshape(n, -1)


def check_symmetric(
    pair_fn: Callable[[np.ndarray, np.ndarray], Any],
    samples: Any,
    *,
    antisymmetric: bool = False,
    trials: int = 200,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
) -> SymmetryReport:
    """Test ``f(x_j, x_i) == +/- f(x_i, x_j)`` on random pairs of sample points.

    The law licenses :func:`propopt.pairwise_sum`'s halving: each unordered
    pair is evaluated once and credited to both ends.

    .. math:: f(x_j, x_i) = \\pm f(x_i, x_j)

    Parameters
    ----------
    pair_fn : callable
        ``f(X_i, X_j)`` on two batches of points of shape ``(n, d)``,
        returning one value (shape ``(n,)``) or one array (``(n, ...)``, a
        force vector say) per pair; the convention of the separability audits.
    samples : array (n, d) (or (n,) for 1-D points)
        Candidate points; ``trials`` pairs ``i != j`` are drawn from them.
    antisymmetric : bool
        Test ``f(x_j, x_i) = -f(x_i, x_j)`` instead.
    trials : int
        Number of random pairs.
    rtol, atol : float, optional
        Tolerance (see the module notes); by default ``rtol`` is 1e-4 for
        float32 values and 1e-10 for float64, ``atol`` 0.
    seed : int
        Seed of the pair sampler.

    Returns
    -------
    SymmetryReport
        ``ok``, the worst violation in units of the tolerance and, when the law
        fails, the worst pair as ``counterexample``; ``str()`` reads as a sentence.

    Raises
    ------
    ValueError
        For ``trials < 1``, fewer than one sample point, non-finite samples or a
        pair function returning the wrong number of values.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.audit import check_symmetric
    >>> def spring(xi, xj):  # Hooke's pull of j on i
    ...     return 2.0 * (xj - xi)
    >>> pts = np.random.default_rng(0).normal(size=(50, 3))
    >>> check_symmetric(spring, pts, antisymmetric=True).ok
    True
    >>> report = check_symmetric(spring, pts)
    >>> report.ok, report.law
    (False, 'symmetry')
    >>> print(check_symmetric(lambda a, b: a[:, 0] * b[:, 0] ** 2, pts))  # doctest: +ELLIPSIS
    symmetry of <lambda> (f(x_j, x_i) = f(x_i, x_j)): FAILS on 200 random pairs: ...
    """
    if not callable(pair_fn):
        raise TypeError(f"pair_fn={pair_fn!r} is not callable: pass f(X_i, X_j)")
    antisymmetric = flag("antisymmetric", antisymmetric)
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ValueError(f"trials={trials!r}: must be an int >= 1 (the number of pairs)")
    for nm, v in (("rtol", rtol), ("atol", atol)):
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating))
        ):
            raise TypeError(f"{nm}={v!r}: must be a finite number >= 0")
        if v is not None and not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{nm}={v!r}: must be a finite number >= 0")
    X = np.asarray(as_numpy(samples))
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"samples has shape {X.shape}: must be (n, d) points")
    if X.shape[0] < 1:
        raise ValueError(f"samples has shape {X.shape}: the audit needs at least one point")
    if X.dtype.kind in "fc" and not np.isfinite(X).all():
        i = int(np.argmax(~np.isfinite(X).all(axis=1)))
        raise ValueError(
            f"samples[{i}] = {X[i].tolist()} is not finite: coordinates must be finite"
        )
    name = _validate.name_of(pair_fn)
    rng = generator("seed", seed)
    n = X.shape[0]
    first: np.ndarray = rng.integers(0, n, trials)
    second: np.ndarray = rng.integers(0, n, trials)
    if n > 1:  # distinct points: a pair with itself says nothing about the law
        same = np.asarray(first == second)
        second[same] = (second[same] + rng.integers(1, n, int(same.sum()))) % n
    a, b = X[first], X[second]
    fij = _values(pair_fn, a, b, name)
    fji = _values(pair_fn, b, a, name)
    if fij.shape != fji.shape:
        raise ValueError(f"{name} returned shapes {fij.shape} and {fji.shape} for the two orders")
    sign = -1.0 if antisymmetric else 1.0
    kind = np.result_type(fij.dtype, fji.dtype)
    if rtol is None:
        size = kind.itemsize // 2 if kind.kind == "c" else kind.itemsize
        rt = _DEFAULT_RTOL.get(size, 1e-10) if kind.kind in "fc" else 0.0
    else:
        rt = float(rtol)
    at = 0.0 if atol is None else float(atol)
    wide = np.complex128 if kind.kind == "c" else np.float64
    l, r = fji.astype(wide), sign * fij.astype(wide)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        equal = (l == r) | (np.isnan(l) & np.isnan(r))
        diff = np.where(equal, 0.0, np.abs(l - r))
        diff[np.isnan(diff)] = np.inf
        mag = np.maximum(np.abs(l), np.abs(r))
        tol = at + rt * np.where(np.isfinite(mag), mag, 0.0)
        ratio = np.full(diff.shape, np.inf)
        np.divide(diff, tol, out=ratio, where=tol > 0)
        ratio[equal] = 0.0
    finite_diff = diff[np.isfinite(diff)]
    max_abs = float(diff.max(initial=0.0)) if finite_diff.size == diff.size else float("inf")
    per = ratio.max(axis=1, initial=0.0)
    k = int(np.argmax(per))
    worst = float(per[k])
    law = "antisymmetry" if antisymmetric else "symmetry"
    if worst <= 1.0:
        return SymmetryReport(True, trials, worst, max_abs, None, rt, at, name, law)
    c = int(np.argmax(ratio[k]))
    shape = np.asarray(pair_fn(a[k : k + 1], b[k : k + 1])).shape[1:]
    ce = PairCounterexample(a[k].copy(), b[k].copy(), fij[k].reshape(shape), fji[k].reshape(shape))
    return SymmetryReport(False, trials, worst, max_abs, ce, rt, at, name, law, c)
