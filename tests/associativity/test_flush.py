"""Flush-to-zero in the multiplicative monoids: the numerical contract, on every backend.

The contract (``Monoid``'s ``flush_subnormals``, docs/associativity.md): a
value whose exact magnitude is below the smallest normal ``tiny`` comes out
as a zero of its sign, values well above it keep the scan's usual rounding,
and no output is subnormal.  Each backend is compared with a float64 loop
written here, which shares no code with the library.
"""

from __future__ import annotations

import time

import numba
import numpy as np
import pytest

import propopt as pp
from propopt.associativity import segmented

TINY = {np.float32: float(np.finfo(np.float32).tiny), np.float64: float(np.finfo(np.float64).tiny)}


@numba.njit(cache=True)
def _affine64(a, b):  # pragma: no cover - numba
    A, h = np.empty(a.shape[0]), np.empty(a.shape[0])
    pa, ph = 1.0, 0.0
    for i in range(a.shape[0]):
        pa, ph = pa * a[i], a[i] * ph + b[i]
        A[i], h[i] = pa, ph
    return A, h


def assert_flushed(out, exact, dtype, rtol, what):
    """``out`` keeps the contract against the float64 ``exact``."""
    tiny = TINY[dtype]
    out = np.asarray(out, dtype=np.float64)
    mag = np.abs(exact)
    assert not np.any((out != 0) & (np.abs(out) < tiny)), f"{what}: a subnormal output"
    # well below the threshold: a zero (regrouped rounding moves an exact value
    # by a relative n * eps at most, so a factor of two is a wide margin)
    below = mag < tiny / 2
    assert np.all(out[below] == 0), f"{what}: {np.count_nonzero(out[below])} not flushed"
    above = mag >= 2 * tiny
    np.testing.assert_allclose(out[above], exact[above], rtol=rtol, atol=0, err_msg=what)
    near = ~below & ~above  # within rounding of tiny: either is right
    ok = (out[near] == 0) | np.isclose(out[near], exact[near], rtol=rtol, atol=0)
    assert ok.all(), what


