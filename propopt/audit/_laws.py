"""Property audits: does a combine really have the law a primitive relies on?

:func:`~propopt.associative_scan` regroups a fold into independent pieces,
which is correct only if the combine ``.`` (written ``fn(a, b) = a . b``) is
associative:

.. math:: (a \\cdot b) \\cdot c = a \\cdot (b \\cdot c)
          \\quad\\text{i.e.}\\quad
          fn(fn(a, b), c) = fn(a, fn(b, c)).

A combine that breaks the law gives results that depend on how the work was
split (thread count, block size, backend).  :func:`check_associative`
evaluates both sides on random triples drawn from sample elements, all
triples at once in batched calls of ``fn``, and reports the worst violation relative to a
floating-point tolerance together with the counterexample.
:func:`check_commutative` (``fn(a, b) = fn(b, a)``) and :func:`check_identity`
(``fn(e, a) = a = fn(a, e)``) audit the two other monoid laws the same way.

Tolerance
---------
Floating-point combines are associative only up to rounding: ``(a + b) + c``
and ``a + (b + c)`` may differ in the last bits.  A position counts as a
violation when

.. math:: |left - right| > atol + rtol \\cdot s

where ``s`` is the largest finite magnitude at that position among the
operands, the intermediate combinations, both results, and both sides
evaluated on the operands' absolute values.  The rounding error of a combine
scales with what it combines, not with its possibly cancelled result; for
combines built from sums and products the absolute-value evaluation bounds
the terms whose errors add up (``|a||b| + |c||d|`` for a matrix product), so
the audit does not mistake rounding for a violation at any magnitude of the
data.  The default ``rtol`` is a few hundred ulps of the result dtype (1e-2
for float16, 1e-4 for float32, 1e-10 for float64) and the default ``atol``
is ``rtol`` times the smallest normal number of the dtype (subnormal results
have absolute, not relative, precision); integers are compared exactly.
Equal values, including two infinities of one sign and two NaNs, are never a
violation; a NaN on one side only always is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .. import _dispatch, _pytree
from .._validate import check_axis as _check_axis
from .._validate import np_dtype as _np_dtype
from ..associativity.monoid import Monoid

__all__ = [
    "AssociativityError",
    "AssociativityReport",
    "Pair",
    "PropertyReport",
    "Single",
    "Triple",
    "check_associative",
    "check_commutative",
    "check_identity",
]

Leaves = list[Any]

_DEFAULT_RTOL = {2: 1e-2, 4: 1e-4, 8: 1e-10}
"""Default rtol by the byte size of a float (of each part of a complex)."""

MAX_POSITIONS = 1024
"""For a :class:`~propopt.Monoid` (an elementwise combine), at most this many
positions across the non-sampled axes are audited, chosen at random."""


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
        tol = f"rtol={self.rtol:g}, atol={self.atol:g}"
        if self.ok:
            return (
                f"{head}: holds on {self.trials} {samples} (worst |difference| "
                f"{self.max_abs_diff:.3g}, {self.worst:.3g} of the tolerance {tol})"
            )
        how = (
            "a difference where none is tolerated"
            if np.isinf(self.worst)
            else f"{self.worst:.3g} times the tolerance"
        )
        text = (
            f"{head}: FAILS on {self.trials} {samples}: worst violation {how} "
            f"(worst |difference| {self.max_abs_diff:.3g}, {tol})"
        )
        ce = self.counterexample
        if ce is None:
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


# --------------------------------------------------------------- the audits
def check_associative(
    fn: Monoid | Callable[[Any, Any], Any],
    samples: Any,
    *,
    axis: int = 0,
    trials: int = 200,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
) -> AssociativityReport:
    """Test ``fn(fn(a, b), c) == fn(a, fn(b, c))`` on random triples of samples.

    The law licenses every regrouping a parallel scan or reduction does:

    .. math:: (a \\cdot b) \\cdot c = a \\cdot (b \\cdot c),
              \\qquad a \\cdot b = fn(a, b).

    ``trials`` triples of indices are drawn with repetition (from a fixed
    seed); both sides are evaluated for all triples at once, as batches along
    ``axis``, in two calls of ``fn`` each.

    Parameters
    ----------
    fn : Monoid or callable
        A :class:`~propopt.Monoid`, or ``fn(a, b)`` combining two batches of
        elements elementwise along ``axis`` (the convention of
        :func:`propopt.associative_scan` and ``jax.lax.associative_scan``);
        ``a`` and ``b`` are pytrees shaped like ``samples``.
    samples : array or pytree of arrays
        Candidate elements, indexed along ``axis``: NumPy arrays, torch
        tensors, dask arrays or CUDA device arrays.  A plain callable given
        torch tensors is called with torch tensors; a monoid is evaluated on
        NumPy copies.  Only the drawn elements are gathered (and computed,
        for dask).
    axis : int
        The axis that indexes the elements.
    trials : int
        Number of random triples.
    rtol, atol : float, optional
        Tolerance (see the module notes): by default ``rtol`` is 1e-2 for
        float16, 1e-4 for float32 and 1e-10 for float64 results, 0 for
        integers, and ``atol`` is ``rtol`` times the dtype's smallest normal
        number (the reported ``atol`` is 0 when only this floor applies).
    seed : int
        Seed of the triple sampler.

    Returns
    -------
    AssociativityReport
        ``ok``, the worst violation in units of the tolerance, and when the
        law fails the worst triple as ``counterexample`` (a :class:`Triple`
        ``(a, b, c, left, right)``).

    Raises
    ------
    ValueError
        If ``trials < 1``, ``samples`` holds no arrays or no element along
        ``axis``, or ``fn`` returns a different structure or shape.

    Notes
    -----
    For a monoid, whose combine is elementwise, at most
    :data:`MAX_POSITIONS` positions across the other axes are audited; the
    counterexample then holds those positions flattened into one axis after
    the sampled one.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import add, linear_recurrence
    >>> from propopt.audit import check_associative
    >>> print(check_associative(add, np.arange(10.0)))  # doctest: +NORMALIZE_WHITESPACE
    associativity of add: holds on 200 random triples (worst |difference| 0,
    0 of the tolerance rtol=1e-10, atol=0)
    >>> rng = np.random.default_rng(0)
    >>> check_associative(linear_recurrence, (rng.normal(size=50), rng.normal(size=50))).ok
    True
    >>> report = check_associative(lambda a, b: a - b, np.arange(10.0))
    >>> report.ok, report.counterexample.c
    (False, array([3.]))
    >>> print(report)  # doctest: +ELLIPSIS, +NORMALIZE_WHITESPACE
    associativity of <lambda>: FAILS on 200 random triples: worst violation 2e+10 times
    the tolerance ...; counterexample: a=0.0, b=0.0, c=3.0: fn(fn(a, b), c) = -3.0
    but fn(a, fn(b, c)) = 3.0
    """
    s = _Samples(fn, samples, axis)
    _check_trials(trials)
    rows = np.random.default_rng(seed).integers(0, s.n, 3 * trials)
    a, b, c = s.split(s.gather(rows, seed), 3)
    return _associativity(s, a, b, c, rtol, atol)


def check_commutative(
    fn: Monoid | Callable[[Any, Any], Any],
    samples: Any,
    *,
    axis: int = 0,
    trials: int = 200,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
) -> AssociativityReport:
    """Test ``fn(a, b) == fn(b, a)`` on random pairs of samples.

    .. math:: a \\cdot b = b \\cdot a

    No primitive of propopt assumes commutativity (a scan always passes the
    earlier element first), but a combine that has it may be reduced in any
    order.  Parameters, tolerance and return value as in
    :func:`check_associative`; the counterexample is a :class:`Pair`
    ``(a, b, left, right)`` with ``left = fn(a, b)`` and ``right = fn(b, a)``.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import add, matmul2x2
    >>> from propopt.audit import check_commutative
    >>> check_commutative(add, np.arange(5.0)).ok
    True
    >>> m = tuple(np.random.default_rng(0).normal(size=(4, 20)))
    >>> report = check_commutative(matmul2x2, m)
    >>> report.ok, report.law
    (False, 'commutativity')
    """
    s = _Samples(fn, samples, axis)
    _check_trials(trials)
    rows = np.random.default_rng(seed).integers(0, s.n, 2 * trials)
    a, b = s.split(s.gather(rows, seed), 2)
    with s.evaluating():
        left, right = s.call(a, b), s.call(b, a)
    bound = _magnitudes(s, lambda x, y: (s.call(x, y),), a, b)
    ratios, max_abs, rt, at = _compare(s, left, right, [a, b, left, right, *bound], rtol, atol)
    return _report("commutativity", s, ratios, max_abs, rt, at, Pair, [a, b, left, right])


def check_identity(
    monoid: Monoid,
    samples: Any,
    *,
    axis: int = 0,
    trials: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
) -> AssociativityReport:
    """Test ``combine(e, a) == a == combine(a, e)`` for the monoid's identity ``e``.

    .. math:: e \\cdot a = a = a \\cdot e

    An exclusive scan starts from ``e``, and blocks of a parallel scan are
    padded with it, so a wrong identity shifts results.

    Parameters
    ----------
    monoid : Monoid
        The monoid whose ``identity(dtype)`` is checked.
    samples : array or pytree of arrays
        Elements ``a`` along ``axis`` (as in :func:`check_associative`).
    axis : int
        The axis that indexes the elements.
    trials : int, optional
        Number of elements drawn at random; by default every element.
    rtol, atol : float, optional
        Tolerance, as in :func:`check_associative`.
    seed : int
        Seed used when ``trials`` is given.

    Returns
    -------
    AssociativityReport
        With ``law == 'identity'``; the counterexample is a :class:`Single`
        ``(a, left, right)`` with ``left = fn(e, a)`` and ``right = fn(a, e)``.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import Monoid, linear_recurrence
    >>> from propopt.audit import check_identity
    >>> check_identity(linear_recurrence, (np.ones(4), np.arange(4.0))).ok
    True
    >>> wrong = Monoid(lambda a, b: a + b, identity=1.0, name="add")
    >>> print(check_identity(wrong, np.array([2.0])))  # doctest: +ELLIPSIS, +NORMALIZE_WHITESPACE
    identity of add: FAILS on 1 element: ...; counterexample: a=2.0:
    fn(e, a) = 3.0, fn(a, e) = 3.0 (both should equal a)
    """
    if not isinstance(monoid, Monoid):
        raise TypeError(
            f"check_identity needs a Monoid (it knows its identity), got {monoid!r}; wrap "
            "the combine with propopt.Monoid(combine, identity)"
        )
    s = _Samples(monoid, samples, axis)
    if trials is None:
        rows = np.arange(s.n)
    else:
        _check_trials(trials)
        rows = np.random.default_rng(seed).integers(0, s.n, trials)
    a = s.gather(rows, seed)
    e = [np.broadcast_to(np.asarray(v, x.dtype), x.shape) for v, x in zip(s.identity(), a)]
    with s.evaluating():
        left, right = s.call(e, a), s.call(a, e)
    sources = [a, left, right]
    r1, m1, rt, at = _compare(s, left, a, sources, rtol, atol)
    r2, m2, _, _ = _compare(s, right, a, sources, rtol, atol)
    ratios = [np.maximum(x, y) for x, y in zip(r1, r2)]
    return _report("identity", s, ratios, max(m1, m2), rt, at, Single, sources)


# ----------------------------------------------------------------- helpers
def _check_trials(trials: Any) -> None:
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ValueError(f"trials must be an int >= 1 (the number of samples), got {trials!r}")


def _name(fn: Any) -> str:
    if isinstance(fn, Monoid):
        return str(fn.name)
    return str(getattr(fn, "__name__", type(fn).__name__))


def _to_numpy(x: Any) -> np.ndarray:
    kind = _dispatch.array_kind(x)
    if kind in (_dispatch.TORCH, _dispatch.TORCH_CUDA):
        return x.detach().cpu().resolve_conj().numpy()
    if kind == _dispatch.DASK:
        return np.asarray(x.compute())
    if kind == _dispatch.CUDA and hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    return np.asarray(x)


class _Samples:
    """Validated samples: structure, sampled axis, and how to gather and call."""

    def __init__(self, fn: Any, samples: Any, axis: Any) -> None:
        leaves, self.td = _pytree.flatten(samples)
        if not leaves:
            raise ValueError("samples holds no arrays; pass an array or a pytree of arrays")
        paths = _pytree.leaf_paths(self.td, "samples")
        self.kind = _dispatch.common_kind(leaves, paths)
        self.ax = _check_axis(axis, leaves, paths)
        self.n = int(leaves[0].shape[self.ax])
        if self.n < 1:
            raise ValueError(
                f"samples has length {self.n} along axis {self.ax} (shape "
                f"{tuple(leaves[0].shape)}); the audit needs at least one candidate element"
            )
        self.fn, self.name, self.leaves = fn, _name(fn), leaves
        self.is_monoid = isinstance(fn, Monoid)
        # a plain callable sees the array type it was written for
        self.native = not self.is_monoid and self.kind in (_dispatch.TORCH, _dispatch.TORCH_CUDA)
        if self.is_monoid:
            if len(leaves) != fn.arity:
                raise ValueError(
                    f"monoid {fn.name!r} combines elements of {fn.arity} array(s) but samples "
                    f"has {len(leaves)} leaves ({', '.join(paths)})"
                )
            dtype = _np_dtype(leaves[0].dtype)
            if dtype is None or not fn.accepts(dtype):
                raise TypeError(
                    f"monoid {fn.name!r} cannot combine samples of dtype {dtype} (it accepts "
                    f"dtype kinds {fn.kinds!r}); cast the samples first"
                )

    def gather(self, rows: np.ndarray, seed: int) -> Leaves:
        """The elements ``rows`` along the axis, for every leaf (one gather per leaf).

        For a monoid with many positions across the other axes, a random
        subset of ``MAX_POSITIONS`` of them is taken and the axis becomes 0.
        """
        shape = tuple(self.leaves[0].shape)
        other = shape[: self.ax] + shape[self.ax + 1 :]
        index: tuple[Any, ...] = (slice(None),) * self.ax + (rows,)
        if self.is_monoid and int(np.prod(other)) > MAX_POSITIONS:
            flat = np.random.default_rng(seed + 1).choice(
                int(np.prod(other)), MAX_POSITIONS, replace=False
            )
            pos = [p[None, :] for p in np.unravel_index(np.sort(flat), other)]
            index = (*pos[: self.ax], rows[:, None], *pos[self.ax :])
            self.ax = 0
        return [self._take(x, index) for x in self.leaves]

    def _take(self, x: Any, index: tuple[Any, ...]) -> Any:
        if self.kind in (_dispatch.TORCH, _dispatch.TORCH_CUDA):
            import torch

            idx = tuple(
                i if isinstance(i, slice) else torch.as_tensor(i, device=x.device) for i in index
            )
            with torch.no_grad():
                out = x[idx]
            return out if self.native else _to_numpy(out)
        if self.kind == _dispatch.DASK:
            fancy = sum(not isinstance(i, slice) for i in index) > 1
            return _to_numpy(x.vindex[index] if fancy else x[index])
        return _to_numpy(x)[index]

    def split(self, leaves: Leaves, parts: int) -> list[Leaves]:
        """Cut gathered leaves into ``parts`` equal batches along the axis."""
        size = int(leaves[0].shape[self.ax]) // parts
        pre = (slice(None),) * self.ax
        return [[x[pre + (slice(p * size, (p + 1) * size),)] for x in leaves] for p in range(parts)]

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Context for calling ``fn``: no floating-point warnings from the sampled
        combinations (they are judged, not reported), no autograd graph for torch."""
        with np.errstate(all="ignore"):
            if self.native:
                import torch

                with torch.no_grad():
                    yield
            else:
                yield

    def call(self, a: Leaves, b: Leaves) -> Leaves:
        """``fn(a, b)`` on leaf lists, checking structure and shapes."""
        if self.is_monoid:
            return list(self.fn.combine_leaves(a, b))
        res = self.fn(_pytree.unflatten(self.td, a), _pytree.unflatten(self.td, b))
        out, td = _pytree.flatten(res)
        if td != self.td:
            raise ValueError(
                f"fn returned {td.describe()} for elements of structure {self.td.describe()}; "
                "fn must return the structure of its inputs"
            )
        for i, (o, x) in enumerate(zip(out, a)):
            if tuple(getattr(o, "shape", ())) != tuple(x.shape):
                raise ValueError(
                    f"fn returned leaf {i} of shape {tuple(getattr(o, 'shape', ()))} for inputs "
                    f"of shape {tuple(x.shape)}; fn must combine elementwise and keep the shape"
                )
        return out

    def identity(self) -> tuple[Any, ...]:
        return self.fn.identity(_np_dtype(self.leaves[0].dtype))


