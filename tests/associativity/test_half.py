"""Half precision (float16, bfloat16) in every built-in monoid, NumPy and torch.

The scan widens to float32 and rounds the result once to the input dtype, so
each output carries the float32 scan's error (about ``n * 2**-24``) plus one
rounding to the half type (``2**-11`` for float16, ``2**-8`` for bfloat16).
The reference is a float64 sequential loop over the same half-precision
values, written here without propopt.
"""

import zlib

import numpy as np
import pytest

import propopt as pp

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")

MONOIDS = [pp.add, pp.mul, pp.maximum, pp.minimum, pp.logaddexp, pp.linear_recurrence, pp.matmul2x2]

# jax's test tolerances for these dtypes (jax._src.public_test_util), relative.
# One rounding to the half type costs at most 2**-11 = 4.9e-4 (float16) and
# 2**-8 = 3.9e-3 (bfloat16); float32 accumulation adds n * 6e-8 <= 2.5e-4 for
# n <= 4096, so both bounds hold with a margin.
TOL = {"float16": 1e-3, "bfloat16": 1e-2}
HALF = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TORCH_HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def draw(m, n, dtype, rng):
    """Half-precision elements whose prefixes stay well scaled up to n = 4096.

    No cancellation and no zeros (so relative errors are meaningful); the
    products drift slowly enough to stay in float16's normal range.
    """
    if m is pp.mul:
        parts = [rng.uniform(0.99, 1.01, n)]
    elif m is pp.linear_recurrence:
        parts = [rng.uniform(0.999, 1.0, n), rng.uniform(0.5, 1.5, n)]
    elif m is pp.matmul2x2:
        parts = [rng.uniform(0.49, 0.51, n) for _ in range(4)]
    elif m is pp.logaddexp:
        parts = [rng.uniform(0.5, 3.0, n)]
    elif m in (pp.maximum, pp.minimum):
        parts = [rng.normal(size=n)]
    else:
        parts = [rng.uniform(0.5, 1.5, n)]
    return tuple(p.astype(HALF[dtype]) for p in parts)


def loop64(m, elems):
    """The sequential fold in float64 of the half-precision values, with plain NumPy."""
    xs = [np.asarray(e, dtype=np.float64) for e in elems]
    if m is pp.add:
        return [np.cumsum(xs[0])]
    if m is pp.mul:
        return [np.cumprod(xs[0])]
    if m is pp.maximum:
        return [np.maximum.accumulate(xs[0])]
    if m is pp.minimum:
        return [np.minimum.accumulate(xs[0])]
    if m is pp.logaddexp:
        return [np.logaddexp.accumulate(xs[0])]
    n = len(xs[0])
    if m is pp.linear_recurrence:
        a, h = np.empty(n), np.empty(n)
        acc_a, acc_h = 1.0, 0.0
        for t in range(n):
            acc_a, acc_h = acc_a * xs[0][t], xs[0][t] * acc_h + xs[1][t]
            a[t], h[t] = acc_a, acc_h
        return [a, h]
    assert m is pp.matmul2x2
    mats = np.stack(xs, -1).reshape(n, 2, 2)
    out, acc = np.empty((n, 2, 2)), np.eye(2)
    for t in range(n):
        acc = acc @ mats[t]
        out[t] = acc
    return [out[:, i, j] for i in range(2) for j in range(2)]


def as_numpy64(x):
    if isinstance(x, torch.Tensor):
        return x.detach().double().numpy()
    return np.asarray(x, dtype=np.float64)


def rel_error(out, ref):
    """Largest elementwise relative error over all leaves (references are nonzero)."""
    tiny = np.finfo(np.float64).tiny
    return max(
        float(np.max(np.abs(as_numpy64(o) - r) / np.maximum(np.abs(r), tiny)))
        for o, r in zip(out, ref)
    )


def scan(m, elems, lib, dtype, **kw):
    if lib == "torch":
        elems = tuple(
            torch.from_numpy(np.asarray(e, np.float32)).to(TORCH_HALF[dtype]) for e in elems
        )
    out = pp.associative_scan(m, elems if m.arity > 1 else elems[0], **kw)
    out = out if m.arity > 1 else (out,)
    want = TORCH_HALF[dtype] if lib == "torch" else np.dtype(HALF[dtype])
    assert all(o.dtype == want for o in out), [o.dtype for o in out]
    return out


