"""Edge cases of the CPU scan's in-block forms and of its flush-to-zero bit.

A kernel that sets MXCSR's flush-to-zero bit (``_cpu_ftz.py``) must put it
back on every path, including a combine that raises: a thread left flushing
turns the user's later subnormal results into zeros.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

import propopt as pp
from propopt.associativity import _cpu_ftz

from .test_flush_bit import _subnormal_here, _tiny_products


def _parallel(a, b):  # resistors in parallel: associative; 0 * 0 / (0 + 0) is NaN
    return a * b / (a + b)


def _checked_sum(a, b):
    if a + b > 1e30:
        raise ValueError("the sum passed 1e30")
    return a + b


@numba.njit(cache=False)
def _ratio(a, b):  # a helper of the user's, compiled by them with numba's defaults
    return a / b


def _with_helper(a, b):
    return a + b + 0.0 * _ratio(a, b)


@pytest.mark.skipif(not _cpu_ftz.HARDWARE, reason="the flush bit is x86-64's")
@pytest.mark.parametrize(("n", "threads"), [(1000, 1), (1 << 21, 1), (1 << 21, 2)])
def test_a_raising_combine_leaves_no_thread_flushing(n, threads):
    m = pp.Monoid(lambda a, b: _checked_sum(a, b) * 1.0, identity=(0.0,), kinds="f",
                  name="checked", flush_subnormals=True)  # fmt: skip
    x = np.ones(n, np.float32)
    x[n - 10] = 2e30  # raises in the last block
    assert _subnormal_here() and np.all(_tiny_products(64) != 0)
    with pp.set_num_threads(threads), pytest.raises(ValueError, match="passed 1e30"):
        pp.associative_scan(m, x)
    assert _subnormal_here(), "the calling thread was left flushing to zero"
    assert np.all(_tiny_products(64) != 0), "a thread of numba's pool was left flushing to zero"


def _fold(fn, xs):
    out, c = [], None
    with np.errstate(all="ignore"):
        for v in xs:
            c = v if c is None else fn(c, v)
            out.append(c)
    return np.array(out)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_division_by_zero_in_the_combine_gives_numpys_value_on_every_thread(threads):
    m = pp.Monoid(_parallel, identity=(np.inf,), name="parallel")
    n = 1 << 21
    x = np.ones(n)
    for at in (5, n // 2, n - 10):  # one zero pair in the first, a middle and the last block
        x[at : at + 2] = 0
    with pp.set_num_threads(threads):
        got = pp.associative_scan(m, x)
        rows = pp.associative_scan(m, np.stack([x[:5000]] * 3), axis=1)
        cols = pp.associative_scan(m, np.stack([x[:5000]] * 3, axis=1), axis=0)
    want = _fold(_parallel, np.float64(x[:5000]))
    np.testing.assert_allclose(got[:5000], want, rtol=1e-12)
    assert np.isnan(got[n // 2 + 1 :]).all()  # 0 * 0 / 0 is NaN, and NaN stays
    for r in range(3):
        np.testing.assert_allclose(rows[r], want, rtol=1e-12)
        np.testing.assert_allclose(cols[:, r], want, rtol=1e-12)
    with np.errstate(all="ignore"):
        assert np.isnan(m(np.zeros(3), np.zeros(3))).all()  # the elementwise combine


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape_axis", [((1 << 21,), 0), ((4, 1 << 19), 1), ((1 << 19, 4), 0)])
def test_an_exception_in_the_combine_reaches_the_caller(threads, shape_axis):
    shape, axis = shape_axis
    m = pp.Monoid(_checked_sum, identity=(0.0,), name="checked")
    x = np.ones(shape)
    x.flat[-5] = 2e30  # the last block: a thread of numba's pool where the scan is split
    with pp.set_num_threads(threads), pytest.raises(ValueError, match="passed 1e30"):
        pp.associative_scan(m, x, axis=axis)
    with pp.set_num_threads(threads), pytest.raises(ValueError, match="passed 1e30"):
        m(np.full(1 << 20, 1e30), np.full(1 << 20, 1e30))


def test_which_combines_run_on_the_calling_thread():
    from propopt.associativity import segmented
    from propopt.associativity._cpu_forms import may_raise

    for b in (pp.add, pp.mul, pp.maximum, pp.logaddexp, pp.linear_recurrence, pp.matmul2x2):
        assert not may_raise(b) and not may_raise(segmented(b)), b.name
    assert not may_raise(pp.Monoid(_parallel, identity=(np.inf,), name="p"))
    assert not may_raise(pp.Monoid(_with_helper, identity=(0.0,), name="h"))
    assert may_raise(pp.Monoid(_checked_sum, identity=(0.0,), name="c"))
    assert may_raise(segmented(pp.Monoid(_checked_sum, identity=(0.0,), name="c")))
    assert may_raise(pp.Monoid(lambda a, b: _checked_sum(a, b), identity=(0.0,), name="l"))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_helper_compiled_by_the_user_divides_as_numpy_in_the_kernels(threads):
    m = pp.Monoid(_with_helper, identity=(0.0,), name="helper")
    x = np.ones(1 << 21)
    x[-100:] = 0  # _ratio(0, 0): NaN in the kernels, where the helper alone would raise
    with pp.set_num_threads(threads):
        got = pp.associative_scan(m, x)
    assert np.isnan(got[-99:]).all() and got[-101] == (1 << 21) - 100
