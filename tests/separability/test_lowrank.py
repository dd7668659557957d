"""low_rank: errors within tolerance on matrices with known spectra, against the optimal SVD."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from propopt import low_rank
from propopt.separability import LowRank, MatvecOperator
from propopt.separability._reference import best_rank_k

# float64: the factorization of an exactly rank-k matrix is exact up to a few
# hundred ulps of ||M|| (QR, SVD and two products, each backward stable).
EXACT_RTOL64 = 1e-10
# Fixed rank with two power iterations on geometric spectra: within 1.5x of
# the optimum sigma_{k+1} (Halko et al. Thm 10.6 with q = 2 gives a factor
# close to 1 when sigma_{k+1}/sigma_k <= 0.7, as here).
NEAR_OPTIMAL = 1.5


def known(m, n, s, seed=0):
    """``U diag(s) V^T`` with random orthonormal U (m x r) and V (n x r)."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.normal(size=(m, len(s))))[0]
    V = np.linalg.qr(rng.normal(size=(n, len(s))))[0]
    return (U * s) @ V.T


def spec_err(M, L):
    return np.linalg.norm(M - L.to_dense(), 2)


@pytest.mark.parametrize("shape", [(120, 80), (80, 120), (64, 64)])
def test_fixed_rank_near_optimal(shape):
    s = np.geomspace(1, 1e-8, 50)
    M = known(*shape, s)
    for k in (1, 5, 20):
        L = low_rank(M, rank=k)
        assert L.rank == k and L.U.shape == (shape[0], k) and L.Vt.shape == (k, shape[1])
        opt = np.linalg.norm(M - best_rank_k(M, k), 2)
        assert np.isclose(opt, s[k])
        assert spec_err(M, L) <= NEAR_OPTIMAL * opt
        # the a-posteriori estimate is an upper bound (probability 1 - 1e-10)
        assert spec_err(M, L) <= L.error_estimate
        assert np.all(np.diff(L.s) <= 0)
        assert np.allclose(L.U.T @ L.U, np.eye(k), atol=1e-12)
        assert np.allclose(L.Vt @ L.Vt.T, np.eye(k), atol=1e-12)


@pytest.mark.parametrize("rtol", [1e-2, 1e-5, 1e-9])
def test_tolerance_met_with_near_minimal_rank(rtol):
    s = np.geomspace(1, 1e-13, 70)
    M = known(200, 150, s)
    L = low_rank(M, rtol=rtol)
    assert spec_err(M, L) <= rtol * s[0]
    assert spec_err(M, L) <= L.error_estimate
    need = int(np.count_nonzero(s > rtol))  # the optimal rank for this tolerance
    assert need <= L.rank <= need + 3


def test_exact_low_rank_is_recovered_and_the_estimate_is_tiny():
    rng = np.random.default_rng(1)
    M = rng.normal(size=(90, 6)) @ rng.normal(size=(6, 70))
    for L in (low_rank(M, rank=6), low_rank(M, rtol=1e-9)):
        assert L.rank == 6
        assert np.allclose(L.to_dense(), M, rtol=0, atol=EXACT_RTOL64 * np.abs(M).max())
        assert L.rel_error_estimate < 1e-10
    x, y = rng.normal(size=70), rng.normal(size=(90, 3))
    assert np.allclose(L @ x, M @ x)
    assert np.allclose(L @ x[:, None], (M @ x)[:, None])
    assert np.allclose(y.T @ L, y.T @ M)
    assert np.allclose(L.T.to_dense(), M.T) and L.T.shape == (70, 90)
    assert "rank=6" in repr(L)


def test_rank_cap_with_tolerance():
    M = known(100, 100, np.geomspace(1, 1e-12, 60))
    L = low_rank(M, rank=7, rtol=1e-10)
    assert L.rank == 7


def test_full_rank_and_zero_matrix():
    rng = np.random.default_rng(2)
    M = rng.normal(size=(30, 12))
    L = low_rank(M, rank=12)
    assert np.allclose(L.to_dense(), M)
    Z = low_rank(np.zeros((20, 10)), rtol=1e-3)
    assert Z.rank == 0 and Z.error_estimate == 0.0 and np.all(Z.to_dense() == 0)


