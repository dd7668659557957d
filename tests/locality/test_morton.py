"""Morton keys against a pure-Python bit interleave; order, locality, octree digits."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from propopt import morton_keys, morton_order
from propopt.locality import (
    MORTON_BITS,
    bounding_box,
    morton_cells,
    morton_decode,
    morton_digits,
)


def ref_keys(points, box):
    """Quantize in float64 exactly as documented, then interleave bit by bit with Python ints."""
    lo, hi = (np.asarray(b, np.float64) for b in box)
    p = np.asarray(points).astype(np.float64)
    dim = p.shape[1]
    bits = MORTON_BITS[dim]
    scale = np.float64(2.0**bits) / (hi - lo)
    q = np.clip(((p - lo) * scale).astype(np.int64), 0, 2**bits - 1)
    keys = []
    for row in q:
        k = 0
        for m in range(bits):
            for a in range(dim):
                k |= ((int(row[a]) >> m) & 1) << (dim * m + a)
        keys.append(k)
    return np.array(keys, dtype=np.uint64)


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_keys_equal_python_interleave(dim, dtype):
    rng = np.random.default_rng(dim)
    p = rng.uniform(-3, 5, (500, dim)).astype(dtype)
    box = bounding_box(p)
    got = morton_keys(p, box)
    assert got.dtype == np.uint64 and np.array_equal(got, ref_keys(p, box))
    assert np.array_equal(morton_keys(p), got)  # the default box is bounding_box
    # corners of the box map to the first and the last key
    corners = np.stack([box[0], box[1]])
    assert morton_keys(corners, box).tolist() == [0, 2 ** (dim * MORTON_BITS[dim]) - 1]


@pytest.mark.parametrize("dim", [2, 3])
def test_decode_inverts_the_interleave(dim):
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, (300, dim))
    box = (np.zeros(dim), np.ones(dim))
    q = morton_decode(morton_keys(p, box), dim)
    assert np.array_equal(q, (p * 2.0 ** MORTON_BITS[dim]).astype(np.int64))


@settings(max_examples=30)
@given(
    st.sampled_from([2, 3]).flatmap(
        lambda d: hnp.arrays(
            np.float64, st.tuples(st.integers(1, 60), st.just(d)), elements=st.floats(-1e6, 1e6)
        )
    )
)
def test_order_is_a_stable_permutation_sorting_the_keys(p):
    order, sk = morton_order(p, return_keys=True)
    keys = morton_keys(p)
    assert np.array_equal(np.sort(order), np.arange(len(p)))
    assert np.array_equal(keys[order], sk) and np.all(sk[1:] >= sk[:-1])
    assert np.array_equal(order, np.argsort(keys, kind="stable"))


def test_monotone_along_each_axis():
    """Raising one coordinate (others fixed) never lowers the key."""
    box = (np.zeros(3), np.ones(3))
    t = np.linspace(0, 1, 257)
    for a in range(3):
        p = np.full((257, 3), 0.37)
        p[:, a] = t
        assert np.all(np.diff(morton_keys(p, box).astype(np.float64)) >= 0)


def test_ties_keep_input_order():
    p = np.repeat(np.random.default_rng(1).uniform(size=(50, 3)), 4, axis=0)[::-1].copy()
    order = morton_order(p)
    keys = morton_keys(p)
    assert np.array_equal(order, np.argsort(keys, kind="stable"))


def test_neighbours_in_key_are_near_in_space():
    """Quantified locality: consecutive points in Morton order are ~N^(-1/3) apart,
    as close as neighbours on a grid and ~10x closer than in random order."""
    n = 4096
    p = np.random.default_rng(2).uniform(size=(n, 3))
    step = np.linalg.norm(np.diff(p[morton_order(p)], axis=0), axis=1)
    rand = np.linalg.norm(np.diff(p, axis=0), axis=1)
    grid = n ** (-1 / 3)
    assert np.median(step) < 1.5 * grid
    assert np.median(rand) > 6 * np.median(step)
    # a run of 64 consecutive points (the mean count of a depth-2 cell of side 1/4)
    # spans one or two such cells, where a run in random order spans the whole cube
    q = p[morton_order(p)]
    spans = [np.ptp(q[i : i + 64], axis=0).max() for i in range(0, n, 64)]
    rand_spans = [np.ptp(p[i : i + 64], axis=0).max() for i in range(0, n, 64)]
    assert np.median(spans) <= 0.55 and np.median(rand_spans) > 0.9


def test_digits_and_cells_describe_the_octree():
    box = (np.zeros(3), np.ones(3))
    p = np.random.default_rng(3).uniform(size=(2000, 3))
    keys = morton_keys(p, box)
    d1 = morton_digits(keys, 1)
    want = (p[:, 0] >= 0.5) + 2 * (p[:, 1] >= 0.5) + 4 * (p[:, 2] >= 0.5)
    assert np.array_equal(d1, want)
    d2 = morton_digits(keys, 2)
    frac = (p * 2) % 1.0
    assert np.array_equal(
        d2, (frac[:, 0] >= 0.5) + 2 * (frac[:, 1] >= 0.5) + 4 * (frac[:, 2] >= 0.5)
    )
    # the cell at level 2 is (digit1, digit2) and cells are contiguous in Morton order
    assert np.array_equal(morton_cells(keys, 2), 8 * d1.astype(np.uint64) + d2)
    sk = np.sort(keys)
    c = morton_cells(sk, 3)
    assert np.all(np.diff(c.astype(np.int64)) >= 0)
    assert np.array_equal(morton_cells(keys, 0), np.zeros_like(keys))
    q2 = morton_decode(np.array([0b10], np.uint64), 2)  # y bit of the lowest level
    assert q2.tolist() == [[0, 1]]


def test_shared_box_and_errors():
    p = np.random.default_rng(4).uniform(size=(10, 2))
    box = (np.array([-1.0, -1.0]), np.array([2.0, 2.0]))
    assert np.array_equal(morton_keys(p[:3], box), morton_keys(p, box)[:3])
    assert morton_keys(np.zeros((0, 3))).shape == (0,)
    assert morton_order(np.zeros((0, 2))).shape == (0,)
    lo, hi = bounding_box(np.ones((3, 3)))
    assert np.array_equal(hi - lo, np.ones(3))
    with pytest.raises(ValueError, match=r"points\[1\] = \[nan, 0.0\] is not finite"):
        morton_keys(np.array([[0.0, 0.0], [np.nan, 0.0]]))
    with pytest.raises(ValueError, match=r"points has shape \(3, 4\): Morton keys take"):
        morton_order(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"points\[0\] = \[3.0, 0.0\] lies outside the box"):
        morton_keys(np.array([[3.0, 0.0]]), box)
    with pytest.raises(ValueError, match="need finite lo < hi"):
        morton_keys(p, (np.ones(2), np.zeros(2)))
    with pytest.raises(ValueError, match="lo and hi must each have 2 coordinates"):
        morton_keys(p, (np.zeros(3), np.ones(3)))
    with pytest.raises(ValueError, match=r"level=0: must be an int in 1 \.\. 21"):
        morton_digits(np.zeros(1, np.uint64), 0)
    with pytest.raises(ValueError, match=r"^ndim=4 is not one of \[2, 3\]"):
        morton_cells(np.zeros(1, np.uint64), 1, ndim=4)
    with pytest.raises(ValueError, match="points is empty"):
        bounding_box(np.zeros((0, 3)))
    with pytest.raises(TypeError, match="dtype complex128"):
        morton_keys(np.zeros((2, 2), complex))


@settings(max_examples=200, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 6), st.sampled_from([2, 3])),
        elements=st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False),
    ),
    st.booleans(),
)
def test_bounding_box_contains_every_point(p, cube):
    """``lo + side`` can round below the maximum; the box must still hold every point."""
    lo, hi = bounding_box(p, cube=cube)
    assert (p >= lo).all() and (p <= hi).all() and (hi > lo).all()
    morton_keys(p, (lo, hi))  # accepted as an explicit box: nothing outside


def test_bounding_box_rounding_case():
    rng = np.random.default_rng(1)
    for _ in range(500):
        p = rng.normal(size=(5, 3)) * 10 ** rng.uniform(-3, 3) + rng.normal(size=3) * 1e3
        lo, hi = bounding_box(p)
        assert (p <= hi).all()
        assert np.allclose(hi - lo, (hi - lo)[0], rtol=1e-12)  # still a cube


def test_bounding_box_far_apart_magnitudes():
    # lo + side rounds to 0.0, far below a tiny positive maximum: the side,
    # not hi, must grow by an ulp (stepping hi from 0.0 would never end)
    p = np.array([[-1e6, 0.0], [1e-200, 1.0]])
    lo, hi = bounding_box(p)
    assert (p >= lo).all() and (p <= hi).all()


@pytest.mark.parametrize("cube", [True, False])
def test_bounding_box_side_below_an_ulp_of_lo(cube):
    # the largest extent (1e-115) is below an ulp of the other axis' lo (1.0)
    p = np.array([[7.8e-115, 1.0], [0.0, 1.0]])
    lo, hi = bounding_box(p, cube=cube)
    assert (hi > lo).all() and (p >= lo).all() and (p <= hi).all()
    morton_keys(p, (lo, hi))


@pytest.mark.parametrize("dim", [2, 3])
def test_keys_of_subnormal_extents(dim):
    # 2**bits / (hi - lo) overflows for these boxes; the keys must still be
    # those of the same points scaled up by an exact power of two
    rng = np.random.default_rng(3)
    p = rng.random((50, dim))
    p[:, 0] *= 1e-310
    box = (np.zeros(dim), np.ones(dim))
    box[1][0] = 1e-310
    scaled = p.copy()
    scaled[:, 0] *= 2.0**1000
    big = (np.zeros(dim), np.ones(dim))
    big[1][0] = 1e-310 * 2.0**1000
    np.testing.assert_array_equal(morton_keys(p, box), morton_keys(scaled, big))
    assert len(np.unique(morton_keys(p))) == 50


def test_box_whose_sides_overflow_float64():
    """hi - lo = 2e308 overflowed to inf and every key was 0."""
    box = (np.full(3, -1e308), np.full(3, 1e308))
    p = np.array([[-9e307, 0.0, 0.0], [5e307, 0.0, 0.0], [0.0, 9e307, 0.0]])
    q = morton_decode(morton_keys(p, box))
    top = 2**21
    want = np.floor((p * 0.5 / 1e308 + 0.5) * top).astype(np.int64)  # (p - lo) / (hi - lo)
    assert np.abs(q - want).max() <= 1
    assert len(set(morton_keys(p, box).tolist())) == 3


def test_bounding_cube_that_overflows_is_refused():
    with pytest.raises(ValueError, match=r"points span -1e\+308 \.\. 1e\+308 on axis 0"):
        morton_order(np.array([[-1e308, 0.0], [1e308, 0.0]]))


def test_switches_and_keys_are_checked():
    p = np.random.default_rng(0).uniform(size=(5, 3))
    with pytest.raises(TypeError, match="return_keys='no'"):
        morton_order(p, return_keys="no")
    with pytest.raises(TypeError, match="cube='no'"):
        bounding_box(p, cube="no")
    for f, args in ((morton_digits, (1,)), (morton_cells, (1,)), (morton_decode, ())):
        with pytest.raises(ValueError, match=r"keys\[0\] = -1: Morton keys are unsigned"):
            f(np.array([-1]), *args)  # wrapped to 2**64 - 1
        with pytest.raises(TypeError, match="keys has dtype float64"):
            f(np.array([1.5]), *args)  # truncated to 1
    with pytest.raises(ValueError, match=r"keys has shape \(2, 2\)"):
        morton_decode(np.ones((2, 2), np.uint64))
    assert morton_decode([2**64 - 1], 2).tolist() == [[2**32 - 1, 2**32 - 1]]
    assert morton_digits([5 << 60], 1).tolist() == [5]