def decays(n, dtype, seed=0, lo=0.5):
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, 1.0, n).astype(dtype), rng.uniform(0, 1, n).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_linear_recurrence_flushes_on_cpu_threads(dtype, threads):
    # 2^20 elements take the multi-threaded path (more than two blocks)
    n = 1 << 20 if dtype is np.float32 else 1 << 15
    lo = 0.5 if dtype is np.float32 else 0.9  # float64 underflows after ~13k such factors
    a, b = decays(n, dtype, lo=lo)
    b[n // 2 :] = 0  # h then decays into the subnormals too
    A64, h64 = _affine64(a.astype(np.float64), b.astype(np.float64))
    with pp.set_num_threads(threads):
        A, h = pp.associative_scan(pp.linear_recurrence, (a, b))
    rtol = 2e-3 if dtype is np.float32 else 1e-9
    assert_flushed(A, A64, dtype, rtol, "A")
    assert_flushed(h, h64, dtype, rtol, "h")
    assert np.count_nonzero(A64 < TINY[dtype] / 2) > n // 4  # the case is really exercised


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mul_flushes_to_a_zero_of_the_products_sign(dtype):
    rng = np.random.default_rng(1)
    n = 5000 if dtype is np.float32 else 40_000
    x = rng.uniform(0.5, 1.0, n) * rng.choice([-1.0, 1.0], n)
    x = x.astype(dtype)
    exact = np.cumprod(x.astype(np.float64))
    out = pp.associative_scan(pp.mul, x)
    assert_flushed(out, exact, dtype, 2e-3 if dtype is np.float32 else 1e-9, "mul")
    zero = (out == 0) & (exact != 0)
    assert zero.any()
    np.testing.assert_array_equal(np.signbit(out[zero]), exact[zero] < 0)


def test_nan_and_inf_pass_and_integers_are_untouched():
    x = np.array([1e-20, 1e-20, np.nan, 2.0], np.float32)
    out = pp.associative_scan(pp.mul, x)
    assert out[1] == 0 and np.isnan(out[2]) and np.isnan(out[3])
    y = np.array([np.inf, 1e-30, 1e-30], np.float32)
    assert np.array_equal(pp.associative_scan(pp.mul, y), [np.inf, np.inf, np.inf])
    i = np.array([3, 0, 5], np.int64)
    assert pp.associative_scan(pp.mul, i).tolist() == [3, 0, 0]


def test_matmul2x2_and_segmented_forms_flush():
    n = 3000
    rng = np.random.default_rng(2)
    m = [rng.uniform(0.2, 0.3, n).astype(np.float32) for _ in range(4)]
    out = pp.associative_scan(pp.matmul2x2, m)
    for o in out:
        assert np.all((o == 0) | (np.abs(o) >= TINY[np.float32]))
    assert np.all(out[0][-100:] == 0)  # (0.5 ** n) underflows
    a, b = decays(n, np.float32, seed=3)
    starts = np.zeros(n, bool)
    starts[[0, 1000, 2000]] = True
    A, h = pp.associative_scan(pp.linear_recurrence, (a, b), reset=starts)
    for s in (0, 1000, 2000):
        seg = slice(s, s + 1000)
        A64, h64 = _affine64(a[seg].astype(np.float64), b[seg].astype(np.float64))
        assert_flushed(A[seg], A64, np.float32, 2e-4, f"A from {s}")
        assert_flushed(h[seg], h64, np.float32, 2e-4, f"h from {s}")
    assert segmented(pp.linear_recurrence).flush == (1, 2)  # never the flag


@pytest.mark.parametrize("backend", ["reference", "generic-numpy", "generic-torch", "dask", "cuda"])
def test_every_backend_keeps_the_contract(backend):
    n = 3000 if backend != "cuda" else 200
    a, b = decays(n, np.float32, seed=4, lo=0.05 if backend == "cuda" else 0.5)
    A64, h64 = _affine64(a.astype(np.float64), b.astype(np.float64))
    if backend == "reference":
        A, h = pp.associative_scan(pp.linear_recurrence, (a, b), method="reference")
    elif backend == "generic-numpy":
        A, h = pp.associative_scan(pp.linear_recurrence, (a, b), method="generic")
    elif backend == "generic-torch":
        torch = pytest.importorskip("torch")
        ta = torch.from_numpy(a).requires_grad_(True)
        A, h = pp.associative_scan(pp.linear_recurrence, (ta, torch.from_numpy(b)))
        A, h = A.detach().numpy(), h.detach().numpy()
    elif backend == "dask":
        da = pytest.importorskip("dask.array")
        A, h = pp.associative_scan(
            pp.linear_recurrence, (da.from_array(a, chunks=700), da.from_array(b, chunks=700))
        )
        A, h = A.compute(scheduler="sync"), h.compute(scheduler="sync")
    else:
        cuda = pytest.importorskip("numba.cuda")
        from propopt.associativity.scan import _cuda

        with _cuda.tiles(threads=8, items=2):
            A, h = pp.associative_scan(pp.linear_recurrence, (cuda.to_device(a), cuda.to_device(b)))
        A, h = A.copy_to_host(), h.copy_to_host()
    assert np.count_nonzero(A64 < TINY[np.float32] / 2) > n // 4
    assert_flushed(A, A64, np.float32, 2e-4, f"A, {backend}")
    assert_flushed(h, h64, np.float32, 2e-4, f"h, {backend}")


def test_own_monoid_flushes_only_when_asked():
    def affine(a1, b1, a2, b2):
        return a1 * a2, a2 * b1 + b2

    a, b = decays(3000, np.float32, seed=5)
    keep = pp.Monoid(affine, (1.0, 0.0), name="affine_keep")
    flush = pp.Monoid(affine, (1.0, 0.0), name="affine_flush", flush_subnormals=True)
    A_keep, _ = pp.associative_scan(keep, (a, b))
    A_flush, _ = pp.associative_scan(flush, (a, b))
    tiny = TINY[np.float32]
    assert np.any((A_keep != 0) & (np.abs(A_keep) < tiny))  # subnormals, as computed
    assert not np.any((A_flush != 0) & (np.abs(A_flush) < tiny))
    with pytest.raises(TypeError, match="flush_subnormals must be True or False, got 'yes'"):
        pp.Monoid(affine, (1.0, 0.0), flush_subnormals="yes")


def _median_ratio(slow_inputs, fast_inputs, fn, rounds=9):
    """Median over interleaved rounds of ``fn(slow) / fn(fast)`` times, back to back."""
    ratios = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(slow_inputs)
        t1 = time.perf_counter()
        fn(fast_inputs)
        t2 = time.perf_counter()
        ratios.append((t1 - t0) / (t2 - t1))
    return float(np.median(ratios))


@pytest.mark.parametrize("monoid", [pp.linear_recurrence, pp.mul], ids=lambda m: m.name)
def test_decays_near_one_half_cost_what_decays_near_one_cost(monoid):
    # U(0.5, 1) decays underflow within a few hundred elements; without the
    # flush they ran 7-11x slower than U(0.9, 1) on one thread (subnormal
    # arithmetic, and products stuck at the smallest subnormal)
    n = 1 << 20
    slow, fast = decays(n, np.float32, seed=6, lo=0.5), decays(n, np.float32, seed=6, lo=0.9)
    if monoid is pp.mul:
        slow, fast = slow[0], fast[0]
    out = tuple(np.empty(n, np.float32) for _ in range(monoid.arity))
    out = out if monoid.arity > 1 else out[0]

    def scan(x):
        return pp.associative_scan(monoid, x, out=out)

    with pp.set_num_threads(1):
        scan(slow), scan(fast)  # compiled and warm
        ratio = _median_ratio(slow, fast, scan)
    assert ratio < 2.0, f"U(0.5, 1) took {ratio:.2f}x the time of U(0.9, 1)"
