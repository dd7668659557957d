"""CUDA kernels, run in numba's CUDA simulator on the CPU (or on a real GPU
when NUMBA_ENABLE_CUDASIM=0 and one is present).

Small tiles (8 threads x 2 items) make a few dozen elements span several
tiles and the recursive carry scan, so multi-block logic is exercised at
sizes the simulator can run.
"""

import numpy as np
import pytest

import propopt as pp
from propopt.associativity.scan import _cuda

cuda = pytest.importorskip("numba.cuda")

CASES = [((1,), 0), ((16,), 0), ((70,), 0), ((3, 37, 2), 1), ((2, 21), -1)]


# The simulator runs each case in 8-12 s: the default set keeps every
# direction for `add` and the plain direction for the others; -m slow runs all.
_SIM_CASES = [
    pytest.param(
        m,
        reverse,
        exclusive,
        id=f"{m.name}-rev{reverse}-excl{exclusive}",
        marks=() if m is pp.add or not (reverse or exclusive) else pytest.mark.slow,
    )
    for m in (pp.add, pp.linear_recurrence, pp.matmul2x2)
    for reverse in (False, True)
    for exclusive in (False, True)
]


@pytest.mark.parametrize(("m", "reverse", "exclusive"), _SIM_CASES)
def test_cuda_matches_reference(m, reverse, exclusive):
    rng = np.random.default_rng(11)
    with _cuda.tiles(threads=8, items=2):
        for shape, axis in CASES:
            elems = [rng.uniform(0.45, 0.55, shape) for _ in range(m.arity)]
            kw = dict(axis=axis, reverse=reverse, exclusive=exclusive)
            ref = pp.associative_scan(m, elems, method="reference", **kw)
            out = pp.associative_scan(m, [cuda.to_device(e) for e in elems], **kw)
            for o, r in zip(out, ref):
                np.testing.assert_allclose(o.copy_to_host(), r, rtol=1e-12, err_msg=f"{shape} {kw}")


def test_cuda_tile_shape_does_not_change_results():
    rng = np.random.default_rng(12)
    a, b = rng.uniform(0.9, 1, 90), rng.normal(size=90)
    ref = pp.associative_scan(pp.linear_recurrence, (a, b), method="reference")
    for threads, items in ((4, 1), (8, 3), (32, 4)):
        with _cuda.tiles(threads=threads, items=items):
            out = pp.associative_scan(pp.linear_recurrence, (cuda.to_device(a), cuda.to_device(b)))
        np.testing.assert_allclose(out[1].copy_to_host(), ref[1], rtol=1e-12, atol=1e-14)


def test_cuda_float32_max_with_nan_and_integers():
    x = np.array([1, 5, 2, np.nan, 3, 9], np.float32)
    with _cuda.tiles(threads=4, items=1):
        out = pp.associative_scan(pp.maximum, cuda.to_device(x)).copy_to_host()
        np.testing.assert_array_equal(out, np.maximum.accumulate(x))
        xi = np.arange(-7, 20, dtype=np.int32)
        out = pp.associative_scan(pp.add, cuda.to_device(xi), exclusive=True).copy_to_host()
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, np.concatenate([[0], np.cumsum(xi)[:-1]]))


def test_plain_callable_refused_on_device_arrays():
    with pytest.raises(ValueError, match="plain callable fn cannot run on CUDA device arrays"):
        pp.associative_scan(lambda a, b: a + b, cuda.to_device(np.ones(3)))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
def test_cuda_never_combines_the_identity_into_an_element(reverse, exclusive):
    # (1, 0) . (inf, b) = (inf, inf * 0 + b) = (inf, nan): an inf coefficient in the
    # first element, or a NaN in the middle, must give what the sequential fold gives
    n = 37  # three tiles of 16 and a ragged end
    rng = np.random.default_rng(5)
    a, b = rng.uniform(0.5, 1.0, n), rng.normal(size=n)
    a[n - 1 if reverse else 0] = np.inf
    a[20] = np.nan
    order = range(n - 1, -1, -1) if reverse else range(n)
    want, h = np.empty(n), None
    for i in order:  # h_i = a_i h_{i-1} + b_i from the first element's b
        if exclusive:
            want[i] = 0.0 if h is None else h
        h = b[i] if h is None else a[i] * h + b[i]
        if not exclusive:
            want[i] = h
    with _cuda.tiles(threads=8, items=2):
        out = pp.associative_scan(
            pp.linear_recurrence,
            (cuda.to_device(a), cuda.to_device(b)),
            method="tiled",
            reverse=reverse,
            exclusive=exclusive,
        )[1].copy_to_host()
    assert np.array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_allclose(out[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-12)
