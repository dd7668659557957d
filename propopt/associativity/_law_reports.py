"""Reports of the law audits: counterexamples, tolerances, the comparison of two sides."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .. import _pytree, _validate
from .._reports import verdict
from ._law_samples import Samples, to_numpy

Leaves = list[Any]

_DEFAULT_RTOL = {2: 1e-2, 4: 1e-4, 8: 1e-10}
"""Default rtol by the byte size of a float (of each part of a complex)."""


class Triple(NamedTuple):
    """Counterexample to associativity: ``left = fn(fn(a, b), c)``, ``right = fn(a, fn(b, c))``."""

    a: Any
    b: Any
    c: Any
    left: Any
    right: Any


class Pair(NamedTuple):
    """Counterexample to commutativity: ``left = fn(a, b)``, ``right = fn(b, a)``."""

    a: Any
    b: Any
    left: Any
    right: Any


class Single(NamedTuple):
    """Counterexample to the identity law: ``left = fn(e, a)``, ``right = fn(a, e)``."""

    a: Any
    left: Any
    right: Any


_SIDES = {
    "associativity": ("random triples", "fn(fn(a, b), c)", "fn(a, fn(b, c))"),
    "commutativity": ("random pairs", "fn(a, b)", "fn(b, a)"),
    "identity": ("elements", "fn(e, a)", "fn(a, e)"),
}


@dataclass(frozen=True)
class AssociativityReport:
    """Outcome of a property audit (:func:`check_associative` and friends).

    Attributes
    ----------
    ok : bool
        Whether the law held within tolerance on every sample.
    trials : int
        Number of triples (pairs, elements) evaluated.
    worst : float
        Worst violation in units of the tolerance: ``|left - right| /
        (atol + rtol * s)``; ``<= 1`` is within tolerance, ``inf`` means a
        difference where none is tolerated (integers, a NaN on one side).
    max_abs_diff : float
        Largest ``|left - right|`` over all samples and positions.
    counterexample : Triple, Pair, Single or None
        The worst sample when the law fails: named tuples of pytrees of
        NumPy arrays with length 1 along the sampled axis, e.g.
        ``(a, b, c, left, right)`` for associativity.  ``None`` when ``ok``.
    rtol, atol : float
        The tolerance used (the largest per-leaf ``rtol`` when leaves differ
        in dtype).
    name : str
        Name of the combine.
    law : str
        ``'associativity'``, ``'commutativity'`` or ``'identity'``.
    where : tuple of int
        Index of the worst position inside each counterexample leaf.
    """

    ok: bool
    trials: int
    worst: float
    max_abs_diff: float
    counterexample: Triple | Pair | Single | None
    rtol: float
    atol: float
    name: str
    law: str = "associativity"
    where: tuple[int, ...] = ()

    def __str__(self) -> str:
        samples, left, right = _SIDES.get(self.law, ("samples", "left", "right"))
        samples = samples[:-1] if self.trials == 1 else samples
        head = f"{self.law} of {self.name}"
        text = verdict(
            head, self.ok, self.trials, samples, self.worst, self.max_abs_diff, self.rtol, self.atol
        )
        ce = self.counterexample
        if self.ok or ce is None:
            return text
        at = f" at index {list(self.where)}" if len(self.where) > 1 else ""
        inputs = ", ".join(f"{k}={_show(v, self.where)}" for k, v in zip(ce._fields, ce[:-2]))
        lv, rv = _show(ce.left, self.where), _show(ce.right, self.where)
        if self.law == "identity":
            sides = f"{left} = {lv}, {right} = {rv} (both should equal a)"
        else:
            sides = f"{left} = {lv} but {right} = {rv}"
        return f"{text}; counterexample{at}: {inputs}: {sides}"


PropertyReport = AssociativityReport
"""Alias used for the reports of the commutativity and identity audits."""


class AssociativityError(ValueError):
    """A combine given to a scan is not associative on the given data.

    Raised by :func:`~propopt.associative_scan` when its check fails (on a
    plain callable's first use, or with ``check=True``); ``.report`` holds
    the :class:`AssociativityReport` with the counterexample.
    """

    def __init__(self, report: AssociativityReport, automatic: bool = False) -> None:
        self.report = report
        self.automatic = automatic
        how = "pass check=False to skip this check" if automatic else "scan without check=True"
        super().__init__(
            f"{report}. The scan's result would depend on how the work is split; pass a "
            "combine that is associative, or, if the difference is only rounding, loosen "
            f"rtol: audit with propopt.audit.check_associative(fn, elems, rtol=...) and {how}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.report, self.automatic))


def magnitudes(s: Samples, sides: Callable[..., tuple[Leaves, ...]], *args: Leaves) -> list[Leaves]:
    """The sides of a law evaluated on the operands' absolute values.

    For a combine built from sums and products this bounds the magnitude of
    the terms whose rounding errors add up (the classical running error
    bound), e.g. ``|a||b| + |c||d|`` for a matrix product, where the result
    itself may have cancelled.  Best effort: empty for integers, or when
    ``fn`` rejects the absolute values.
    """
    if not any(np.dtype(_validate.np_dtype(x.dtype) or np.float64).kind in "fc" for x in args[0]):
        return []
    try:
        with s.evaluating():
            return list(sides(*([abs(x) for x in leaves] for leaves in args)))
    except Exception:  # a combine with a restricted domain: no bound from it
        return []


def _default_rtol(dtype: np.dtype) -> float:
    if dtype.kind not in "fc":
        return 0.0
    size = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    return _DEFAULT_RTOL.get(size, 1e-10)


def _rows(x: np.ndarray, ax: int) -> np.ndarray:
    """``x`` with the sampled axis first and the others flattened: (trials, positions)."""
    x = np.moveaxis(x, ax, 0)
    return x.reshape(x.shape[0], -1)


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _abs_diff(lv: np.ndarray, rv: np.ndarray) -> np.ndarray:
    """``|lv - rv|`` as float64, exact for integers of any size (no wraparound)."""
    if lv.dtype.kind in "iu" and rv.dtype.kind in "iu" and np.result_type(lv, rv).kind in "iu":
        hi, lo = np.maximum(lv, rv), np.minimum(lv, rv)
        return (hi.astype(np.uint64) - lo.astype(np.uint64)).astype(np.float64)
    return np.abs(_wide(lv) - _wide(rv))


def compare(
    s: Samples,
    left: Leaves,
    right: Leaves,
    sources: Sequence[Leaves],
    rtol: float | None,
    atol: float | None,
) -> tuple[list[np.ndarray], float, float, float]:
    """Compare two evaluations of a law, position by position.

    Returns, per leaf, the violation ratio ``|l - r| / (atol + rtol * scale)``
    as a (trials, positions) array (0 where ``l == r`` or both are NaN, inf
    where they differ and nothing is tolerated), the largest ``|l - r|``, and
    the ``rtol`` and ``atol`` used.  ``scale`` is the largest finite
    magnitude at the position among ``sources`` (operands, intermediates,
    results).
    """
    at = 0.0 if atol is None else float(atol)
    ratios, max_abs, rt_used = [], 0.0, 0.0
    for i, (l_leaf, r_leaf) in enumerate(zip(left, right)):
        lv, rv = _rows(to_numpy(l_leaf), s.ax), _rows(to_numpy(r_leaf), s.ax)
        if lv.shape != rv.shape:
            raise ValueError(
                f"the two sides of the {s.name} law differ in shape at leaf {i}: "
                f"{lv.shape} and {rv.shape}; fn must combine elementwise"
            )
        rt = _default_rtol(np.result_type(lv, rv)) if rtol is None else float(rtol)
        rt_used = max(rt_used, rt)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            equal = lv == rv
            if lv.dtype.kind in "fc" or rv.dtype.kind in "fc":
                equal |= np.isnan(_wide(lv)) & np.isnan(_wide(rv))
            diff = np.where(equal, 0.0, _abs_diff(lv, rv))
            diff[np.isnan(diff)] = np.inf
            scale = np.zeros(diff.shape)
            if rt > 0:
                for src in sources:
                    mag = np.abs(_wide(_rows(to_numpy(src[i]), s.ax)))
                    scale = np.maximum(scale, np.where(np.isfinite(mag), mag, 0.0))
            # below the smallest normal number precision is absolute, so the
            # default floor is rtol of it (hundreds of subnormal steps); a
            # monoid that flushes to zero there (Monoid.flush) may move a value
            # by up to the smallest normal itself
            floor = at
            if atol is None and rt > 0 and lv.dtype.kind in "fc":
                flushed = s.is_monoid and i in s.fn.flush
                floor = (1.0 if flushed else rt) * float(np.finfo(lv.dtype).smallest_normal)
            tol = floor + rt * scale
            ratio = np.full(diff.shape, np.inf)
            np.divide(diff, tol, out=ratio, where=tol > 0)
            ratio[equal] = 0.0
        ratios.append(ratio)
        max_abs = max(max_abs, float(diff.max(initial=0.0)))
    return ratios, max_abs, rt_used, at


def report(
    law: str,
    s: Samples,
    ratios: list[np.ndarray],
    max_abs: float,
    rtol: float,
    atol: float,
    kind: type[Triple] | type[Pair] | type[Single],
    parts: list[Leaves],
) -> AssociativityReport:
    """Judge per-leaf violation ratios; pick out the worst sample if the law fails."""
    per_trial = np.max([r.max(axis=1, initial=0.0) for r in ratios], axis=0)
    k = int(np.argmax(per_trial))
    worst = float(per_trial[k])
    trials = len(per_trial)
    if worst <= 1.0:
        return AssociativityReport(True, trials, worst, max_abs, None, rtol, atol, s.name, law)
    leaf = int(np.argmax([r[k].max(initial=0.0) for r in ratios]))
    pos = int(np.argmax(ratios[leaf][k]))
    shape = tuple(to_numpy(parts[-1][leaf]).shape)
    other = shape[: s.ax] + shape[s.ax + 1 :]
    where = tuple(int(i) for i in np.unravel_index(pos, other)) if other else ()
    where = where[: s.ax] + (0,) + where[s.ax :]
    pick = (slice(None),) * s.ax + (slice(k, k + 1),)
    ce = kind(*(_pytree.unflatten(s.td, [to_numpy(x)[pick] for x in p]) for p in parts))
    return AssociativityReport(False, trials, worst, max_abs, ce, rtol, atol, s.name, law, where)


def _show(tree: Any, where: tuple[int, ...]) -> str:
    """The value of a counterexample pytree at one position, e.g. ``(0.5, 1.0)``."""
    leaves, td = _pytree.flatten(tree)
    vals = iter(str(np.asarray(x)[where]) for x in leaves)
    return _show_tree(td, vals)


def _show_tree(td: _pytree.TreeDef, vals: Any) -> str:
    if td.kind == "leaf":
        return next(vals)
    kids = [_show_tree(c, vals) for c in td.children]
    if td.kind == "dict":
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(td.keys, kids)) + "}"
    if td.kind == "list":
        return "[" + ", ".join(kids) + "]"
    name = td.cls.__name__ if td.kind == "namedtuple" and td.cls is not None else ""
    return name + "(" + ", ".join(kids) + ("," if len(kids) == 1 and not name else "") + ")"
