"""propopt.vmath: accuracy in ulp against mpmath, the edge cases, and SIMD in a loop."""

import re

import numba
import numpy as np
import pytest

from propopt.vmath import fexp, flog1p, fsoftplus

mpmath = pytest.importorskip("mpmath")
mpmath.mp.prec = 120

F32, F64 = np.float32, np.float64


@numba.njit(fastmath={"contract"})
def _exp(x, o):
    for i in range(x.shape[0]):
        o[i] = fexp(x[i])


@numba.njit(fastmath={"contract"})
def _log1p(x, o):
    for i in range(x.shape[0]):
        o[i] = flog1p(x[i])


@numba.njit(fastmath={"contract"})
def _softplus(x, o):
    for i in range(x.shape[0]):
        o[i] = fsoftplus(x[i])


def run(fn, x):
    o = np.empty_like(x)
    fn(x, o)
    return o


def ulps(got, ref, dtype):
    """|got - ref| in units of the last place of ``ref`` rounded to ``dtype`` (subnormals too)."""
    spacing = np.spacing(np.abs(np.asarray(ref, dtype))).astype(np.float64)
    return np.abs(got.astype(np.float64) - ref) / spacing


def mp(fn, x):
    return np.array([float(fn(mpmath.mpf(float(v)))) for v in x])


@pytest.mark.parametrize(
    ("dtype", "lo", "hi", "bound"),
    [
        # float32: normal results only (below -87.34 the result flushes to 0),
        # and up to 88.376, where 2^k reaches the bits of inf
        (F32, -87.33, 88.37, 1.5),
        # float64: subnormal results included, up to the overflow
        (F64, -745.0, 709.78, 2.0),
    ],
)
def test_fexp_ulp(dtype, lo, hi, bound):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(lo, hi, 3000), rng.uniform(-1, 1, 1000)]).astype(dtype)
    err = ulps(run(_exp, x), mp(mpmath.exp, x), dtype)
    assert err.max() <= bound, f"{err.max():.2f} ulp at x = {x[err.argmax()]!r}"


def test_fexp_edges():
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    for dtype, want in (
        (F32, [np.nan, np.inf, 0.0, 1.0, 1.0]),
        (F64, [np.nan, np.inf, 0.0, 1.0, 1.0]),
    ):
        np.testing.assert_array_equal(run(_exp, np.array(specials, dtype)), np.array(want, dtype))
    # float32: flush below the smallest normal, inf from 88.376 (exp overflows at 88.72)
    got = run(_exp, np.array([-87.33, -87.34, -100.0, 88.37, 88.38, 88.8], F32))
    assert got[0] >= np.finfo(F32).tiny and (got[1:3] == 0).all()
    assert np.isfinite(got[3]) and np.isinf(got[4:]).all()
    # float64: subnormal results down to the smallest, then 0; inf past log(max)
    got = run(_exp, np.array([-708.5, -744.4, -745.2, 709.78, 709.79], F64))
    assert 0 < got[0] < np.finfo(F64).tiny and got[1] == 5e-324 and got[2] == 0
    assert np.isfinite(got[3]) and got[3] > 1.7e308 and np.isinf(got[4])


@pytest.mark.parametrize(("dtype", "bound"), [(F32, 2.5), (F64, 2.5)])
def test_flog1p_ulp(dtype, bound):
    rng = np.random.default_rng(1)
    big = 38 if dtype == F32 else 300
    x = np.concatenate(
        [
            rng.uniform(-1, 1, 1500),
            -(10.0 ** rng.uniform(-40, 0, 500)),
            10.0 ** rng.uniform(-40, big, 1500),
            [np.nextafter(dtype(-1), dtype(0)), np.finfo(dtype).max],
        ]
    ).astype(dtype)
    err = ulps(run(_log1p, x), mp(mpmath.log1p, x), dtype)
    assert err.max() <= bound, f"{err.max():.2f} ulp at x = {x[err.argmax()]!r}"


@pytest.mark.parametrize("dtype", [F32, F64])
def test_flog1p_edges(dtype):
    tiny_sub = np.finfo(dtype).smallest_subnormal
    x = np.array([0.0, -0.0, tiny_sub, -tiny_sub, -1.0, -1.5, -np.inf, np.inf, np.nan], dtype)
    got = run(_log1p, x)
    np.testing.assert_array_equal(got[:4], x[:4])  # exact, subnormals included
    np.testing.assert_array_equal(np.signbit(got[:2]), [False, True])
    assert got[4] == -np.inf and np.isnan(got[5:7]).all() and got[7] == np.inf
    assert np.isnan(got[8])


def test_fsoftplus_float32_ulp():
    x = np.random.default_rng(2).uniform(-80, 30, 4000).astype(F32)
    ref = mp(lambda v: v if v > 20 else mpmath.log1p(mpmath.exp(v)), x)
    ok = ref >= np.finfo(F32).tiny
    err = ulps(run(_softplus, x)[ok], ref[ok], F32)
    assert err.max() <= 3.5
    got = run(_softplus, np.array([np.nan, np.inf, -np.inf], F32))
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == 0


def _avx2() -> bool:
    import llvmlite.binding as llvm

    return "+avx2" in llvm.get_host_cpu_features().flatten().split(",")


@pytest.mark.skipif(not _avx2(), reason="the host has no AVX2")
@pytest.mark.parametrize("fn", [_exp, _log1p], ids=["fexp", "flog1p"])
def test_a_loop_over_them_runs_on_vectors(fn):
    x = np.linspace(-5, 5, 1000).astype(F32)
    run(fn, x)
    asm = fn.inspect_asm(fn.signatures[0])
    assert not re.search(r"\$(expf?|log1pf?)\b", asm), "a libm call is left in the loop"
    assert sum("%ymm" in ln for ln in asm.splitlines()) >= 10
