"""pairwise_sum: halving equals the full double loop, on every path and thread count."""

import math

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from propopt import pairwise_sum
from propopt.symmetry import SYMMETRIES

# Each output is a sum of n terms of size O(1) in float64: rounding differs between
# groupings by a few ulps times n; 1e-10 relative to the sum of magnitudes is ample.
RTOL64 = 1e-10
# float32 kernels evaluated in float32, summed in float64: ~1e-7 per term.
RTOL32 = 1e-5


def soft_inverse(xi, xj):
    """Symmetric scalar: 1 / sqrt(1 + r^2)."""
    s = 1.0
    for c in range(len(xi)):
        d = xi[c] - xj[c]
        s += d * d
    return 1.0 / math.sqrt(s)


def spring_2d(xi, xj, k):
    """Antisymmetric pull (first two components) and symmetric energy (third)."""
    dx = xj[0] - xi[0]
    dy = xj[1] - xi[1]
    return k * dx, k * dy, 0.5 * k * (dx * dx + dy * dy)


SPRING = ("antisymmetric", "antisymmetric", "symmetric")


def close(a, b, rtol=RTOL64, scale=None):
    s = np.abs(b).max(initial=0.0) if scale is None else scale
    return np.allclose(a, b, rtol=0, atol=rtol * max(s, 1.0))


@pytest.mark.parametrize("method", ["halved", "full", "untiled"])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 64, 65, 129])
def test_matches_double_loop(method, n):
    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, 3))
    w = rng.uniform(0.5, 2, n)
    ref = pairwise_sum(soft_inverse, X, w, method="reference")
    for tile in (1, 2, 5, 64):
        got = pairwise_sum(soft_inverse, X, w, method=method, tile=tile)
        assert got.shape == (n,) and close(got, ref)


def test_reference_is_the_double_loop():
    X = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]])
    ref = pairwise_sum(soft_inverse, X, np.array([1.0, 2.0, 3.0]), method="reference")
    d01, d02, d12 = 1 / math.sqrt(26), 1 / math.sqrt(2), 1 / math.sqrt(19)
    assert np.allclose(ref, [2 * d01 + 3 * d02, d01 + 3 * d12, d02 + 2 * d12])


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_count_does_not_matter(threads):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(301, 2))
    w = rng.uniform(0.5, 2, 301)
    ref = pairwise_sum(spring_2d, X, w, symmetry=SPRING, args=(0.3,), method="reference")
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(threads)
        got = pairwise_sum(spring_2d, X, w, symmetry=SPRING, args=(0.3,), tile=16)
    finally:
        numba.set_num_threads(old)
    assert got.shape == (301, 3) and close(got, ref)


def test_antisymmetric_sums_conserve():
    """sum_i w_i out_i = sum_{i != j} w_i w_j f(i, j) = 0 for an antisymmetric f."""
    rng = np.random.default_rng(2)
    X, w = rng.normal(size=(200, 2)), rng.uniform(0.5, 2, 200)
    out = pairwise_sum(spring_2d, X, w, symmetry=SPRING, args=(1.0,))
    total = (w[:, None] * out[:, :2]).sum(axis=0)
    assert np.abs(total).max() < 1e-9 * np.abs(w[:, None] * out[:, :2]).sum()


