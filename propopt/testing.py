"""Hypothesis strategies and assertions for testing associative combines.

This module needs `hypothesis <https://hypothesis.readthedocs.io>`_, an
optional test dependency (``pip install propopt[test]``); propopt itself
never imports it.  Use it in your own test suite::

    from hypothesis import given
    from propopt import linear_recurrence
    from propopt.testing import assert_associative, triples

    @given(triples(linear_recurrence))
    def test_my_recurrence_is_associative(abc):
        assert_associative(linear_recurrence, *abc)

Strategies
----------
elements
    Batches of elements of a monoid: tuples of ``arity`` arrays of shape
    ``(n, *extra_shape)``, with values for which the combine stays finite.
triples
    Three single elements ``(a, b, c)``, each of length 1.

Assertions
----------
assert_associative
    ``fn(fn(a, b), c) == fn(a, fn(b, c))`` within the tolerance of
    :func:`propopt.audit.check_associative`.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from .associativity.monoid import Combine, Monoid, add, logaddexp, maximum, minimum

__all__ = ["assert_associative", "elements", "triples"]

_DEFAULT_N = st.integers(1, 40)

_ADDITIVE = (add, maximum, minimum, logaddexp)
"""Built-ins whose values stay bounded by a sum of the operands: wider default range."""


def _bounds(m: Monoid | None, dtype: np.dtype) -> tuple[float, float]:
    if dtype.kind == "u":
        return 0, 3
    if dtype.kind in "ib":
        return -3, 3
    if any(m is a for a in _ADDITIVE):
        return -1e3, 1e3
    return -1.5, 1.5  # products (mul, recurrences, matrices, unknown combines) stay finite


def _representable(value: float, dtype: np.dtype, toward: float) -> float:
    """``value`` rounded (toward ``toward``) to a float that ``dtype`` holds exactly."""
    v = dtype.type(value)
    if (v > value and toward < value) or (v < value and toward > value):
        v = np.nextafter(v, dtype.type(toward))
    return float(v)


def _values(dtype: np.dtype, lo: float, hi: float) -> st.SearchStrategy[Any]:
    if dtype.kind == "b":
        return st.booleans()
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return st.integers(max(int(np.ceil(lo)), info.min), min(int(np.floor(hi)), info.max))
    if dtype.kind == "c":
        bound = max(abs(lo), abs(hi))
        return st.complex_numbers(
            max_magnitude=bound,
            allow_nan=False,
            allow_infinity=False,
            width=cast(Any, 8 * dtype.itemsize),
        )
    if dtype.kind == "f":
        lo, hi = _representable(lo, dtype, hi), _representable(hi, dtype, lo)
        return st.floats(
            lo, hi, allow_nan=False, allow_infinity=False, width=cast(Any, 8 * dtype.itemsize)
        )
    raise TypeError(f"no element strategy for dtype {dtype}; use a bool, int, float or complex")


def elements(
    monoid: Monoid | None,
    dtype: Any = np.float64,
    n: st.SearchStrategy[int] | int = _DEFAULT_N,
    extra_shape: tuple[int, ...] = (),
    min_value: float | None = None,
    max_value: float | None = None,
    *,
    arity: int | None = None,
) -> st.SearchStrategy[tuple[np.ndarray, ...]]:
    """Batches of elements: tuples of ``arity`` arrays of shape ``(n, *extra_shape)``.

    Parameters
    ----------
    monoid : Monoid or None
        The monoid the elements are for (its ``arity`` and accepted dtypes),
        or ``None`` for a plain combine, with ``arity`` given.
    dtype : dtype
        Of every array.
    n : int or strategy of int
        Number of elements (length of axis 0); by default 1 to 40.
    extra_shape : tuple of int
        Trailing shape of each element.
    min_value, max_value : float, optional
        Range of the values.  By default finite values with magnitude
        ``<= 1e3`` for ``add``, ``maximum``, ``minimum`` and ``logaddexp``,
        ``<= 1.5`` for everything else (so that products over a few dozen
        steps of ``mul``, ``linear_recurrence`` or ``matmul2x2`` stay
        finite), and integers in ``-3..3`` (``0..3`` unsigned); wraparound
        of integer products is still associative.
    arity : int, optional
        Number of arrays per element; required when ``monoid`` is None.

    Returns
    -------
    hypothesis strategy
        Of tuples of NumPy arrays.

    Examples
    --------
    >>> from hypothesis import given
    >>> from propopt import linear_recurrence
    >>> from propopt.testing import elements
    >>> @given(elements(linear_recurrence, n=5))
    ... def test(e):
    ...     assert len(e) == 2 and e[0].shape == (5,)
    >>> test()
    """
    dt = np.dtype(dtype)
    if monoid is not None:
        if not monoid.accepts(dt):
            raise ValueError(
                f"monoid {monoid.name!r} does not combine dtype {dt} (it accepts dtype kinds "
                f"{monoid.kinds!r}); pick another dtype"
            )
        k = monoid.arity if arity is None else arity
    elif arity is None:
        raise ValueError("arity is required when monoid is None (the arrays per element)")
    else:
        k = arity
    lo, hi = _bounds(monoid, dt)
    lo = lo if min_value is None else min_value
    hi = hi if max_value is None else max_value
    if lo > hi:
        raise ValueError(f"min_value={lo!r} is larger than max_value={hi!r}")
    vals = _values(dt, lo, hi)
    sizes = st.just(n) if isinstance(n, (int, np.integer)) else n

    def batch(size: int) -> st.SearchStrategy[tuple[np.ndarray, ...]]:
        shape = (int(size), *extra_shape)
        return st.tuples(*[hnp.arrays(dt, shape, elements=vals) for _ in range(k)])

    return sizes.flatmap(batch)


def triples(
    monoid: Monoid | None,
    dtype: Any = np.float64,
    *,
    arity: int | None = None,
    extra_shape: tuple[int, ...] = (),
    min_value: float | None = None,
    max_value: float | None = None,
) -> st.SearchStrategy[tuple[tuple[np.ndarray, ...], ...]]:
    """Three single elements ``(a, b, c)``, each a tuple of arrays of shape ``(1, *extra_shape)``.

    Arguments as in :func:`elements`.

    Examples
    --------
    >>> from hypothesis import given
    >>> from propopt import add
    >>> from propopt.testing import assert_associative, triples
    >>> @given(triples(add))
    ... def test(abc):
    ...     assert_associative(add, *abc)
    >>> test()
    """
    batches = elements(monoid, dtype, 3, extra_shape, min_value, max_value, arity=arity)
    return batches.map(lambda e: tuple(tuple(x[i : i + 1] for x in e) for i in range(3)))


def assert_associative(
    fn: Combine, a: Any, b: Any, c: Any, *, rtol: float | None = None, atol: float | None = None
) -> None:
    """Assert ``fn(fn(a, b), c) == fn(a, fn(b, c))`` within tolerance.

    Parameters
    ----------
    fn : Monoid or callable
        The combine, as for :func:`propopt.audit.check_associative`.
    a, b, c : pytree of arrays
        Batches of elements along axis 0, all of one structure and length
        (e.g. from :func:`triples`); every position is checked.
    rtol, atol : float, optional
        Tolerance; by default that of
        :func:`propopt.audit.check_associative` (relative to the largest
        operand, intermediate or result, a few hundred ulps; exact for
        integers).

    Raises
    ------
    AssertionError
        With the audit's report (worst violation and counterexample) when
        the law fails.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.testing import assert_associative
    >>> a, b, c = np.array([2.0]), np.array([3.0]), np.array([5.0])
    >>> assert_associative(lambda x, y: x + y, a, b, c)
    >>> assert_associative(lambda x, y: x - y, a, b, c)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: associativity of <lambda>: FAILS on 1 random triple: ...
    """
    from .associativity.laws import check_triple

    report = check_triple(fn, a, b, c, rtol=rtol, atol=atol)
    if not report.ok:
        raise AssertionError(str(report))