def _associativity(
    s: _Samples, a: Leaves, b: Leaves, c: Leaves, rtol: float | None, atol: float | None
) -> AssociativityReport:
    """Evaluate both sides of the law on batches ``a, b, c`` and judge them."""
    with s.evaluating():
        ab, bc = s.call(a, b), s.call(b, c)
        left, right = s.call(ab, c), s.call(a, bc)
    bound = _magnitudes(
        s, lambda x, y, z: (s.call(s.call(x, y), z), s.call(x, s.call(y, z))), a, b, c
    )
    sources = [a, b, c, ab, bc, left, right, *bound]
    ratios, max_abs, rt, at = _compare(s, left, right, sources, rtol, atol)
    return _report("associativity", s, ratios, max_abs, rt, at, Triple, [a, b, c, left, right])


def _magnitudes(
    s: _Samples, sides: Callable[..., tuple[Leaves, ...]], *args: Leaves
) -> list[Leaves]:
    """The sides of a law evaluated on the operands' absolute values.

    For a combine built from sums and products this bounds the magnitude of
    the terms whose rounding errors add up (the classical running error
    bound), e.g. ``|a||b| + |c||d|`` for a matrix product, where the result
    itself may have cancelled.  Best effort: empty for integers, or when
    ``fn`` rejects the absolute values.
    """
    if not any(np.dtype(_np_dtype(x.dtype) or np.float64).kind in "fc" for x in args[0]):
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


