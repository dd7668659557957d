"""The laws of a combine, audited on samples: associativity, commutativity, identity.

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
A :class:`~propopt.Monoid` over floats given float16 or bfloat16 samples
combines them in float32, as ``associative_scan`` does, and is judged at
float32's tolerance.  Equal values, including two infinities of one sign and two NaNs, are never a
violation; a NaN on one side only always is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._law_reports import (
    AssociativityError,
    AssociativityReport,
    Pair,
    PropertyReport,
    Single,
    Triple,
    compare,
    magnitudes,
    report,
)
from ._law_samples import (
    MAX_POSITIONS,
    Samples,
    check_seed,
    check_tolerances,
    check_trials,
    to_numpy,
)
from .monoid import Combine, Monoid

__all__ = [
    "MAX_POSITIONS",
    "AssociativityError",
    "AssociativityReport",
    "Pair",
    "PropertyReport",
    "Single",
    "Triple",
    "check_associative",
    "check_commutative",
    "check_identity",
    "check_triple",
]

Leaves = list[Any]


def check_associative(
    fn: Combine,
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
    s = Samples(fn, samples, axis)
    check_trials(trials)
    check_tolerances(rtol, atol)
    check_seed(seed)
    rows = np.random.default_rng(seed).integers(0, s.n, 3 * trials)
    a, b, c = s.split(s.gather(rows, seed), 3)
    return _associativity(s, a, b, c, rtol, atol)


def check_commutative(
    fn: Combine,
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
    s = Samples(fn, samples, axis)
    check_trials(trials)
    check_tolerances(rtol, atol)
    check_seed(seed)
    rows = np.random.default_rng(seed).integers(0, s.n, 2 * trials)
    a, b = s.split(s.gather(rows, seed), 2)
    with s.evaluating():
        left, right = s.call(a, b), s.call(b, a)
    bound = magnitudes(s, lambda x, y: (s.call(x, y),), a, b)
    ratios, max_abs, rt, at = compare(s, left, right, [a, b, left, right, *bound], rtol, atol)
    return report("commutativity", s, ratios, max_abs, rt, at, Pair, [a, b, left, right])


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
    s = Samples(monoid, samples, axis)
    check_tolerances(rtol, atol)
    check_seed(seed)
    if trials is None:
        rows = np.arange(s.n)
    else:
        check_trials(trials)
        rows = np.random.default_rng(seed).integers(0, s.n, trials)
    a = s.gather(rows, seed)
    e = [np.broadcast_to(np.asarray(v, x.dtype), x.shape) for v, x in zip(s.identity(), a)]
    with s.evaluating():
        left, right = s.call(e, a), s.call(a, e)
    sources = [a, left, right]
    r1, m1, rt, at = compare(s, left, a, sources, rtol, atol)
    r2, m2, _, _ = compare(s, right, a, sources, rtol, atol)
    ratios = [np.maximum(x, y) for x, y in zip(r1, r2)]
    return report("identity", s, ratios, max(m1, m2), rt, at, Single, sources)


def check_triple(
    fn: Combine, a: Any, b: Any, c: Any, *, rtol: float | None = None, atol: float | None = None
) -> AssociativityReport:
    """Test associativity on given batches ``a, b, c`` (pytrees of one structure and shape).

    What :func:`check_associative` does on sampled triples, on the caller's
    own (``propopt.testing.assert_associative`` uses it with hypothesis).
    """
    from .. import _pytree

    trees = {"a": a, "b": b, "c": c}
    flat = {k: _pytree.flatten(v, k) for k, v in trees.items()}
    for k in "bc":
        if flat[k][1] != flat["a"][1]:
            raise ValueError(
                f"{k} has structure {flat[k][1].describe()} but a has "
                f"{flat['a'][1].describe()}; pass three elements of one structure"
            )
    s = Samples(fn, a, 0)
    check_tolerances(rtol, atol)
    la, lb, lc = (flat[k][0] for k in "abc")
    for k, leaves in zip("bc", (lb, lc)):
        shapes = [tuple(x.shape) for x in leaves]
        if shapes != [tuple(x.shape) for x in la]:
            raise ValueError(
                f"{k} has leaves of shapes {shapes} but a has {[tuple(x.shape) for x in la]}; "
                "pass batches of one shape"
            )
    if not s.native:  # NumPy for a monoid and for anything not torch, as check_associative
        la, lb, lc = ([to_numpy(x) for x in v] for v in (la, lb, lc))
    return _associativity(s, la, lb, lc, rtol, atol)


def _associativity(
    s: Samples, a: Leaves, b: Leaves, c: Leaves, rtol: float | None, atol: float | None
) -> AssociativityReport:
    """Evaluate both sides of the law on batches ``a, b, c`` and judge them."""
    with s.evaluating():
        ab, bc = s.call(a, b), s.call(b, c)
        left, right = s.call(ab, c), s.call(a, bc)
    bound = magnitudes(
        s, lambda x, y, z: (s.call(s.call(x, y), z), s.call(x, s.call(y, z))), a, b, c
    )
    sources = [a, b, c, ab, bc, left, right, *bound]
    ratios, max_abs, rt, at = compare(s, left, right, sources, rtol, atol)
    return report("associativity", s, ratios, max_abs, rt, at, Triple, [a, b, c, left, right])
