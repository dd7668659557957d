"""The vectorized float32 exp against np.exp in float64."""

import math

import numpy as np
from numba import njit

from propopt_case_studies.mamba._exp import fexp, fsoftplus


@njit(cache=True)
def _apply(x, out):
    for i in range(x.size):
        out[i] = fexp(x[i])


def test_fexp_float32_accuracy_and_edges():
    x = np.linspace(-110.0, 90.0, 400_001).astype(np.float32)
    x = np.concatenate([x, -np.logspace(-8, 2, 2000).astype(np.float32)])
    out = np.empty_like(x)
    _apply(x, out)
    exact = np.exp(x.astype(np.float64))
    normal = (exact >= np.finfo(np.float32).tiny) & (exact <= np.finfo(np.float32).max)
    rel = np.abs(out[normal] - exact[normal]) / exact[normal]
    # 1.47 ulp measured; 2 allowed.  Above x = 88.376 the result is inf (k = 128).
    body = x[normal] <= 88.37
    assert rel[body].max() <= 2 * 2.0**-24
    assert np.isinf(out[x > 88.38]).all()
    below = exact < np.finfo(np.float32).tiny
    assert np.all(out[below] >= 0) and np.all(out[below] < np.finfo(np.float32).tiny)
    edges = np.array([np.nan, -np.inf, np.inf, 0.0, -0.0, -87.0, -200.0], np.float32)
    got = np.empty_like(edges)
    _apply(edges, got)
    assert np.isnan(got[0]) and got[1] == 0 and np.isinf(got[2]) and got[3] == got[4] == 1
    assert got[5] > 0 and got[6] == 0


def test_fexp_float64_within_two_ulp_of_libm():
    # float64 fexp is propopt.vmath's polynomial (vectorizable), not a libm call
    x = np.linspace(-50, 5, 101)
    out = np.empty_like(x)
    _apply(x, out)
    want = np.array([math.exp(v) for v in x])
    assert np.all(np.abs(out - want) <= 2 * np.spacing(want))


@njit(cache=True)
def _softplus(x, out):
    for i in range(x.size):
        out[i] = fsoftplus(x[i])


def _softplus_exact(x):
    # mamba_ssm's softplus in float64: log(1 + e^x) up to 20, x above
    x = x.astype(np.float64)
    return np.where(x > 20, x, np.logaddexp(0.0, np.minimum(x, 20)))


def test_fsoftplus_float32_accuracy_and_edges():
    x = np.linspace(-100.0, 30.0, 200_001).astype(np.float32)
    x = np.concatenate([x, np.float32([20.0, np.nextafter(20, 21), np.nextafter(20, 19)])])
    out = np.empty_like(x)
    _softplus(x, out)
    exact = _softplus_exact(x)
    normal = exact >= np.finfo(np.float32).tiny
    # 3.2 ulp measured on 4e6 points; 4 allowed
    assert (
        np.abs(out[normal] - exact[normal]) <= 4 * np.spacing(exact[normal].astype(np.float32))
    ).all()
    assert (out[~normal] >= 0).all() and (out[~normal] < np.finfo(np.float32).tiny).all()
    edges = np.array([np.nan, -np.inf, np.inf, 0.0, -0.0, 25.0], np.float32)
    got = np.empty_like(edges)
    _softplus(edges, got)
    assert np.isnan(got[0]) and got[1] == 0 and np.isinf(got[2]) and got[5] == 25
    assert got[3] == got[4] == np.float32(math.log(2.0))


def test_fsoftplus_float64_is_libm():
    x = np.linspace(-50, 30, 161)
    out = np.empty_like(x)
    _softplus(x, out)
    np.testing.assert_allclose(out, _softplus_exact(x), rtol=2e-16, atol=0)
