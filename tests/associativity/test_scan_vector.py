"""The vector form of the in-block scan (``_cpu_vector.py``): float ``maximum`` and ``minimum``.

Each result is compared bit for bit with a sequential fold written here,
in plain Python over Python floats: the first of equal values wins (so
``-0`` and ``+0`` keep the earlier one), a NaN on either side wins, and
the identity leads an exclusive scan.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import propopt as pp
from propopt.associativity import _cpu, _cpu_vector

BITS = {np.float32: np.uint32, np.float64: np.uint64}


def fold(x, is_max, reverse=False, exclusive=False):
    """The scan as a loop over Python floats (the later value wins only when beyond, or NaN)."""
    vals = [float(v) for v in (x[::-1] if reverse else x)]
    out, c = [], None
    for v in vals:
        if exclusive:
            out.append((-math.inf if is_max else math.inf) if c is None else c)
        if c is None or math.isnan(v) or (v > c if is_max else v < c):
            c = v
        if not exclusive:
            out.append(c)
    out = np.array(out, dtype=x.dtype)
    return out[::-1] if reverse else out


def same_bits(a, b):
    return np.array_equal(np.asarray(a).view(BITS[a.dtype.type]), b.view(BITS[b.dtype.type]))


def special(n, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(dtype)
    shares = ((np.nan, 0.01), (-0.0, 0.02), (0.0, 0.02), (np.inf, 0.002), (-np.inf, 0.002))
    for value, share in shares:
        x[rng.random(n) < share] = value
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("monoid", [pp.maximum, pp.minimum], ids=["max", "min"])
def test_the_float_max_and_min_scans_run_the_vector_form(monoid, dtype):
    assert _cpu.vector_op(monoid, np.dtype(dtype)) in ("max", "min")
    mod = _cpu.kernels(monoid, np.dtype(dtype))
    assert mod.TILE == _cpu_vector.width(np.dtype(dtype).itemsize)
    assert "vscan" in vars(mod)
    assert not _cpu.vector_op(monoid, np.dtype(np.int32))  # integers keep the lanes
    assert not _cpu.vector_op(pp.add, np.dtype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("monoid", [pp.maximum, pp.minimum], ids=["max", "min"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("n", [1, 3, 8, 9, 16, 17, 1000, 70_001])
def test_equals_the_fold_bit_for_bit(monoid, dtype, reverse, exclusive, n):
    x = special(n, dtype, seed=n)
    got = pp.associative_scan(monoid, x, reverse=reverse, exclusive=exclusive)
    assert same_bits(got, fold(x, monoid is pp.maximum, reverse, exclusive))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["normal", "sorted", "reversed", "constant", "half nan"])
def test_long_scans_on_threads_equal_the_fold(threads, kind):
    # 2^21 float32: several blocks, so the threads' carries and fix-ups run
    n = 1 << 21
    rng = np.random.default_rng(7)
    x = rng.standard_normal(n).astype(np.float32)
    if kind == "sorted":
        x.sort()
    elif kind == "reversed":
        x = np.sort(x)[::-1].copy()
    elif kind == "constant":
        x[:] = 0.5
    elif kind == "half nan":
        x[rng.random(n) < 0.5] = np.nan
    x[n // 3] = -0.0
    expect_max = np.maximum.accumulate(x)  # NumPy: NaN wins, as the fold
    with pp.set_num_threads(threads):
        got = pp.associative_scan(pp.maximum, x)
        got_min = pp.associative_scan(pp.minimum, x, reverse=True)
    np.testing.assert_array_equal(got, expect_max)
    np.testing.assert_array_equal(got_min, np.minimum.accumulate(x[::-1])[::-1])


def test_rows_of_a_matrix_scan_apart():
    x = special(5 * 1001, np.float32, seed=3).reshape(5, 1001)
    got = pp.associative_scan(pp.maximum, x, axis=1)
    for r in range(5):
        assert same_bits(got[r], fold(x[r], True))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True, width=32),
            st.sampled_from([0.0, -0.0, math.nan, 1.0]),
        ),
        min_size=1,
        max_size=80,
    ),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_hypothesis_any_floats(values, is_max, reverse, exclusive):
    x = np.array(values, np.float32)
    monoid = pp.maximum if is_max else pp.minimum
    got = pp.associative_scan(monoid, x, reverse=reverse, exclusive=exclusive)
    assert same_bits(got, fold(x, is_max, reverse, exclusive))
