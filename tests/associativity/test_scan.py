"""associative_scan: every backend against the sequential float64 fold."""

import zlib

import numba
import numpy as np
import pytest

import propopt as pp
from propopt.associativity import _cpu

MONOIDS = [pp.add, pp.mul, pp.maximum, pp.minimum, pp.logaddexp, pp.linear_recurrence, pp.matmul2x2]
LENGTHS = [0, 1, 2, 3, 5, 17, 1000, 2**10 - 1, 2**10 + 1]

# Relative tolerances of a float32 result against the float64 fold of the
# same float32 inputs.  Inputs are drawn so that no cancellation occurs (see
# ``draw``), so each output carries at most about n * eps32 = 1000 * 6e-8 of
# accumulated rounding; 2e-4 leaves a margin of three.
RTOL = {np.float32: 2e-4, np.float64: 1e-10}


def draw(m, n_shape, dtype, rng):
    """Elements for monoid ``m`` whose prefix combinations stay well scaled.

    Positive values (no cancellation) with factors near 1 for the products,
    and 2x2 matrices whose rows sum to about one.
    """
    if np.dtype(dtype).kind in "iu":
        lo, hi = (-1, 3) if m in (pp.mul, pp.matmul2x2, pp.linear_recurrence) else (-50, 50)
        return tuple(rng.integers(lo, hi, size=n_shape).astype(dtype) for _ in range(m.arity))
    if m is pp.mul:
        return (rng.uniform(0.99, 1.01, n_shape).astype(dtype),)
    if m is pp.linear_recurrence:
        return (
            rng.uniform(0.9, 1.0, n_shape).astype(dtype),
            rng.uniform(0, 1, n_shape).astype(dtype),
        )
    if m is pp.matmul2x2:
        return tuple(rng.uniform(0.49, 0.51, n_shape).astype(dtype) for _ in range(4))
    if m is pp.logaddexp:
        return (rng.normal(size=n_shape).astype(dtype),)
    return (rng.uniform(0, 1, n_shape).astype(dtype),)


def reference(m, elems, **kw):
    """The sequential fold in float64 (exact integers stay in their dtype)."""
    if elems[0].dtype.kind == "f":
        elems = tuple(e.astype(np.float64) for e in elems)
    return pp.associative_scan(m, elems, method="reference", **kw)


def assert_close(out, ref, dtype, what):
    for o, r in zip(out, ref):
        assert o.dtype == np.dtype(dtype), what
        assert o.shape == r.shape, what
        if np.dtype(dtype).kind in "iu":
            np.testing.assert_array_equal(o, r, err_msg=what)
        else:
            np.testing.assert_allclose(o, r, rtol=RTOL[dtype], atol=0, err_msg=what)


def cases(m, dtype):
    """(shape, axis) pairs: every length along each axis, negative axes too."""
    out = [((n,), 0) for n in LENGTHS]
    out += [((n, 3), 0) for n in (0, 1, 5, 17, 1000)]
    out += [((2, n), -1) for n in (1, 17, 1025)]
    out += [((3, n, 4), 1) for n in (2, 17, 257)]
    out += [((4, 3, n), -1) for n in (5, 2**9 + 1)]
    return out


# compiling the CPU kernels of one (monoid, dtype) takes seconds: the default
# run covers one dtype per monoid family; the rest of the matrix is slow
FAST = {
    ("add", "float32"),
    ("linear_recurrence", "float64"),
    ("max", "int64"),
    ("matmul2x2", "float64"),
    ("logaddexp", "float64"),
}


ALL_DIRECTIONS = ((False, False), (False, True), (True, False), (True, True))
# each (reverse, exclusive) is a kernel module of its own on the CPU: the
# default run keeps all four for `add` and forward-inclusive plus
# reverse-exclusive for the other monoids; -m slow runs the other two
PLAIN, MIXED = ((False, False), (True, True)), ((False, True), (True, False))


def _matrix():
    for method in ("tiled", "generic"):
        for dtype in (np.float32, np.float64, np.int64):
            for m in MONOIDS:
                fast = method == "generic" or (m.name, np.dtype(dtype).name) in FAST
                name = f"{method}-{np.dtype(dtype).name}-{m.name}"
                if not fast:
                    yield pytest.param(
                        m, dtype, method, ALL_DIRECTIONS, marks=pytest.mark.slow, id=name
                    )
                elif method == "generic" or m is pp.add:
                    yield pytest.param(m, dtype, method, ALL_DIRECTIONS, id=name)
                else:
                    yield pytest.param(m, dtype, method, PLAIN, id=name)
                    yield pytest.param(
                        m, dtype, method, MIXED, marks=pytest.mark.slow, id=f"{name}-mixed"
                    )


