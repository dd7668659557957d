"""logaddexp's own CPU scan (_cpu_logsum*.py): against a float64 fold, the special
values, the fallbacks, the threads, and SIMD in its loops."""

import math
import re

import numba
import numpy as np
import pytest

import propopt as pp
from propopt import threads
from propopt.associativity import _cpu_logsum as L, _cpu_logsum_threads as LT, _cpu_logsum_tile as K

F32, F64 = np.float32, np.float64
TOL = {F32: 2e-5, F64: 1e-12}


def fold64(x):
    """The running log-sum-exp in float64, one element at a time (shares no code)."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    with np.errstate(invalid="ignore", over="ignore"):
        c = -np.inf
        for i, v in enumerate(x.reshape(-1, x.shape[-1]).T if x.ndim > 1 else x):
            c = np.logaddexp(c, v)
            out[..., i] = c
    return out


def check(got, x):
    want = fold64(x)
    tol = TOL[np.dtype(x.dtype).type]
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)  # NaN and inf where want has them


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("n", [1, L.C - 1, L.NT, L.NT + 1, 3 * L.NT + 17, 40_000])
def test_against_the_float64_fold(dtype, n):
    x = np.random.default_rng(n).normal(0, 3, n).astype(dtype)
    got = pp.associative_scan(pp.logaddexp, x)
    check(got, x)
    assert L.serves(pp.logaddexp, [x], 0, False, False)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_threads_and_rows(dtype):
    """A long row walked in super-blocks by T cooperating threads, and many rows."""
    bk = L.BLOCK_BYTES // np.dtype(dtype).itemsize
    x = np.random.default_rng(1).normal(0, 2, 5 * bk + 1234).astype(dtype)
    x[bk + 5] = -np.inf
    k = L._consts(np.dtype(dtype))
    with_inf = x.copy()
    with_inf[2 * bk + 9] = np.inf
    with_nan = with_inf.copy()
    with_nan[4 * bk + 3] = np.nan
    for T, b0 in ((2, bk + bk // 2), (3, bk)):  # the driver's split, whatever threads run it
        for v in (x, with_inf, with_nan):
            o = np.empty_like(v)
            L._scan_1d(v, o, T, bk, b0, *k, False, False)
            check(o, v)
    with threads.set_num_threads(2):
        check(pp.associative_scan(pp.logaddexp, x), x)
        rows = np.random.default_rng(2).normal(size=(6, 3 * bk)).astype(dtype)
        check(pp.associative_scan(pp.logaddexp, rows, axis=-1), rows)
    with threads.set_num_threads(1):
        check(pp.associative_scan(pp.logaddexp, x), x)


def _specials(dtype, n, rng):
    x = rng.normal(0, 5, n)
    kind = rng.integers(0, 40, n)
    x[kind == 0] = -np.inf
    x[kind == 1] = rng.uniform(-1e30, 1e30) if dtype == F32 else rng.uniform(-1e300, 1e300)
    x[kind == 2] -= 500.0
    x[kind == 3] += 500.0
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_special_values_give_what_the_fold_gives(dtype):
    rng = np.random.default_rng(3)
    n = 4 * L.NT + 5
    cases = {
        "all -inf": np.full(n, -np.inf, dtype),
        "-inf first": np.concatenate([np.full(L.NT + 300, -np.inf), rng.normal(size=n)]),
        "+inf inside": np.where(np.arange(n) == 2 * L.NT + 7, np.inf, rng.normal(size=n)),
        "nan inside": np.where(np.arange(n) == L.NT + 3, np.nan, rng.normal(size=n)),
        "-inf then +inf": np.where(np.arange(n) < 100, -np.inf, np.inf),
        "-inf and one nan": np.where(np.arange(n) == 2 * L.NT + 100, np.nan, -np.inf),
        "-inf and one +inf": np.where(np.arange(n) == L.NT + 127, np.inf, -np.inf),
        "+inf then nan": np.select(
            [np.arange(n) == L.NT + 1, np.arange(n) == 3 * L.NT + 5],
            [np.inf, np.nan],
            rng.normal(size=n),
        ),
        "rising by 300": np.arange(n) * 300.0 - 1e5,  # each chunk's first prefix underflows
        "falling": -np.arange(n) * 300.0,
        "mixed": _specials(dtype, n, rng),
    }
    for name, x in cases.items():
        x = np.asarray(x, dtype)
        got = pp.associative_scan(pp.logaddexp, x)
        try:
            check(got, x)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_a_prefix_far_below_its_chunk_maximum_falls_back():
    """Without the fallback, exp(x - M) underflows and the prefix reads -inf."""
    x = np.zeros(L.NT, F32)
    x[: L.C // 2] = -200.0  # the chunk's maximum is 0: exp(-200) flushes to 0
    got = pp.associative_scan(pp.logaddexp, x)
    assert got[0] == F32(-200.0)
    check(got, x)


def excl64(x):
    """The exclusive fold: -inf, then the inclusive fold shifted by one."""
    return np.concatenate([[-np.inf], fold64(x)[:-1]])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_reverse_and_exclusive(dtype):
    rng = np.random.default_rng(4)
    x = rng.normal(size=3 * L.NT + 5).astype(dtype)
    x[L.NT + 2] = -np.inf
    for rev in (False, True):
        assert L.serves(pp.logaddexp, [x], 0, rev, True)
        inc = pp.associative_scan(pp.logaddexp, x, reverse=rev)
        exc = pp.associative_scan(pp.logaddexp, x, reverse=rev, exclusive=True)
        if rev:
            inc, exc, xr = inc[::-1], exc[::-1], x[::-1]
        else:
            xr = x
        check(inc, xr)
        np.testing.assert_allclose(exc, excl64(xr), rtol=TOL[dtype], atol=TOL[dtype])
    # threads, with +inf then NaN: each block's first exclusive output is its carry
    bk = L.BLOCK_BYTES // np.dtype(dtype).itemsize
    y = rng.normal(size=5 * bk + 77).astype(dtype)
    y[3 * bk + 1] = np.inf
    y[4 * bk + 9] = np.nan
    k = L._consts(np.dtype(dtype))
    for rev in (False, True):
        for excl in (False, True):
            o = np.empty_like(y)
            L._scan_1d(y, o, 2, bk, bk + bk // 2, *k, rev, excl)
            got, yr = (o[::-1], y[::-1]) if rev else (o, y)
            want = excl64(yr) if excl else fold64(yr)
            np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])


def test_the_cases_left_to_the_generic_kernels():
    x = np.random.default_rng(4).normal(size=300).astype(F32)
    assert not L.serves(pp.logaddexp, [x.reshape(-1, 1)], 0, False, False)  # not the last axis
    assert not L.serves(pp.add, [x], 0, False, False)
    assert not L.serves(pp.logaddexp, [x.astype(np.float16)], 0, False, False)


def test_out_is_written():
    x = np.random.default_rng(5).normal(size=5000).astype(F64)
    out = np.empty_like(x)
    got = pp.associative_scan(pp.logaddexp, x, out=out)
    assert got is out or np.shares_memory(got, out)
    check(out, x)


def _avx2() -> bool:
    import llvmlite.binding as llvm

    return "+avx2" in llvm.get_host_cpu_features().flatten().split(",")


@pytest.mark.skipif(not _avx2(), reason="the host has no AVX2")
@pytest.mark.parametrize("dtype", [F32, F64])
def test_the_tile_runs_on_vectors(dtype):
    """exp (its 2^k: vpsll*), log (vdivp*), the prefix sums (vaddp* on shuffled
    vectors) and the chunk maximum (vmaxp*) on ymm registers."""
    sfx = "s" if dtype == F32 else "d"
    fresh = {  # compiled here, off the disk cache, so that their machine code can be read
        f.__name__: numba.njit(nogil=True, fastmath=opts)(f.py_func)
        for f, opts in ((K._tile, K.FM), (K._max, {"contract", "nnan", "nsz"}))
    }
    x = np.random.default_rng(6).normal(size=L.NT).astype(dtype)
    o = np.empty_like(x)
    k = L._consts(np.dtype(dtype))
    e = np.empty(L.C, dtype)
    _, _, ok = fresh["_tile"](x, o, 0, dtype(-np.inf), k[2], e, *k)
    assert ok
    check(o, x)
    fresh["_max"](x, 0, L.NT, dtype(-np.inf))
    tile = fresh["_tile"].inspect_asm(fresh["_tile"].signatures[0])
    mx_asm = fresh["_max"].inspect_asm(fresh["_max"].signatures[0])
    shl = "vpslld" if dtype == F32 else "vpsllq"
    for asm, op in (
        (tile, shl),
        (tile, f"vdivp{sfx}"),
        (tile, f"vaddp{sfx}"),
        (mx_asm, f"vmaxp{sfx}"),
    ):
        vector = [ln for ln in asm.splitlines() if re.search(op, ln) and "%ymm" in ln]
        assert vector, f"no {op} on ymm registers"
    assert not re.search(r"\$(expf?|log1?p?f?)\b", tile), "a libm exp or log is left in the tile"


@pytest.mark.parametrize("dtype", [F32, F64])
def test_the_chunk_prefix_sums(dtype):
    """_scan_chunk: the carry plus the running sums of e[:C], in place; returns the last."""
    rng = np.random.default_rng(7)
    base = rng.uniform(0, 1, L.C + 1)
    e = base.astype(dtype)[1:]  # not aligned to the vector width
    want = 0.25 + np.cumsum(base[1:].astype(dtype).astype(np.float64))

    @numba.njit
    def scan(e, k):
        return K._scan_chunk(e, k)

    got = scan(e, dtype(0.25))
    np.testing.assert_allclose(e, want, rtol=TOL[dtype])
    assert got == e[-1]


def seq_math(x):
    """The running log-sum-exp in float64 by math.exp and math.log1p, one element at a time."""
    out = np.empty(len(x))
    c = -math.inf
    for i, v in enumerate(np.asarray(x, np.float64).tolist()):
        if math.isnan(c) or math.isnan(v):
            c = math.nan
        elif c == math.inf or v == math.inf:
            c = math.inf
        elif c == -math.inf:
            c = v
        elif v != -math.inf:
            c = max(c, v) + math.log1p(math.exp(-abs(c - v)))
        out[i] = c
    return out


@pytest.mark.parametrize("dtype", [F32, F64])
def test_two_threads_defer_the_log_and_fall_back(dtype):
    """The forward scan on two threads (thread 1's log deferred to the next region),
    with a NaN, a +inf, a run of -inf and a steep rise inside thread 1's first block,
    each of which makes that block fall back to the reduce and the plain scan."""
    bk = L.BLOCK_BYTES // np.dtype(dtype).itemsize
    b0 = bk + int(bk * LT.LEAD_SHARE[np.dtype(dtype).itemsize]) // L.NT * L.NT
    n = 4 * (b0 + bk) + 123  # four super-blocks and a part of one
    x = np.random.default_rng(8).normal(0, 3, n)
    at = b0 + bk // 3  # inside thread 1's block of the first super-block
    nan, inf, ninf, rise = (x.copy() for _ in range(4))
    nan[at] = np.nan
    inf[at] = np.inf
    ninf[at - 100 : b0 + bk + 50] = -np.inf  # past the end of the block: a -inf carry too
    ninf[: 2 * L.NT] = -np.inf
    rise[at : at + 300] = np.arange(300) * 300.0 - 1e4  # each prefix far below the next
    k = L._consts(np.dtype(dtype))
    mcs = np.empty(bk // L.C, dtype)
    for name, v, falls_back in (
        ("normal", x, False),
        ("nan", nan, True),
        ("+inf", inf, True),
        ("-inf", ninf, False),
        ("rise", rise, True),
    ):
        v = v.astype(dtype)
        o = np.empty_like(v)
        deferred = LT._pass1(v, o, b0, b0 + bk, mcs, *k)[2]
        assert deferred is not falls_back, name
        with pp.set_num_threads(2):
            two = pp.associative_scan(pp.logaddexp, v)
        with pp.set_num_threads(1):
            one = pp.associative_scan(pp.logaddexp, v)
        want = seq_math(v)
        tol = TOL[dtype]
        for got in (two, one):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
        np.testing.assert_allclose(two, one, rtol=tol, atol=tol, err_msg=name)
    # a whole block of -inf (its chunks' maxima -inf) after a finite carry, and after none
    for before in (1.0, -np.inf):
        v = np.full(n, -np.inf, dtype)
        v[b0 - 5] = before
        v[b0 + bk + 7 :] = x[b0 + bk + 7 :]
        assert LT._pass1(v, np.empty_like(v), b0, b0 + bk, mcs, *k)[2]
        o = np.empty_like(v)
        LT.scan_1d(v, o, 2, bk, b0, *k)
        np.testing.assert_allclose(o, seq_math(v), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_prefixes_of_minus_inf_alone_do_not_fall_back(dtype):
    """Before the first element above -inf, the prefixes are 0 exactly (exp(-inf)),
    not terms that exp flushed: a block or tile that starts with -inf, or is mostly
    -inf, is scanned rather than redone by the fold, and those outputs are the
    carry's value (-inf from the identity)."""
    bk = L.BLOCK_BYTES // np.dtype(dtype).itemsize
    b0 = bk + int(bk * LT.LEAD_SHARE[np.dtype(dtype).itemsize]) // L.NT * L.NT
    n = 3 * (b0 + bk) + 77
    rng = np.random.default_rng(11)
    x = rng.normal(0, 3, n)
    lead = x.copy()
    lead[b0 : b0 + 300] = -np.inf  # thread 1's first block starts with -inf, a finite carry
    lead_all = x.copy()
    lead_all[: b0 + 300] = -np.inf  # and with the carry -inf too
    sparse = np.where(rng.random(n) < 0.01, x, -np.inf)  # 1% finite
    k = L._consts(np.dtype(dtype))
    mcs = np.empty(bk // L.C, dtype)
    e = np.empty(L.C, dtype)
    for name, v in (("lead", lead), ("lead_all", lead_all), ("sparse", sparse)):
        v = v.astype(dtype)
        assert LT._pass1(v, np.empty_like(v), b0, b0 + bk, mcs, *k)[2], name
        t = K._tile(v, np.empty_like(v), b0, dtype(-np.inf), dtype(0), e, *k)
        assert t[2], name  # the tile from the identity is kept
        want = seq_math(v)
        for T in (2, 1):
            with pp.set_num_threads(T):
                got = pp.associative_scan(pp.logaddexp, v)
            np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype], err_msg=name)
            assert np.array_equal(np.isneginf(got), np.isneginf(want)), name


