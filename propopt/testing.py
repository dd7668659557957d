"""Hypothesis strategies and assertions for testing associative combines.

Needs ``hypothesis`` (in the ``test`` extra).  Use them in your own tests::

    from hypothesis import given
    from propopt import linear_recurrence
    from propopt.testing import assert_associative, triples

    @given(triples(linear_recurrence))
    def test_law(abc):
        assert_associative(linear_recurrence, *abc)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from .associativity.monoid import Monoid, linear_recurrence, matmul2x2, mul

__all__ = ["assert_associative", "elements", "triples"]


def _bounds(m: Monoid, dtype: np.dtype) -> tuple[float, float]:
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -3
        return lo, 3
    if m in (mul, linear_recurrence, matmul2x2):
        return -1.5, 1.5  # products stay finite over a handful of steps
    return -1e3, 1e3


def elements(
    m: Monoid,
    dtype: Any = np.float64,
    n: st.SearchStrategy[int] | int = 40,
    extra_shape: tuple[int, ...] = (),
    min_value: float | None = None,
    max_value: float | None = None,
) -> st.SearchStrategy[tuple[np.ndarray, ...]]:
    """Tuples of ``m.arity`` arrays of shape ``(k, *extra_shape)`` valid for ``m``.

    ``k`` is drawn from 1..``n`` (or from ``n`` if it is a strategy).

    Values are finite and bounded so that products stay finite; pass
    ``min_value``/``max_value`` to override.
    """
    dt = np.dtype(dtype)
    lo, hi = _bounds(m, dt)
    lo = lo if min_value is None else min_value
    hi = hi if max_value is None else max_value
    n_st = st.integers(1, n) if isinstance(n, int) else n
    if dt.kind == "f":
        vals = st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=8 * dt.itemsize)
    else:
        vals = st.integers(int(lo), int(hi))

    def arrays(k: int) -> st.SearchStrategy[tuple[np.ndarray, ...]]:
        shape = (k, *extra_shape)
        return st.tuples(*[hnp.arrays(dt, shape, elements=vals) for _ in range(m.arity)])

    return n_st.flatmap(arrays)


def triples(m: Monoid, dtype: Any = np.float64, **kw: Any) -> st.SearchStrategy[tuple]:
    """Three single elements ``(a, b, c)`` of ``m`` (each leaf of length 1)."""
    return elements(m, dtype, n=st.just(3), **kw).map(
        lambda e: tuple(tuple(x[i : i + 1] for x in e) for i in range(3))
    )


def assert_associative(fn: Any, a: Any, b: Any, c: Any, *, rtol: float | None = None,
                       atol: float | None = None) -> None:  # fmt: skip
    """Assert ``fn(fn(a, b), c) == fn(a, fn(b, c))`` within tolerance.

    ``a``, ``b``, ``c`` are batches of elements (pytrees of arrays along axis
    0).  The default tolerance is that of
    :func:`propopt.audit.check_associative`, plus an absolute floor scaled to
    the operands, since products of rounded values can cancel.
    """
    from . import _pytree
    from .audit import _call, _compare, _tolerance

    la, td = _pytree.flatten(a)
    lb, lc = _pytree.flatten(b)[0], _pytree.flatten(c)[0]
    rt, at = _tolerance([np.asarray(x) for x in la], rtol, atol)
    if atol is None and np.asarray(la[0]).dtype.kind == "f":
        scale = max(float(np.max(np.abs(np.asarray(x)), initial=0)) for x in (*la, *lb, *lc))
        at = 1e-12 * max(scale, 1.0) ** 3
    left = _call(fn, td, _call(fn, td, la, lb), lc)
    right = _call(fn, td, la, _call(fn, td, lb, lc))
    ratio, max_abs = _compare(left, right, rt, at, 0)
    assert float(ratio.max()) <= 1.0, (
        f"associativity fails: |fn(fn(a, b), c) - fn(a, fn(b, c))| = {max_abs:.3g} "
        f"(rtol={rt:g}, atol={at:g}); a={a!r}, b={b!r}, c={c!r}"
    )