@pytest.mark.parametrize(("m", "dtype", "method", "directions"), list(_matrix()))
def test_backends_match_reference(m, dtype, method, directions):
    if not m.accepts(dtype):
        with pytest.raises(TypeError, match="cannot combine"):
            pp.associative_scan(m, draw(pp.add, (3,), dtype, np.random.default_rng(0)) * m.arity)
        return
    rng = np.random.default_rng(zlib.crc32(f"{m.name}-{np.dtype(dtype).name}".encode()))
    for shape, axis in cases(m, dtype):
        elems = draw(m, shape, dtype, rng)
        for reverse, exclusive in directions:
            kw = dict(axis=axis, reverse=reverse, exclusive=exclusive)
            out = pp.associative_scan(m, elems, method=method, **kw)
            what = f"{m.name} {method} {np.dtype(dtype).name} shape={shape} {kw}"
            assert_close(out, reference(m, elems, **kw), dtype, what)


def test_small_integer_dtypes_wrap_like_numpy():
    x = np.arange(1, 200, dtype=np.int8)
    np.testing.assert_array_equal(pp.associative_scan(pp.add, x), np.cumsum(x, dtype=np.int8))
    u = np.arange(1, 300, dtype=np.uint16)
    out = pp.associative_scan(pp.mul, u)
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, np.cumprod(u, dtype=np.uint16))


def test_complex_linear_recurrence():
    rng = np.random.default_rng(5)
    a = (rng.uniform(0.5, 1, 300) * np.exp(1j * rng.uniform(0, 6, 300))).astype(np.complex128)
    b = rng.normal(size=300) + 1j * rng.normal(size=300)
    out = pp.associative_scan(pp.linear_recurrence, (a, b))
    h, ref = 0, []
    for ai, bi in zip(a, b):
        h = ai * h + bi
        ref.append(h)
    np.testing.assert_allclose(out[1], ref, rtol=1e-12)


def test_scan_known_values():
    x = np.arange(1, 6)
    assert pp.associative_scan(pp.add, x).tolist() == [1, 3, 6, 10, 15]
    assert pp.associative_scan(pp.add, x, reverse=True).tolist() == [15, 14, 12, 9, 5]
    assert pp.associative_scan(pp.add, x, exclusive=True).tolist() == [0, 1, 3, 6, 10]
    assert pp.associative_scan(pp.add, x, exclusive=True, reverse=True).tolist() == [
        14,
        12,
        9,
        5,
        0,
    ]
    a, h = pp.associative_scan(pp.linear_recurrence, (np.full(4, 0.5), np.ones(4)))
    assert h.tolist() == [1.0, 1.5, 1.75, 1.875]
    assert a.tolist() == [0.5, 0.25, 0.125, 0.0625]


@pytest.mark.parametrize("method", ["tiled", "generic", "reference"])
def test_matmul_operand_order_forward_and_reverse(method):
    # Non-commutative: forward gives M0 @ ... @ Mi, reverse gives
    # M_{n-1} @ ... @ M_i (the accumulated suffix on the left), as in jax.
    rng = np.random.default_rng(3)
    mats = rng.integers(-3, 4, size=(9, 2, 2)).astype(np.float64)
    elems = tuple(mats[:, i, j] for i in range(2) for j in range(2))
    fwd = pp.associative_scan(pp.matmul2x2, elems, method=method)
    rev = pp.associative_scan(pp.matmul2x2, elems, reverse=True, method=method)
    acc = np.eye(2)
    for i in range(9):
        acc = acc @ mats[i]
        np.testing.assert_allclose(np.array(fwd)[:, i].reshape(2, 2), acc)
    acc = np.eye(2)
    for i in range(8, -1, -1):
        acc = acc @ mats[i]
        np.testing.assert_allclose(np.array(rev)[:, i].reshape(2, 2), acc)