def test_operator_given_only_by_products():
    M = known(150, 110, np.geomspace(1, 1e-10, 40), seed=3)
    calls = []

    def mv(x):
        calls.append(x.shape)
        return M @ x

    op = MatvecOperator(M.shape, mv, lambda y: M.T @ y)
    L = low_rank(op, rtol=1e-6)
    assert spec_err(M, L) <= 1e-6
    assert np.allclose(low_rank(op, rank=8).to_dense(), low_rank(M, rank=8).to_dense())
    assert all(len(c) == 2 for c in calls)  # blocks of vectors, never one at a time


def test_scipy_linear_operator():
    spla = pytest.importorskip("scipy.sparse.linalg")
    M = known(60, 50, np.geomspace(1, 1e-6, 20), seed=4)
    L = low_rank(spla.aslinearoperator(M), rank=10)
    assert spec_err(M, L) <= NEAR_OPTIMAL * np.linalg.svd(M, compute_uv=False)[10]


def test_float32_and_int_inputs():
    M = known(80, 60, np.geomspace(1, 1e-3, 10), seed=5)
    L = low_rank(M.astype(np.float32), rank=10)
    assert L.U.dtype == np.float32
    assert spec_err(M, L) < 1e-5  # float32 rounding of a unit-norm matrix
    Li = low_rank(np.arange(12).reshape(4, 3), rank=2)
    assert Li.U.dtype == np.float64
    assert np.allclose(Li.to_dense(), np.arange(12).reshape(4, 3))  # rank 2 exactly


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    M = known(70, 50, np.geomspace(1, 1e-9, 30), seed=6)
    Mt = torch.from_numpy(M)
    L = low_rank(Mt, rtol=1e-6)
    assert isinstance(L.U, torch.Tensor) and isinstance(L.to_dense(), torch.Tensor)
    assert float(torch.linalg.matrix_norm(Mt - L.to_dense(), 2)) <= 1e-6
    ref = low_rank(M, rtol=1e-6)
    assert L.rank == ref.rank and np.allclose(L.s.numpy(), ref.s)
    x = torch.randn(50, dtype=torch.float64)
    assert torch.allclose(L @ x, Mt @ x, atol=1e-6)
    L32 = low_rank(Mt.float(), rank=5)
    assert L32.U.dtype == torch.float32


def test_deterministic_by_seed():
    M = known(50, 40, np.geomspace(1, 1e-4, 20))
    a, b = low_rank(M, rank=5, seed=7), low_rank(M, rank=5, seed=7)
    assert np.array_equal(a.s, b.s)


