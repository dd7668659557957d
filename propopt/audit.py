"""Property audits: does a combine really have the property a primitive needs?

The associativity law licenses every regrouping that :func:`associative_scan`
does::

    fn(fn(a, b), c) == fn(a, fn(b, c))

:func:`check_associative` evaluates both sides on random triples of sample
elements (in one vectorized call each) and reports the worst violation
relative to a floating-point tolerance, with the counterexample.
:func:`check_commutative` and :func:`check_identity` do the same for
``fn(a, b) == fn(b, a)`` and ``fn(e, a) == a == fn(a, e)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _pytree
from .associativity.monoid import Monoid

__all__ = [
    "AssociativityError",
    "PropertyReport",
    "check_associative",
    "check_commutative",
    "check_identity",
]

# Default relative tolerance by dtype kind and size: a few hundred ulps, so
# that rounding of a reordered float sum (which is not exactly associative)
# is not reported, while a real violation (a - b, the mean) is off by O(1).
_RTOL = {2: 1e-2, 4: 1e-4, 8: 1e-10}


@dataclass(frozen=True)
class PropertyReport:
    """Outcome of one property check."""

    property: str
    name: str
    ok: bool
    trials: int
    worst: float  # worst |left - right| / tolerance; <= 1 means within it
    max_abs_diff: float
    rtol: float
    atol: float
    counterexample: dict[str, Any] | None

    def __str__(self) -> str:
        head = f"{self.property} of {self.name}"
        if self.ok:
            return (
                f"{head}: holds on {self.trials} random samples (worst |difference| "
                f"{self.max_abs_diff:.3g}, {self.worst:.2g} of the tolerance rtol={self.rtol:g})"
            )
        ce = self.counterexample or {}
        parts = ", ".join(f"{k}={_short(v)}" for k, v in ce.items())
        return (
            f"{head}: FAILS on {self.trials} random samples; worst violation "
            f"{self.worst:.3g}x the tolerance (|difference| {self.max_abs_diff:.3g}, "
            f"rtol={self.rtol:g}, atol={self.atol:g}); counterexample: {parts}"
        )


AssociativityReport = PropertyReport


class AssociativityError(ValueError):
    """A combine given to a scan is not associative on the given data."""

    def __init__(self, report: PropertyReport) -> None:
        self.report = report
        super().__init__(
            f"{report}. The scan's result would depend on how the work is split; pass "
            "a combine that is associative, or loosen rtol if the difference is rounding"
        )


def _short(tree: Any) -> str:
    leaves, _ = _pytree.flatten(tree)
    vals = [np.asarray(x).ravel()[:4].tolist() for x in leaves]
    return str(vals[0] if len(vals) == 1 else vals)


def _name(fn: Any) -> str:
    return fn.name if isinstance(fn, Monoid) else getattr(fn, "__name__", repr(fn))


def _as_numpy(leaves: list[Any]) -> list[np.ndarray]:
    out = []
    for x in leaves:
        if type(x).__module__.split(".", 1)[0] == "torch":
            x = x.detach().cpu().numpy()
        elif hasattr(x, "compute"):
            x = x.compute()
        out.append(np.asarray(x))
    return out


def _prepare(samples: Any, axis: int, trials: int) -> tuple[list[np.ndarray], Any, int, int]:
    if not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ValueError(f"trials={trials!r} must be an int >= 1")
    leaves, td = _pytree.flatten(samples)
    if not leaves:
        raise ValueError("samples holds no arrays; pass an array or a pytree of arrays")
    leaves = _as_numpy(leaves)
    if leaves[0].ndim == 0:
        raise ValueError("samples must have at least one axis of candidate elements")
    ax = axis % leaves[0].ndim
    n = leaves[0].shape[ax]
    if n < 1:
        raise ValueError(
            f"samples has length {n} along axis {ax}; give at least one candidate element"
        )
    return leaves, td, ax, n


def _tolerance(
    leaves: list[np.ndarray], rtol: float | None, atol: float | None
) -> tuple[float, float]:
    dt = leaves[0].dtype
    if dt.kind in "iub":
        return (0.0 if rtol is None else rtol), (0.0 if atol is None else atol)
    size = dt.itemsize // 2 if dt.kind == "c" else dt.itemsize
    r = _RTOL.get(size, 1e-10) if rtol is None else rtol
    return r, (0.0 if atol is None else atol)


def _call(fn: Any, td: Any, a: list[Any], b: list[Any]) -> list[Any]:
    if isinstance(fn, Monoid):
        return list(fn.combine_leaves(a, b))
    res = fn(_pytree.unflatten(td, a), _pytree.unflatten(td, b))
    return _pytree.flatten(res)[0]


def _compare(
    left: list[Any], right: list[Any], rtol: float, atol: float, ax: int
) -> tuple[np.ndarray, float]:
    """Per-trial violation ratio (|l - r| / tolerance; 0 where equal)."""
    worst = None
    max_abs = 0.0
    for lv, rv in zip(_as_numpy(left), _as_numpy(right)):
        lv = np.moveaxis(lv, ax, 0).reshape(lv.shape[ax], -1)
        rv = np.moveaxis(rv, ax, 0).reshape(rv.shape[ax], -1)
        with np.errstate(invalid="ignore", over="ignore"):
            wide = np.complex128 if lv.dtype.kind == "c" else np.float64
            diff = np.abs(lv.astype(wide) - rv.astype(wide))
            equal = (lv == rv) | (np.isnan(lv) & np.isnan(rv))
            tol = atol + rtol * np.maximum(np.abs(lv), np.abs(rv))
            ratio = np.where(
                equal, 0.0, np.where(tol > 0, diff / np.where(tol > 0, tol, 1), np.inf)
            )
            ratio = np.where(np.isnan(ratio), np.inf, ratio)
        finite = diff[~equal & np.isfinite(diff)]
        max_abs = max(max_abs, float(finite.max()) if finite.size else 0.0)
        per = ratio.max(axis=1) if ratio.shape[1] else np.zeros(ratio.shape[0])
        worst = per if worst is None else np.maximum(worst, per)
    assert worst is not None
    return worst, max_abs


def _take(leaves: list[np.ndarray], idx: np.ndarray, ax: int) -> list[np.ndarray]:
    return [np.take(x, idx, axis=ax) for x in leaves]


def _report(
    prop: str,
    fn: Any,
    td: Any,
    ratio: np.ndarray,
    max_abs: float,
    trials: int,
    rtol: float,
    atol: float,
    ax: int,
    parts: dict[str, list[np.ndarray]],
) -> PropertyReport:
    k = int(np.argmax(ratio))
    worst = float(ratio[k])
    ok = worst <= 1.0
    ce = None
    if not ok:
        ce = {key: _pytree.unflatten(td, [np.take(x, [k], axis=ax) for x in v])
              for key, v in parts.items()}  # fmt: skip
    return PropertyReport(prop, _name(fn), ok, trials, worst, max_abs, rtol, atol, ce)


def check_associative(fn: Any, samples: Any, *, axis: int = 0, trials: int = 200,
                      rtol: float | None = None, atol: float | None = None,
                      seed: int = 0) -> PropertyReport:  # fmt: skip
    """Test ``fn(fn(a, b), c) == fn(a, fn(b, c))`` on random triples of samples.

    Parameters
    ----------
    fn : Monoid or callable
        A monoid, or ``fn(a, b)`` combining two batches elementwise (the
        convention of :func:`propopt.associative_scan`).
    samples : array or pytree of arrays
        Candidate elements along ``axis`` (NumPy, torch or dask arrays).
    axis : int
        The axis that indexes the elements.
    trials : int
        Number of random triples, all evaluated in one batched call per side.
    rtol, atol : float, optional
        Tolerance; by default a few hundred ulps of the dtype (1e-4 for
        float32, 1e-10 for float64) and exact for integers.
    seed : int
        Seed of the triple sampler.

    Returns
    -------
    PropertyReport
        ``ok``, the worst violation in units of the tolerance, and the
        worst triple as ``counterexample`` (``a``, ``b``, ``c``, ``left``,
        ``right``) when the law fails.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import add
    >>> from propopt.audit import check_associative
    >>> check_associative(add, np.arange(10.0)).ok
    True
    >>> r = check_associative(lambda a, b: a - b, np.arange(10.0))
    >>> r.ok, sorted(r.counterexample)
    (False, ['a', 'b', 'c', 'left', 'right'])
    """
    leaves, td, ax, n = _prepare(samples, axis, trials)
    rt, at = _tolerance(leaves, rtol, atol)
    rng = np.random.default_rng(seed)
    i, j, k = (rng.integers(0, n, trials) for _ in range(3))
    a, b, c = _take(leaves, i, ax), _take(leaves, j, ax), _take(leaves, k, ax)
    left = _call(fn, td, _call(fn, td, a, b), c)
    right = _call(fn, td, a, _call(fn, td, b, c))
    ratio, max_abs = _compare(left, right, rt, at, ax)
    parts = {"a": a, "b": b, "c": c, "left": left, "right": right}
    return _report("associativity", fn, td, ratio, max_abs, trials, rt, at, ax, parts)


def check_commutative(fn: Any, samples: Any, *, axis: int = 0, trials: int = 200,
                      rtol: float | None = None, atol: float | None = None,
                      seed: int = 0) -> PropertyReport:  # fmt: skip
    """Test ``fn(a, b) == fn(b, a)`` on random pairs (see :func:`check_associative`).

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import add
    >>> from propopt.audit import check_commutative
    >>> check_commutative(add, np.arange(5.0)).ok
    True
    """
    leaves, td, ax, n = _prepare(samples, axis, trials)
    rt, at = _tolerance(leaves, rtol, atol)
    rng = np.random.default_rng(seed)
    a, b = (_take(leaves, rng.integers(0, n, trials), ax) for _ in range(2))
    left, right = _call(fn, td, a, b), _call(fn, td, b, a)
    ratio, max_abs = _compare(left, right, rt, at, ax)
    parts = {"a": a, "b": b, "left": left, "right": right}
    return _report("commutativity", fn, td, ratio, max_abs, trials, rt, at, ax, parts)


def check_identity(monoid: Monoid, samples: Any, *, axis: int = 0, rtol: float | None = None,
                   atol: float | None = None) -> PropertyReport:  # fmt: skip
    """Test ``combine(e, a) == a == combine(a, e)`` for every sample ``a``.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import linear_recurrence
    >>> from propopt.audit import check_identity
    >>> check_identity(linear_recurrence, (np.ones(4), np.arange(4.0))).ok
    True
    """
    leaves, td, ax, n = _prepare(samples, axis, 1)
    rt, at = _tolerance(leaves, rtol, atol)
    e = [np.broadcast_to(np.asarray(v, x.dtype), x.shape)
         for v, x in zip(monoid.identity(leaves[0].dtype), leaves)]  # fmt: skip
    left = monoid.combine_leaves(e, leaves)
    right = monoid.combine_leaves(leaves, e)
    r1, m1 = _compare(left, leaves, rt, at, ax)
    r2, m2 = _compare(right, leaves, rt, at, ax)
    parts = {"a": leaves, "e.a": list(left), "a.e": list(right)}
    return _report("identity", monoid, td, np.maximum(r1, r2), max(m1, m2), n, rt, at, ax, parts)