def test_wrong_symmetry_gives_wrong_sums():
    """The law is not checked: declaring the spring symmetric breaks the halved sum."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 2))
    right = pairwise_sum(spring_2d, X, symmetry=SPRING, args=(1.0,), method="reference")
    wrong = pairwise_sum(spring_2d, X, symmetry="symmetric", args=(1.0,))
    assert not close(wrong[:, 0], right[:, 0], rtol=1e-3)
    assert close(wrong[:, 2], right[:, 2])


def test_float32_in_float32_out():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(100, 3)).astype(np.float32)
    got = pairwise_sum(soft_inverse, X)
    ref = pairwise_sum(soft_inverse, X.astype(np.float64), method="reference")
    assert got.dtype == np.float32 and close(got, ref, RTOL32)
    assert pairwise_sum(soft_inverse, np.arange(6).reshape(2, 3)).dtype == np.float64


def test_targets_use_every_source():
    rng = np.random.default_rng(5)
    X, T = rng.normal(size=(50, 3)), rng.normal(size=(9, 3))
    w = rng.uniform(0.5, 2, 50)
    got = pairwise_sum(soft_inverse, X, w, targets=T)
    want = np.array([sum(w[j] * soft_inverse(t, X[j]) for j in range(50)) for t in T])
    assert close(got, want)
    assert pairwise_sum(soft_inverse, X, targets=T[:0]).shape == (0,)
    assert np.array_equal(pairwise_sum(soft_inverse, X[:0], targets=T), np.zeros(9))


def test_lambda_and_njit_kernels():
    X = np.random.default_rng(6).normal(size=(20, 1))
    ref = pairwise_sum(soft_inverse, X, method="reference")
    assert close(pairwise_sum(lambda a, b: 1.0 / math.sqrt(1.0 + (a[0] - b[0]) ** 2), X), ref)
    assert close(pairwise_sum(numba.njit(soft_inverse), X), ref)


@settings(max_examples=15)
@given(
    hnp.arrays(
        np.float64, st.tuples(st.integers(0, 40), st.just(2)), elements=st.floats(-1e3, 1e3)
    ),
    st.integers(1, 9),
)
def test_halving_law_hypothesis(X, tile):
    out = pairwise_sum(spring_2d, X, symmetry=SPRING, args=(0.5,), tile=tile)
    ref = pairwise_sum(spring_2d, X, symmetry=SPRING, args=(0.5,), method="reference")
    scale = 0.5 * (np.abs(X).max(initial=1.0) * 2) ** 2 * max(len(X), 1)
    assert close(out, ref, scale=scale)


# ------------------------------------------------------------------ bad input
def test_errors():
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match=r"X\[2\] = \[0.0, nan\] is not finite"):
        pairwise_sum(soft_inverse, np.array([[0, 0], [1, 1], [0, np.nan], [2, 2]], float))
    with pytest.raises(ValueError, match=r"X has shape \(4,\): must be \(n, d\) points"):
        pairwise_sum(soft_inverse, np.zeros(4))
    with pytest.raises(ValueError, match=r"symmetry='even' is not one of 'symmetric', 'anti"):
        pairwise_sum(soft_inverse, X, symmetry="even")
    with pytest.raises(ValueError, match="symmetry has 2 entries but the kernel returns 3"):
        pairwise_sum(spring_2d, X, symmetry=SPRING[:2], args=(1.0,))
    with pytest.raises(ValueError, match="method='fast' is not one of 'auto'"):
        pairwise_sum(soft_inverse, X, method="fast")
    with pytest.raises(ValueError, match=r"tile=0: must be an int >= 1"):
        pairwise_sum(soft_inverse, X, tile=0)
    with pytest.raises(ValueError, match=r"weights has shape \(3,\): must be a scalar or \(4,\)"):
        pairwise_sum(soft_inverse, X, np.ones(3))
    with pytest.raises(ValueError, match=r"weights\[1\] = inf: weights must be finite"):
        pairwise_sum(soft_inverse, X, np.array([1, np.inf, 1, 1]))
    with pytest.raises(ValueError, match=r"targets has shape \(2, 3\): must be \(n, 2\)"):
        pairwise_sum(soft_inverse, X, targets=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="method='halved' needs the pairs of one point set"):
        pairwise_sum(soft_inverse, X, targets=X, method="halved")
    with pytest.raises(TypeError, match="must return a float or a tuple of floats"):
        pairwise_sum(lambda a, b: np.zeros(2), X)
    with pytest.raises(TypeError, match="kernel=3 is not callable"):
        pairwise_sum(3, X)
    with pytest.raises(TypeError, match=r"args=1\.0: must be a tuple"):
        pairwise_sum(spring_2d, X, args=1.0)
    assert SYMMETRIES == ("symmetric", "antisymmetric")


def test_algorithm_and_device_are_chosen_apart():
    from propopt.symmetry import pairs

    # 3-D points: the kernels test_matches_double_loop compiles serve here too
    X = np.random.default_rng(0).normal(size=(6, 3))
    with pytest.raises(ValueError, match="device='gpu' is not one of 'auto', 'cpu', 'cuda'"):
        pairwise_sum(soft_inverse, X, device="gpu")
    with pytest.raises(ValueError, match="method='cuda' is not one of"):
        pairwise_sum(soft_inverse, X, method="cuda")
    with pytest.raises(ValueError, match="'untiled' runs on device 'cpu', not device='cuda'"):
        pairwise_sum(soft_inverse, X, method="untiled", device="cuda")
    with pytest.raises(ValueError, match="device='cuda' halves the pairs of one point set"):
        pairwise_sum(soft_inverse, X, method="full", device="cuda")
    # every algorithm that runs on the CPU gives the reference's sums
    want = pairwise_sum(soft_inverse, X, method="reference")
    for (method, device), backend in pairs.BACKENDS.items():
        assert callable(backend.run) and callable(backend.refuse)
        if device == "cpu":
            got = pairwise_sum(soft_inverse, X, method=method, device="cpu")
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_read_only_weights_reuse_the_compiled_driver():
    """Read-only weights (a Dask chunk, a pandas column) run the driver already
    compiled for writeable ones (propopt.arrays.frozen)."""
    from propopt import _jit

    rng = np.random.default_rng(5)
    X = rng.normal(size=(50, 3))
    w = rng.uniform(0.5, 2, 50)
    want = pairwise_sum(soft_inverse, X, w, method="halved")
    found = [getattr(m, "halved", None) for m in _jit._loaded.values()]
    drivers = [d for d in found if hasattr(d, "signatures")]  # the CPU drivers (not CUDA's)
    before = [len(d.signatures) for d in drivers]
    assert sum(before) >= 1
    ro = w.copy()
    ro.flags.writeable = False
    assert close(pairwise_sum(soft_inverse, X, ro, method="halved"), want)
    assert [len(d.signatures) for d in drivers] == before