# The widening happens before any backend is chosen, so the default run
# checks it through the generic path (no kernel to compile) and, for add,
# through the float32 CPU kernel the scan tests compile anyway.
@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("m", MONOIDS, ids=lambda m: m.name)
def test_half_matches_float64_loop(m, dtype, lib):
    elems = draw(m, 300, dtype, np.random.default_rng(0))
    method = "auto" if m is pp.add else "generic"
    out = scan(m, elems, lib, dtype, method=method)
    assert rel_error(out, loop64(m, elems)) <= TOL[dtype]


def test_half_exclusive_reverse_and_grad():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.bfloat16, requires_grad=True)
    out = pp.associative_scan(pp.add, x, exclusive=True, reverse=True)
    assert out.dtype == torch.bfloat16 and out.tolist() == [9.0, 7.0, 4.0, 0.0]
    out.sum().backward()
    assert x.grad.dtype == torch.bfloat16 and x.grad.tolist() == [0.0, 1.0, 2.0, 3.0]
    for ident in (torch.tensor(0.0, dtype=torch.bfloat16), np.zeros((), ml_dtypes.bfloat16)):
        for fn in (pp.add, lambda a, b: a + b):
            out = pp.associative_scan(fn, x.detach(), exclusive=True, identity=ident)
            assert out.dtype == torch.bfloat16 and out.tolist() == [0.0, 1.0, 3.0, 6.0]
    empty = pp.associative_scan(pp.logaddexp, np.zeros(0, ml_dtypes.bfloat16))
    assert empty.dtype == np.dtype(ml_dtypes.bfloat16) and empty.shape == (0,)


def test_half_accumulates_in_float32():
    # 4096 ones: a float16 running sum sticks at 2048 (2048 + 1 rounds back to
    # 2048); accumulated in float32 every prefix is exact, and 4096 is a float16.
    out = pp.associative_scan(pp.add, np.ones(4096, np.float16))
    assert out.dtype == np.float16 and out[-1] == 4096


def test_half_in_integer_monoid_is_refused():
    bitor = pp.Monoid(lambda a, b: a | b, 0, name="bitor", kinds="iu")
    with pytest.raises(TypeError, match=r"bitor.*float16.*only for monoids over floats"):
        pp.associative_scan(bitor, np.ones(3, np.float16))


def test_half_law_audits_combine_in_float32():
    from propopt.audit import check_associative, check_identity

    sub = pp.Monoid(lambda a, b: a - b, 0.0, name="sub", array_combine=lambda a, b: [a[0] - b[0]])
    x = np.random.default_rng(5).normal(size=200)
    for v in (x.astype(ml_dtypes.bfloat16), torch.from_numpy(x).to(torch.bfloat16)):
        assert check_associative(pp.logaddexp, v).ok and check_identity(pp.logaddexp, v).ok
        report = check_associative(sub, v)
        assert not report.ok and "rtol=0.0001" in str(report)  # float32's tolerance


def test_half_dask_equals_in_memory():
    da = pytest.importorskip("dask.array")
    x = draw(pp.add, 1000, "bfloat16", np.random.default_rng(1))[0]
    lazy = pp.associative_scan(pp.add, da.from_array(x, chunks=97))
    assert lazy.dtype == x.dtype
    got = lazy.compute(scheduler="sync")
    assert got.dtype == x.dtype
    # bfloat16 values in [0.5, 1.5) are multiples of 2**-8: every float32
    # prefix is exact, so the chunked and in-memory results agree bit for bit
    want = pp.associative_scan(pp.add, x)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_half_big_endian_is_widened_too():
    """A big-endian float16 array is half precision too (its str() is '>f2'): dask scans
    it in float32 and rounds once, as NumPy's path does, not once per combine."""
    da = pytest.importorskip("dask.array")
    v = np.array([1, 1, 1, 1.75, 1.75, 1.859375, 1.5])
    x = v.astype(np.dtype(">f2"))
    want = np.cumprod(v).astype(np.float16)  # exact in float64, rounded once
    for chunks in (1, 3, 7):
        got = pp.associative_scan(pp.mul, da.from_array(x, chunks=chunks), method="tiled")
        got = got.compute()
        assert got.dtype == x.dtype
        assert np.array_equal(got.astype(np.float64), want.astype(np.float64)), (chunks, got)
    assert np.array_equal(pp.associative_scan(pp.mul, x).astype(np.float64), want)


