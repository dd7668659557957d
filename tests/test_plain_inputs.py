"""Every verb that takes points, weights or matrices reads bfloat16, big-endian
and ndarray-subclass inputs as their values, and refuses masked arrays."""

import numpy as np
import pytest

import propopt as pp

ml_dtypes = pytest.importorskip("ml_dtypes")

RNG = np.random.default_rng(7)
X = RNG.uniform(size=(40, 3))


def gravity64(pos, mass, eps):
    """Plain float64 Plummer-softened accelerations, pair by pair."""
    acc = np.zeros_like(pos)
    for i in range(len(pos)):
        for j in range(len(pos)):
            if i != j:
                d = pos[j] - pos[i]
                acc[i] += mass[j] * d / (d @ d + eps * eps) ** 1.5
    return acc


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.dtype(">f8"), np.dtype(">f4")])
def test_gravity_reads_the_values(dtype):
    pos = X.astype(dtype)
    exact = gravity64(pos.astype(np.float64), np.ones(40), 0.1)
    acc, _ = pp.direct_gravity(pos, np.ones(40, dtype=dtype), eps=0.1)
    tol = 1e-4 if np.dtype(dtype).itemsize >= 4 else 1e-5  # float32 paths, exact inputs
    assert np.abs(acc - exact).max() <= tol * np.abs(exact).max() * 50


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.dtype(">f8")])
def test_morton_order_reads_the_values(dtype):
    pos = X.astype(dtype)
    assert pp.morton_order(pos).tolist() == pp.morton_order(pos.astype(np.float64)).tolist()


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.dtype(">f8")])
def test_low_rank_factors_half_and_big_endian(dtype):
    A = RNG.normal(size=(50, 4)) @ RNG.normal(size=(4, 30))
    M = A.astype(dtype)
    r = pp.low_rank(M, rank=4)
    assert r.U.dtype in (np.float32, np.float64)
    M64 = M.astype(np.float64)
    U, s, Vt = np.linalg.svd(M64)
    best = np.linalg.norm((U[:, :4] * s[:4]) @ Vt[:4] - M64, 2)  # Eckart-Young
    err = np.linalg.norm((r.U * r.s) @ r.Vt - M64, 2)
    # the rounded input is not of rank 4: measured against the best rank-4 error of
    # the same values, plus float32 rounding of the factors
    assert err <= 1.5 * best + 1e-5 * s[0]


def test_low_rank_refuses_grad():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"M requires grad.*M\.detach\(\)"):
        pp.low_rank(torch.ones(5, 4, requires_grad=True), rank=1)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: pp.direct_gravity(m, np.ones(40), eps=0.1),
        lambda m: pp.direct_gravity(X, np.ma.array(np.ones(40)), eps=0.1),
        lambda m: pp.morton_order(m),
        lambda m: pp.moments(m, np.ones(40)),
        lambda m: pp.low_rank(m, rank=2),
        lambda m: pp.pairwise_sum(lambda a, b: 1.0, m),
    ],
)
def test_masked_arrays_refused(call):
    with pytest.raises(TypeError, match=r"is a masked array.*filled"):
        call(np.ma.array(X, mask=np.zeros_like(X, dtype=bool)))


def test_pair_kernel_numba_cannot_type_is_one_line():
    def wobbly(xi, xj):
        if xi[0] > xj[0]:
            return (1.0, 2.0)
        return 1.0

    with pytest.raises(TypeError) as err:
        pp.pairwise_sum(wobbly, X[:10])
    msg = str(err.value)
    assert "\n" not in msg
    assert "kernel='wobbly' could not be compiled by numba (Can't unify return type" in msg


def test_real():
    from propopt.arrays import real

    for v in (2, 2.0, np.int8(2), np.float32(2), np.array(2), np.array(2.0, ">f8")):
        assert real("x", v) == 2.0 and type(real("x", v)) is float
    assert np.isnan(real("x", np.nan))  # finiteness is the caller's to check
    for bad, msg in (
        (True, r"x=True: must be a real number, not a bool"),
        (np.array(False), r"x=array\(False\): must be a real number, not a bool"),
        ("1", r"x='1': must be a real number \(an int or a float\), got str"),
        (1j, r"x=1j: must be a real number .*, got complex"),
        (np.complex64(1), r"x=.*: must be a real number .*, got dtype complex64"),
        (np.ones(2), r"x=.*: must be a real number .*, got an array of shape \(2,\)"),
        (None, r"x=None: must be a real number .*, got NoneType"),
    ):
        with pytest.raises(TypeError, match=f"^{msg}"):
            real("x", bad)
    with pytest.raises(ValueError, match=r"^x=100000000000\.\.\. \(401 digits\): too large"):
        real("x", 10**400)


def test_flag_generator_inexact():
    from propopt.arrays import flag, generator, inexact

    assert flag("x", np.True_) is True and flag("x", np.array(False)) is False
    for bad in ("no", 1, None):
        with pytest.raises(TypeError, match=r"x=.*must be True or False"):
            flag("x", bad)
    g = np.random.default_rng(0)
    assert generator("seed", g) is g
    assert generator("seed", 3).integers(100) == np.random.default_rng(3).integers(100)
    with pytest.raises(ValueError, match="seed=-1"):
        generator("seed", -1)
    with pytest.raises(TypeError, match=r"seed=1\.5"):
        generator("seed", 1.5)
    assert inexact(np.array([1, 2**53, 2**53 + 1]), np.float64) == 2
    assert inexact(np.array([-(2**63), 2**53]), np.float64) is None
    assert inexact(np.array([2**64 - 1], np.uint64), np.float64) == 0
    assert inexact(np.array([2**24 + 1], np.int32), np.float32) == 0
    assert inexact(np.arange(100, dtype=np.int8), np.float16) is None
    assert inexact(np.array([1.5]), np.float32) is None


def test_long_double_points_keep_float64_precision():
    # float16 and bfloat16 widen to float32; a wider float (longdouble) narrows to
    # float64, never to float32
    pos = (X * (1 + 1e-12)).astype(np.longdouble)
    acc, _ = pp.direct_gravity(pos, np.ones(40), eps=0.1)
    assert acc.dtype == np.float64
    np.testing.assert_allclose(acc, gravity64(pos.astype(np.float64), np.ones(40), 0.1), rtol=1e-12)
