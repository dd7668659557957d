"""``associative_scan(..., out=)``: the result lands in the caller's arrays, unchanged.

Every case is compared with the same scan without ``out=`` (bit for bit: the
same kernels run) and with a float64 running sum written out here.
"""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, strategies as st

from propopt import add, associative_scan, linear_recurrence

torch = pytest.importorskip("torch")


def _cumsum64(x, axis=0, reverse=False):
    x = np.moveaxis(np.asarray(x, np.float64), axis, 0)
    if reverse:
        x = x[::-1]
    out, acc = np.empty_like(x), np.zeros(x.shape[1:])
    for i in range(x.shape[0]):
        acc = acc + x[i]
        out[i] = acc
    if reverse:
        out = out[::-1]
    return np.moveaxis(out, 0, axis)


@given(
    n=st.integers(0, 3000),
    cols=st.sampled_from([None, 1, 3]),
    reverse=st.booleans(),
    method=st.sampled_from(["auto", "tiled", "generic", "reference"]),
)
def test_out_equals_the_returned_result(n, cols, reverse, method):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n,) if cols is None else (n, cols)).astype(np.float32)
    want = associative_scan(add, x, reverse=reverse, method=method)
    out = np.full_like(x, np.nan)
    got = associative_scan(add, x, reverse=reverse, method=method, out=out)
    assert got is out
    np.testing.assert_array_equal(out, want)
    np.testing.assert_allclose(out, _cumsum64(x, reverse=reverse), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [False, True])
def test_pytree_torch_and_axes(axis, exclusive):
    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 1.0, (40, 300))
    b = rng.standard_normal((40, 300))
    want = associative_scan(linear_recurrence, (a, b), axis=axis, exclusive=exclusive)
    outs = (np.empty_like(a), np.empty_like(b))
    got = associative_scan(linear_recurrence, (a, b), axis=axis, exclusive=exclusive, out=outs)
    assert got[0] is outs[0] and got[1] is outs[1]
    for o, w in zip(outs, want):
        np.testing.assert_array_equal(o, w)
    t = torch.from_numpy(b.astype(np.float32))
    ot = torch.empty_like(t)
    assert associative_scan(add, t, axis=axis, out=ot) is ot
    torch.testing.assert_close(ot, associative_scan(add, t, axis=axis), rtol=0, atol=0)


def test_in_place_strided_half_segmented_and_masked():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(100_000).astype(np.float32)
    want = associative_scan(add, x)
    y = x.copy()
    assert associative_scan(add, y, out=y) is y  # in place, as np.cumsum(y, out=y)
    np.testing.assert_array_equal(y, want)
    big = np.full(2 * x.size, np.nan, np.float32)
    strided = big[::2]  # not contiguous: computed, then copied in
    associative_scan(add, x, out=strided)
    np.testing.assert_array_equal(strided, want)
    assert np.isnan(big[1::2]).all()  # the gaps are untouched
    h = torch.from_numpy(x[:5000]).to(torch.bfloat16)
    oh = torch.empty_like(h)
    associative_scan(add, h, out=oh)
    assert torch.equal(oh, associative_scan(add, h))
    starts = rng.random(x.size) < 0.01
    seg = np.empty_like(x)
    associative_scan(add, x, reset=starts, out=seg)
    np.testing.assert_array_equal(seg, associative_scan(add, x, reset=starts))
    m = np.ma.masked_array(x[:1000], mask=rng.random(1000) < 0.1)
    om = np.ma.empty_like(m)
    associative_scan(add, m, out=om)
    ref = associative_scan(add, m)
    np.testing.assert_array_equal(om.mask, ref.mask)
    np.testing.assert_array_equal(om.compressed(), ref.compressed())


def test_the_cpu_kernels_write_into_out_without_allocating():
    x = np.random.default_rng(3).standard_normal(1 << 21).astype(np.float32)  # 8 MiB
    out = np.empty_like(x)
    associative_scan(add, x, out=out)  # compile and warm up
    tracemalloc.start()
    try:
        associative_scan(add, x, out=out)
        _, peak = tracemalloc.get_traced_memory()
        associative_scan(add, x)
        _, peak_fresh = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < x.nbytes // 8, peak  # the kernels' per-thread carries, no result array
    assert peak_fresh >= x.nbytes  # the comparison: a fresh result is traced


@pytest.mark.parametrize(
    "out, match",
    [
        (np.empty(9, np.float32), "shape \\(9,\\)"),
        (np.empty(10, np.float64), "dtype float64"),
        ((np.empty(10, np.float32),), "structure of elems"),
        (torch.empty(10), "type and device of elems"),
        (np.empty(10, np.float32), None),
    ],
)
def test_bad_out_is_refused_with_the_fix(out, match):
    x = np.ones(10, np.float32)
    if match is None:  # a good one, for contrast
        assert associative_scan(add, x, out=out) is out
        return
    with pytest.raises((ValueError, TypeError), match=match):
        associative_scan(add, x, out=out)


def test_read_only_grad_and_dask_out_are_refused():
    x = np.ones(10, np.float32)
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        associative_scan(add, x, out=ro)
    t = torch.ones(10)
    with pytest.raises(ValueError, match="requires grad"):
        associative_scan(add, t, out=torch.empty(10, requires_grad=True))
    da = pytest.importorskip("dask.array")
    with pytest.raises(ValueError, match="dask"):
        associative_scan(add, da.ones(10, chunks=5), out=np.empty(10))


def _add_all(a, b):
    return {k: a[k] + b[k] for k in a} if isinstance(a, dict) else a + b


@pytest.mark.parametrize("tree", ["leaf", "dict"])
def test_out_with_inputs_that_require_grad_is_refused(tree):
    # torch.cumsum(out=) refuses too: the result written into out= has no gradient
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    elems = x if tree == "leaf" else {"a": x, "b": x.detach()}
    out = torch.empty(3) if tree == "leaf" else {"a": torch.empty(3), "b": torch.empty(3)}
    with pytest.raises(ValueError, match=r"out= .*requires grad.*drop out=") as info:
        associative_scan(_add_all, elems, out=out)
    assert "\n" not in str(info.value)
    with torch.no_grad():  # no gradient is recorded: out= is fine
        got = associative_scan(_add_all, elems, out=out)
    leaf = got if tree == "leaf" else got["a"]
    np.testing.assert_array_equal(leaf.numpy(), _cumsum64([1.0, 2.0, 3.0]))