def test_half_cuda_device_arrays():
    # numba's simulator unless NUMBA_ENABLE_CUDASIM=0 (tests/conftest.py); small
    # tiles so that 40 elements span several tiles and the carry scan
    cuda = pytest.importorskip("numba.cuda")
    from propopt.associativity.scan import _cuda

    x = draw(pp.logaddexp, 40, "float16", np.random.default_rng(4))[0]
    with _cuda.tiles(threads=8, items=2):
        out = pp.associative_scan(pp.logaddexp, cuda.to_device(x))
    assert out.dtype == np.float16
    assert rel_error([out.copy_to_host()], loop64(pp.logaddexp, (x,))) <= TOL["float16"]
    with pytest.raises(TypeError, match=r"float16 but not bfloat16.*torch CUDA tensors"):
        pp.associative_scan(pp.add, cuda.to_device(x.astype(ml_dtypes.bfloat16)))


# ---------------------------------------------------------------- slow matrix
@pytest.mark.slow
@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("m", MONOIDS, ids=lambda m: m.name)
def test_half_every_backend_and_direction(m, dtype, lib):
    rng = np.random.default_rng(zlib.crc32(f"{m.name}-{dtype}-{lib}".encode()))
    elems = draw(m, 4096, dtype, rng)
    ref = loop64(m, elems)
    for method in ("auto", "tiled", "generic", "reference"):
        out = scan(m, elems, lib, dtype, method=method)
        assert rel_error(out, ref) <= TOL[dtype], (method, rel_error(out, ref))
    # reverse and exclusive: out_i = e_{n-1} . ... . e_{i+1}, the loop over the
    # flipped input shifted by one, and the identity last
    rev = loop64(m, tuple(e[::-1] for e in elems))
    out = scan(m, elems, lib, dtype, reverse=True, exclusive=True)
    for o, r, e in zip(out, rev, m.identity(np.float64)):
        o = as_numpy64(o)[::-1]
        assert o[0] == e
        np.testing.assert_allclose(o[1:], r[:-1], rtol=TOL[dtype], atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("m", MONOIDS, ids=lambda m: m.name)
def test_half_dask_matches_in_memory(m, dtype):
    da = pytest.importorskip("dask.array")
    elems = draw(m, 2000, dtype, np.random.default_rng(2))
    for kw in ({}, {"reverse": True, "exclusive": True}):
        mem = pp.associative_scan(m, elems, **kw)
        lazy = pp.associative_scan(m, tuple(da.from_array(e, chunks=173) for e in elems), **kw)
        got = [x.compute(scheduler="sync") for x in lazy]
        for g, w in zip(got, mem):
            assert g.dtype == w.dtype == elems[0].dtype
            if m in (pp.add, pp.maximum, pp.minimum):
                # exact in float32 (see test_half_dask_equals_in_memory): bit for bit
                np.testing.assert_array_equal(g.view(np.uint16), w.view(np.uint16))
            else:
                # float32 regrouping across chunks (as for float32 inputs) can move
                # the final rounding by one unit in the half type's last place; the
                # values are positive, so their bit patterns order like the values
                ulps = np.abs(g.view(np.int16).astype(np.int64) - w.view(np.int16))
                assert ulps.max() <= 1 and np.mean(ulps) < 0.01, (ulps.max(), np.mean(ulps))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_errors_against_jax(dtype):
    """The same half inputs through jax's cumulative reductions: ours are no larger.

    jax.lax's cumulative reductions keep the half type while they accumulate
    (measured with jax 0.10 on CPU at n = 4096: cumsum 1.7e-3 / 9.5e-3,
    cumprod 0.2 / 0.77 for float16 / bfloat16), whereas one rounding of a
    float32 scan stays within ``2**-11`` / ``2**-8``.
    """
    jax = pytest.importorskip("jax")
    lax = jax.lax
    ops = {
        pp.add: lax.cumsum,
        pp.mul: lax.cumprod,
        pp.maximum: lax.cummax,
        pp.minimum: lax.cummin,
        pp.logaddexp: lax.cumlogsumexp,
    }
    unit = {"float16": 2.0**-11, "bfloat16": 2.0**-8}[dtype]
    for m, op in ops.items():
        elems = draw(m, 4096, dtype, np.random.default_rng(3))
        ref = loop64(m, elems)
        ours = rel_error(scan(m, elems, "numpy", dtype), ref)
        theirs = rel_error([np.asarray(op(jax.numpy.asarray(elems[0])))], ref)
        assert ours <= TOL[dtype], (m.name, ours)
        # one rounding (plus a sliver of float32 error), never more than jax's
        assert ours <= max(theirs, 1.01 * unit), (m.name, ours, theirs)