def test_matches_jax_including_reverse():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    rng = np.random.default_rng(4)
    mats = rng.normal(size=(33, 2, 2))

    def matmul(x, y):
        return jnp.matmul(x, y)

    for reverse in (False, True):
        want = np.asarray(jax.lax.associative_scan(matmul, jnp.asarray(mats), reverse=reverse))
        elems = tuple(mats[:, i, j] for i in range(2) for j in range(2))
        got = pp.associative_scan(pp.matmul2x2, elems, reverse=reverse)
        np.testing.assert_allclose(np.stack(got, -1).reshape(33, 2, 2), want, rtol=1e-12)
        got = pp.associative_scan(lambda x, y: x @ y, mats, reverse=reverse)
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_thread_count_and_block_size_do_not_change_results():
    rng = np.random.default_rng(7)
    n = 300_001
    a, b = rng.uniform(0.9, 1.0, n), rng.normal(size=n)
    ref = reference(pp.linear_recurrence, (a, b))
    saved = numba.get_num_threads()
    results = []
    try:
        for threads in sorted({1, saved}):
            numba.set_num_threads(threads)
            for block in (None, 1024, 4096 + 512, 65536):
                for reverse in (False, True):
                    out = _cpu.scan(pp.linear_recurrence, [a, b], 0, reverse, False, block=block)
                    if not reverse:
                        results.append(out)
    finally:
        numba.set_num_threads(saved)
    # h passes near zero, where only an absolute bound (scaled to |h|) holds
    scale = np.max(np.abs(ref[1]))
    for out in results:
        np.testing.assert_allclose(out[1], ref[1], rtol=1e-10, atol=1e-13 * scale)
        np.testing.assert_allclose(out[0], ref[0], rtol=1e-10, atol=1e-300)


def test_custom_monoid_from_scalar_function():
    @pp.monoid(identity=(0.0, 1.0), kinds="f")
    def affine_min(s1, c1, s2, c2):  # running (sum, min) pair
        return s1 + s2, min(c1, c2)

    rng = np.random.default_rng(8)
    x, y = rng.normal(size=500), rng.normal(size=500)
    for method in ("tiled", "generic"):
        s, c = pp.associative_scan(affine_min, (x, y), method=method)
        np.testing.assert_allclose(s, np.cumsum(x), rtol=1e-12)
        np.testing.assert_array_equal(c, np.minimum.accumulate(np.minimum(y, 1.0)))


def test_pytree_containers_round_trip():
    from collections import namedtuple

    rng = np.random.default_rng(9)
    a, b = rng.uniform(0.5, 1, 50), rng.normal(size=50)
    Pair = namedtuple("Pair", "a b")
    out = pp.associative_scan(pp.linear_recurrence, Pair(a, b))
    assert isinstance(out, Pair)
    ref = pp.associative_scan(pp.linear_recurrence, (a, b), method="reference")
    np.testing.assert_allclose(out.b, ref[1])
    out = pp.associative_scan(pp.linear_recurrence, [a, b])
    assert isinstance(out, list)

    def fn(x, y):
        return {"a": x["a"] * y["a"], "b": y["a"] * x["b"] + y["b"]}

    out = pp.associative_scan(fn, {"b": b, "a": a})
    assert set(out) == {"a", "b"}
    np.testing.assert_allclose(out["b"], ref[1])


def test_length_zero_and_one():
    for x in (np.zeros(0), np.zeros((0, 3))):
        out = pp.associative_scan(pp.add, x)
        assert out.shape == x.shape and out.dtype == x.dtype
    x = np.array([2.5])
    assert pp.associative_scan(pp.add, x).tolist() == [2.5]
    assert pp.associative_scan(pp.add, x, exclusive=True).tolist() == [0.0]
    assert pp.associative_scan(lambda a, b: a + b, x).tolist() == [2.5]


def test_float16_runs_the_float32_kernel_and_keeps_its_dtype():
    # half precision is widened to float32 for the kernel (tests/associativity/test_half.py)
    x = np.linspace(0, 1, 50, dtype=np.float16)
    for method in ("auto", "tiled"):
        out = pp.associative_scan(pp.add, x, method=method)
        assert out.dtype == np.float16
        np.testing.assert_allclose(out, np.cumsum(x.astype(np.float64)), rtol=1e-3)


def test_distinct_lambda_monoids_get_distinct_kernels():
    x = np.arange(1, 6, dtype=np.int64)
    plus = pp.Monoid(lambda a, b: a + b, 0)
    times = pp.Monoid(lambda a, b: a * b, 1)
    assert pp.associative_scan(plus, x, method="tiled").tolist() == [1, 3, 6, 10, 15]
    assert pp.associative_scan(times, x, method="tiled").tolist() == [1, 2, 6, 24, 120]


def test_monoid_pickles_without_its_kernels():
    import pickle

    from propopt import _jit

    pp.associative_scan(pp.linear_recurrence, (np.ones(3), np.ones(3)))
    assert _jit.kernel_cache(pp.linear_recurrence, "cpu")  # compiled, kept beside it
    clone = pickle.loads(pickle.dumps(pp.linear_recurrence))
    assert clone.name == "linear_recurrence" and not any("kernel" in k for k in vars(clone))
    assert not _jit.kernel_cache(clone, "cpu")  # a copy compiles (or loads) its own
    got = pp.associative_scan(clone, (np.full(3, 0.5), np.ones(3)), method="tiled")[1]
    assert got.tolist() == [1.0, 1.5, 1.75]