@pytest.mark.parametrize("dtype", [F32, F64])
def test_a_last_part_tile_is_scanned_padded(dtype):
    """A last part tile of at least PAD_MIN elements is scanned padded with -inf to
    whole chunks (a shorter one folded); a NaN or +inf in it, or a prefix far below
    its chunk's maximum, sends it to the fold.  Rows of 1000 are such tiles."""
    rng = np.random.default_rng(21)
    k = L._consts(np.dtype(dtype))
    for n in (K.PAD_MIN - 1, K.PAD_MIN, L.C + 1, L.NT - 1, L.NT + 3 * L.C + 7):
        x = rng.normal(0, 3, n)
        at = n - 5
        cases = {"normal": x, "-inf first": np.where(np.arange(n) < at, -np.inf, x)}
        for name, val in (("nan", np.nan), ("+inf", np.inf), ("far below", -300.0)):
            v = x.copy()
            v[at] = val
            v[at + 1] = 80.0 if name == "far below" else v[at + 1]
            cases[name] = v
        for name, v in cases.items():
            v = v.astype(dtype)
            o = np.full_like(v, 7.0)
            K._block(v, o, 0, n, dtype(-np.inf), k[2], *k, False, False)
            want = seq_math(v)
            tol = TOL[dtype]
            np.testing.assert_allclose(o, want, rtol=tol, atol=tol, err_msg=f"{n} {name}")
            assert np.array_equal(np.isneginf(o), np.isneginf(want)), (n, name)
    rows = rng.normal(0, 3, (7, 1000)).astype(dtype)
    check(pp.associative_scan(pp.logaddexp, rows, axis=1), rows)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_one_region_takes_ordered_items_on_any_thread_count(dtype):
    """The forward scan's threads take ordered items and wait only for earlier ones:
    any T, more or fewer than numba's threads, gives the fold's result (no item is
    lost, none deadlocks), as does a row with a fallback in some part."""
    bk = L.BLOCK_BYTES // np.dtype(dtype).itemsize
    k = L._consts(np.dtype(dtype))
    rng = np.random.default_rng(31)
    x = rng.normal(0, 3, 7 * bk + 555)
    x[3 * bk + 17] = 1e4  # a steep rise: that part's tiles fall back
    x[5 * bk + 3 : 5 * bk + 900] = -np.inf
    x = x.astype(dtype)
    want = seq_math(x)
    for b0 in (bk, bk + bk // 4):
        # repeated: an item that ran before one it depends on shows only when a
        # thread is held up at the wrong moment
        for rep in range(8):
            for T in (1, 2, 3, 5) if rep == 0 else (2, 3, 5):
                o = np.full_like(x, np.nan)
                LT.scan_1d(x, o, T, bk, b0, *k)
                tol = TOL[dtype]
                np.testing.assert_allclose(o, want, rtol=tol, atol=tol, err_msg=f"T={T}")
