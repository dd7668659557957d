"""The CPU scan's in-block pass (the tree of _cpu_tile.py, the lanes of _cpu_lanes.py):
results at and across tile edges, and SIMD in the tree."""

import re

import numpy as np
import pytest

import propopt as pp
from propopt.associativity import _cpu

from .test_scan import RTOL, draw, reference

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
# products of many decays below one fall under the smallest normal, where the
# multiplicative monoids flush to zero and the float64 fold does not
TINY = {F32: 2 * float(np.finfo(np.float32).tiny), F64: 2 * float(np.finfo(np.float64).tiny)}


def _tile(m, dtype):
    size = np.dtype(dtype).itemsize
    return _cpu.tile_elements(m.arity, size, _cpu.tree_for(m, size))


def _lengths(m, dtype):
    t = _tile(m, dtype)
    return (t - 1, t, t + 1, 3 * t + 7)


def _params():
    fast = {("add", F32), ("linear_recurrence", F32), ("max", F64)}
    for m in (pp.add, pp.mul, pp.maximum, pp.minimum, pp.logaddexp, pp.linear_recurrence,
              pp.matmul2x2):  # fmt: skip
        for dt in (F32, F64):
            name = f"{m.name}-{dt.name}"
            if (m.name, dt) in fast:
                yield pytest.param(m, dt, ((False, False), (True, True)), id=name)
                yield pytest.param(
                    m, dt, ((False, True), (True, False)), id=name + "-mixed",
                    marks=pytest.mark.slow,
                )  # fmt: skip
            else:
                yield pytest.param(m, dt, ((False, False),), id=name, marks=pytest.mark.slow)


@pytest.mark.parametrize(("m", "dtype", "directions"), list(_params()))
def test_tiles_match_the_float64_fold(m, dtype, directions):
    """Lengths at and across tile edges, one thread (one block) and two (super-blocks)."""
    rng = np.random.default_rng(7)
    for n in _lengths(m, dtype):
        elems = draw(m, (n,), dtype, rng)
        for reverse, exclusive in directions:
            ref = reference(m, elems, reverse=reverse, exclusive=exclusive)
            block = _tile(m, dtype)
            for threads in (1, 2):
                with pp.set_num_threads(threads):
                    out = _cpu.scan(m, list(elems), 0, reverse, exclusive, block=block)
                for o, r in zip(out, ref):
                    what = f"{m.name} n={n} rev={reverse} excl={exclusive} threads={threads}"
                    np.testing.assert_allclose(
                        o, r, rtol=RTOL[dtype.type], atol=TINY[dtype], err_msg=what
                    )


def test_tiles_carry_nan_and_inf_where_the_fold_does():
    """A NaN, an inf and a zero decay deep inside a tile and on a tile edge."""
    n = 3 * _cpu.tile_elements(2, 4) + 5
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 1.0, n).astype(np.float32)
    b = rng.uniform(0.0, 1.0, n).astype(np.float32)
    a[700], b[1500], a[2048], b[4096] = 0.0, np.inf, np.nan, -np.inf
    got = pp.associative_scan(pp.linear_recurrence, (a, b))
    want = reference(pp.linear_recurrence, (a, b))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.isinf(g), np.isinf(w))
        ok = np.isfinite(w)
        np.testing.assert_allclose(g[ok], w[ok], rtol=RTOL[np.float32], atol=TINY[F32])
    x = rng.uniform(-1, 1, n).astype(np.float32)
    x[3000] = np.nan
    got = pp.associative_scan(pp.maximum, x)
    assert np.isnan(got[3000:]).all() and not np.isnan(got[:3000]).any()


def _avx2() -> bool:
    import llvmlite.binding as llvm

    return "+avx2" in llvm.get_host_cpu_features().flatten().split(",")


@pytest.mark.skipif(not _avx2(), reason="the host has no AVX2")
@pytest.mark.parametrize(
    ("m", "dtype", "op"),
    [
        (pp.add, F32, r"vaddps"),
        (pp.mul, F32, r"vmulps"),
        (pp.linear_recurrence, F32, r"vfn?m(add|sub)\d*ps|vmulps"),
        (pp.maximum, F32, r"vmaxps|vcmp\w*ps"),
        (pp.logaddexp, F32, r"vdivps"),  # propopt.vmath's softplus, no libm call
    ],
    ids=[
        "add-float32",
        "mul-float32",
        "linear_recurrence-float32",
        "max-float32",
        "logaddexp-float32",
    ],
)
def test_the_block_kernel_combines_whole_vectors(m, dtype, op):
    """The in-block scan's combine runs on 256-bit (ymm) registers, not one scalar at a time."""
    mod = _cpu.inspectable(m, dtype, tree=True)
    n = 3 * _cpu.tile_elements(m.arity, dtype.itemsize, True)
    elems = draw(m, (n,), dtype, np.random.default_rng(0))
    outs = [np.empty(n, dtype) for _ in elems]
    ident = _cpu.identity(m, dtype)
    N = np.int64(n)
    mod._block(*elems, *outs, np.int64(0), N, N, False, False, *ident, *ident, True)
    asm = mod._block.inspect_asm(mod._block.signatures[0])
    assert not re.search(r"\$(expf?|log1pf?)\b", asm), "a libm call is left in the kernel"
    vector = [line for line in asm.splitlines() if re.search(op, line) and "%ymm" in line]
    assert len(vector) >= 4, f"no {op} on ymm registers in {m.name} {dtype.name}'s _block"
    np.testing.assert_allclose(outs[-1], reference(m, elems)[-1], rtol=RTOL[dtype.type])


def test_the_tree_serves_dear_combines():
    """Plain arithmetic keeps the lanes, with h alone too (A kept a tile at a time); a
    combine that calls a function or compares, the tree."""
    for m in (pp.add, pp.mul, pp.linear_recurrence, pp.matmul2x2):
        assert not _cpu.tree_for(m, 4), m.name
    for m in (pp.logaddexp, pp.maximum, pp.minimum):
        assert _cpu.tree_for(m, 4), m.name
        assert not _cpu.tree_for(m, 8), m.name
    assert not _cpu.tree_for(pp.maximum, 4, kind="i")  # int32: no NaN to test, the lanes
    assert not _cpu.tree_for(pp.linear_recurrence, 4, keep=(1,))  # propopt.recurrence
    assert not _cpu.tree_for(pp.logaddexp, 8)  # 8-byte elements: the lanes
    import math

    dear = pp.Monoid(lambda x, y: math.log(math.exp(x) + math.exp(y)), -math.inf)
    assert _cpu.tree_for(dear, 4)
    x = np.random.default_rng(1).uniform(-3, 3, 5000).astype(np.float32)
    got = pp.associative_scan(dear, x)
    want = np.logaddexp.accumulate(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-5)