def _compare(
    s: _Samples,
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
        lv, rv = _rows(_to_numpy(l_leaf), s.ax), _rows(_to_numpy(r_leaf), s.ax)
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
                    mag = np.abs(_wide(_rows(_to_numpy(src[i]), s.ax)))
                    scale = np.maximum(scale, np.where(np.isfinite(mag), mag, 0.0))
            # below the smallest normal number precision is absolute, so the
            # default floor is rtol of it (hundreds of subnormal steps)
            floor = at
            if atol is None and rt > 0 and lv.dtype.kind in "fc":
                floor = rt * float(np.finfo(lv.dtype).smallest_normal)
            tol = floor + rt * scale
            ratio = np.full(diff.shape, np.inf)
            np.divide(diff, tol, out=ratio, where=tol > 0)
            ratio[equal] = 0.0
        ratios.append(ratio)
        max_abs = max(max_abs, float(diff.max(initial=0.0)))
    return ratios, max_abs, rt_used, at


def _report(
    law: str,
    s: _Samples,
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
    shape = tuple(_to_numpy(parts[-1][leaf]).shape)
    other = shape[: s.ax] + shape[s.ax + 1 :]
    where = tuple(int(i) for i in np.unravel_index(pos, other)) if other else ()
    where = where[: s.ax] + (0,) + where[s.ax :]
    pick = (slice(None),) * s.ax + (slice(k, k + 1),)
    ce = kind(*(_pytree.unflatten(s.td, [_to_numpy(x)[pick] for x in p]) for p in parts))
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