@settings(max_examples=20)
@given(
    m=st.integers(2, 40),
    n=st.integers(2, 40),
    r=st.integers(1, 8),
    decay=st.floats(0.05, 0.8),
    seed=st.integers(0, 2**16),
)
def test_hypothesis_fixed_rank_within_factor_of_optimum(m, n, r, decay, seed):
    k = min(m, n)
    s = decay ** np.arange(k)
    M = known(m, n, s, seed)
    r = min(r, k)
    L = low_rank(M, rank=r, seed=seed)
    opt = s[r] if r < k else 0.0
    # with oversampling 10 and q = 2 the basis holds the top r + p directions
    assert spec_err(M, L) <= NEAR_OPTIMAL * opt + 1e-12


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(), "needs rank=k"),
        (dict(rank=0), r"rank=0: must satisfy 1 <= rank <= min\(m, n\) = 5"),
        (dict(rank=6), r"rank=6: must satisfy 1 <= rank <= min\(m, n\) = 5"),
        (dict(rtol=0.0), r"rtol=0.0: must lie in the open interval \(0, 1\)"),
        (dict(rtol=1.0), r"rtol=1.0: must lie in the open interval"),
        (dict(rtol=float("nan")), r"rtol=nan"),
        (dict(rank=2, oversample=-1), "oversample=-1: must be an int >= 0"),
        (dict(rank=2, power_iters=1.5), "power_iters=1.5: must be an int >= 0"),
        (dict(rtol=0.1, block=0), "block=0: must be an int >= 1"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        low_rank(np.ones((5, 7)), **kwargs)


def test_bad_inputs():
    with pytest.raises(TypeError, match=r"rtol='1e-3': must be a number in \(0, 1\)"):
        low_rank(np.ones((4, 4)), rtol="1e-3")
    with pytest.raises(TypeError, match=r"rank=2\.0: must be an int"):
        low_rank(np.ones((5, 7)), rank=2.0)
    with pytest.raises(ValueError, match=r"M.ndim=3: M must be a 2-D matrix"):
        low_rank(np.ones((2, 3, 4)), rank=1)
    with pytest.raises(ValueError, match=r"M.ndim=1"):
        low_rank(np.ones(4), rank=1)
    M = np.ones((4, 5))
    M[2, 3] = np.nan
    with pytest.raises(ValueError, match=r"M\[2, 3\] is not finite"):
        low_rank(M, rank=1)
    M[2, 3] = np.inf
    with pytest.raises(ValueError, match=r"M\[2, 3\] is not finite"):
        low_rank(M, rtol=0.1)
    with pytest.raises(TypeError, match="real numeric"):
        low_rank(np.ones((3, 3), dtype=complex), rank=1)
    op = MatvecOperator((4, 4), lambda x: np.full((4, x.shape[1]), np.nan), lambda y: y)
    with pytest.raises(ValueError, match="M @ x returned non-finite values"):
        low_rank(op, rank=2)
    with pytest.raises(ValueError, match=r"shape=\(4,\): must be"):
        MatvecOperator((4,), lambda x: x, lambda y: y)
    L = low_rank(np.eye(4), rank=2)
    with pytest.raises(ValueError, match="x has 3 rows, L has 4 columns"):
        L @ np.ones(3)
    assert isinstance(L, LowRank)


@settings(max_examples=20)
@given(
    m=st.integers(1, 60),
    n=st.integers(1, 60),
    decay=st.floats(0.01, 0.9),
    rtol=st.floats(1e-10, 0.5),
    seed=st.integers(0, 2**16),
)
def test_hypothesis_tolerance_is_met(m, n, decay, rtol, seed):
    s = decay ** np.arange(min(m, n))
    M = known(m, n, s, seed)
    L = low_rank(M, rtol=rtol, block=4, seed=seed)
    assert spec_err(M, L) <= rtol * s[0]
    # truncation at rtol/2 of the top singular value of Q^T M (<= s[0], close to it)
    assert L.rank <= int(np.count_nonzero(s > rtol / 4))


def test_complex_torch_is_refused_like_complex_numpy():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"M\.dtype=torch\.complex128: low_rank takes real"):
        low_rank(torch.ones((3, 3), dtype=torch.complex128), rank=1)


@pytest.mark.parametrize("seed", ["abc", -1, 1.5])
def test_bad_seed_names_seed(seed):
    with pytest.raises((TypeError, ValueError), match=r"^seed="):
        low_rank(np.eye(4), rank=2, seed=seed)


def test_operator_of_the_wrong_shape_names_matvec():
    op = MatvecOperator((5, 4), lambda x: np.ones(3), lambda y: y)
    with pytest.raises(ValueError, match=r"M.matvec returned shape \(3,\) for x of shape \(4, "):
        low_rank(op, rank=2)


def test_products_with_lists():
    M = np.arange(12.0).reshape(3, 4)
    L = low_rank(M, rank=2)
    assert np.allclose(L @ [1.0, 2.0, 3.0, 4.0], M @ np.arange(1.0, 5.0))
    assert np.allclose([1.0, 0.0, 2.0] @ L, np.array([1.0, 0.0, 2.0]) @ M)
    with pytest.raises(ValueError, match="L @ x: x has shape"):
        L @ 3.0
