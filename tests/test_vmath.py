"""propopt.vmath: accuracy in ulp against mpmath, the edge cases, and SIMD in a loop."""

import re

import numba
import numpy as np
import pytest

from propopt.vmath import fexp, fexp_flush, flog, flog1p, flog_normal, fsoftplus

mpmath = pytest.importorskip("mpmath")
mpmath.mp.prec = 120

F32, F64 = np.float32, np.float64


@numba.njit(fastmath={"contract"})
def _exp(x, o):
    for i in range(x.shape[0]):
        o[i] = fexp(x[i])


@numba.njit(fastmath={"contract"})
def _exp_flush(x, o):
    for i in range(x.shape[0]):
        o[i] = fexp_flush(x[i])


@numba.njit(fastmath={"contract"})
def _log1p(x, o):
    for i in range(x.shape[0]):
        o[i] = flog1p(x[i])


@numba.njit(fastmath={"contract"})
def _log(x, o):
    for i in range(x.shape[0]):
        o[i] = flog(x[i])


@numba.njit(fastmath={"contract"})
def _log_normal(x, o):
    for i in range(x.shape[0]):
        o[i] = flog_normal(x[i])


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


def test_fexp_flush():
    """float32: fexp itself; float64: 2 ulp over the normal results, 0 below, inf from 709.4361."""
    rng = np.random.default_rng(10)
    x = np.concatenate([rng.uniform(-87.33, 88.37, 2000), [np.nan, np.inf, -np.inf, -90.0]])
    x = x.astype(F32)
    np.testing.assert_array_equal(run(_exp_flush, x), run(_exp, x))
    x = np.concatenate([rng.uniform(-708.39, 709.43, 3000), rng.uniform(-1, 1, 1000)])
    err = ulps(run(_exp_flush, x), mp(mpmath.exp, x), F64)
    assert err.max() <= 2.0, f"{err.max():.2f} ulp at x = {x[err.argmax()]!r}"
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, -708.4, -745.2, 709.44, 1e300]
    want = [np.nan, np.inf, 0.0, 1.0, 1.0, 0.0, 0.0, np.inf, np.inf]
    np.testing.assert_array_equal(run(_exp_flush, np.array(specials)), want)
    got = run(_exp_flush, np.array([-708.39, 709.43]))
    assert got[0] >= np.finfo(F64).tiny and np.isfinite(got[1]) and got[1] > 1e308


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


@pytest.mark.parametrize("dtype", [F32, F64])
def test_flog_ulp(dtype):
    rng = np.random.default_rng(5)
    fi = np.finfo(dtype)
    lo, hi = (-45, 38) if dtype == F32 else (-323, 308)
    x = np.concatenate(
        [
            rng.uniform(0, 4, 1500),
            10.0 ** rng.uniform(lo, hi, 2000),  # subnormal arguments included
            [fi.smallest_subnormal, fi.tiny, fi.max, 1.0, np.nextafter(dtype(1), dtype(0))],
        ]
    ).astype(dtype)
    x = x[x > 0]
    err = ulps(run(_log, x), mp(mpmath.log, x), dtype)
    assert err.max() <= 2.5, f"{err.max():.2f} ulp at x = {x[err.argmax()]!r}"


@pytest.mark.parametrize("dtype", [F32, F64])
def test_flog_normal_is_flog_on_normal_numbers(dtype):
    rng = np.random.default_rng(8)
    fi = np.finfo(dtype)
    lo, hi = (-37, 38) if dtype == F32 else (-307, 308)
    x = np.concatenate([rng.uniform(0, 4, 1000), 10.0 ** rng.uniform(lo, hi, 1000)])
    x = np.concatenate([x, [fi.tiny, fi.max, 1.0]]).astype(dtype)
    x = x[x >= fi.tiny]
    np.testing.assert_array_equal(run(_log_normal, x), run(_log, x))
    err = ulps(run(_log_normal, x), mp(mpmath.log, x), dtype)
    assert err.max() <= 2.5


@pytest.mark.parametrize("dtype", [F32, F64])
def test_flog_edges(dtype):
    x = np.array([1.0, 0.0, -0.0, -1e-30, -1.0, -np.inf, np.inf, np.nan], dtype)
    got = run(_log, x)
    assert got[0] == 0 and (got[1:3] == -np.inf).all()
    assert np.isnan(got[3:6]).all() and got[6] == np.inf and np.isnan(got[7])


def test_fsoftplus_float64_ulp():
    """float64 (libm's expression), down to subnormal results, and x above 20."""
    rng = np.random.default_rng(6)
    x = np.concatenate([rng.uniform(-745, 30, 3000), rng.uniform(-3, 3, 1000)])
    ref = mp(lambda v: v if v > 20 else mpmath.log1p(mpmath.exp(v)), x)
    ok = ref >= np.finfo(F64).tiny
    err = ulps(run(_softplus, x)[ok], ref[ok], F64)
    assert err.max() <= 3.0, f"{err.max():.2f} ulp at x = {x[ok][err.argmax()]!r}"
    got = run(_softplus, np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -800.0], F64))
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == 0 and got[5] == 0
    assert got[3] == got[4] == np.log(2.0)


def _avx2() -> bool:
    import llvmlite.binding as llvm

    return "+avx2" in llvm.get_host_cpu_features().flatten().split(",")


@pytest.mark.skipif(not _avx2(), reason="the host has no AVX2")
@pytest.mark.parametrize(
    ("fn", "dtype"),
    [(f, d) for f in (_exp, _log1p, _log, _log_normal) for d in (F32, F64)]
    + [(_softplus, F32), (_exp_flush, F64)],
    ids=[f"{f}-{d}" for f in ("fexp", "flog1p", "flog", "flog_normal") for d in ("f32", "f64")]
    + ["fsoftplus-f32", "fexp_flush-f64"],
)
def test_a_loop_over_them_runs_on_vectors(fn, dtype):
    x = np.linspace(0.1, 5, 1000).astype(dtype)
    run(fn, x)
    sig = next(s for s in fn.signatures if s[0].dtype == numba.from_dtype(np.dtype(dtype)))
    asm = fn.inspect_asm(sig)
    assert not re.search(r"\$(expf?|logf?|log1pf?)\b", asm), "a libm call is left in the loop"
    # a packed FMA of the polynomials on ymm registers
    sfx = "ps" if dtype == F32 else "pd"
    assert any(re.search(f"vfmadd\\d+{sfx}", ln) and "%ymm" in ln for ln in asm.splitlines())


@numba.njit(fastmath={"contract"})
def _exp_one(x, o, one):
    for i in range(x.shape[0]):
        o[i] = fexp(x[i], one)


@numba.njit(fastmath={"contract"})
def _log_normal_one(x, o, one):
    for i in range(x.shape[0]):
        o[i] = flog_normal(x[i], one)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_a_run_time_one_gives_the_same_results(dtype):
    """``one`` passed at run time (constants kept in registers) changes no bit."""
    rng = np.random.default_rng(9)
    x = np.concatenate([rng.uniform(-100, 100, 2000), [np.nan, np.inf, -np.inf, 0.0]]).astype(dtype)
    got = np.empty_like(x)
    _exp_one(x, got, dtype(1))
    np.testing.assert_array_equal(got, run(_exp, x))
    y = (10.0 ** rng.uniform(-30, 30, 2000)).astype(dtype)
    got = np.empty_like(y)
    _log_normal_one(y, got, dtype(1))
    np.testing.assert_array_equal(got, run(_log, y))
