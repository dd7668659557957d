"""topk against torch.topk on the cases torch users rely on: 0-d input, k = 0, sorted=, out=."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import propopt as pp

torch = pytest.importorskip("torch")


def _ref(x, k, largest):
    """Best k positions of a 1-D array by (value, position), from a float64 stable argsort."""
    v = np.asarray(x, dtype=np.float64)
    return np.argsort(-v if largest else v, kind="stable")[:k]


@pytest.mark.parametrize("k", [0, 1])
@pytest.mark.parametrize("largest", [True, False])
def test_zero_dimensional_input_is_one_value(k, largest):
    t = torch.tensor(2.5)
    tv, ti = torch.topk(t, k, largest=largest)
    for x in (t, np.array(2.5)):
        v, i = pp.topk(x, k, largest=largest)
        assert tuple(v.shape) == tuple(tv.shape) == ()
        assert tuple(i.shape) == tuple(ti.shape) == ()
        assert float(v) == float(tv) and int(i) == int(ti) == 0
    with pytest.raises(ValueError, match=r"k=2: a 0-d x holds one value, so k must be 0 or 1"):
        pp.topk(t, 2)
    with pytest.raises(ValueError, match=r"axis=1 is out of range for a 0-d x"):
        pp.topk(t, 1, axis=1)


@pytest.mark.parametrize("shape, axis", [((7,), 0), ((3, 5), 1), ((3, 5), 0), ((0, 4), 1)])
def test_k_zero_gives_empty_results_shaped_like_torch(shape, axis):
    t = torch.rand(shape)
    tv, ti = torch.topk(t, 0, dim=axis)
    v, i = pp.topk(t, 0, axis=axis)
    assert v.shape == tv.shape and i.shape == ti.shape
    assert v.dtype == tv.dtype and i.dtype == ti.dtype == torch.int64
    nv, ni = pp.topk(t.numpy(), 0, axis=axis)
    assert nv.shape == tuple(tv.shape) and nv.dtype == np.float32 and ni.dtype == np.int64


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("n, k", [(50, 5), (5000, 300), (300_000, 1000)])
def test_unsorted_holds_the_same_pairs(n, k, largest):
    x = np.random.default_rng(n).integers(0, n // 4 + 2, n).astype(np.float32)  # ties
    want = _ref(x, k, largest)
    v, i = pp.topk(x, k, largest=largest, sorted=False)
    assert sorted(i.tolist()) == sorted(want.tolist())
    np.testing.assert_array_equal(v, x[i])
    tv, _ = torch.topk(torch.from_numpy(x), k, largest=largest, sorted=False)
    np.testing.assert_array_equal(np.sort(v), np.sort(tv.numpy()))  # same values as torch


def test_unsorted_rows_hold_the_same_pairs():
    x = np.random.default_rng(3).normal(size=(6, 4000)).astype(np.float32)
    _, i = pp.topk(x, 50, axis=1, sorted=False)
    for r in range(6):
        assert sorted(i[r].tolist()) == sorted(_ref(x[r], 50, True).tolist())


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    st.lists(st.integers(-5, 5), min_size=1, max_size=60),
    st.integers(1, 70),
    st.booleans(),
)
def test_sorted_false_is_a_permutation_of_sorted(values, k, largest):
    x = np.array(values, dtype=np.float32)
    vs, is_ = pp.topk(x, k, largest=largest)
    vu, iu = pp.topk(x, k, largest=largest, sorted=False)
    assert sorted(iu.tolist()) == sorted(is_.tolist())
    np.testing.assert_array_equal(np.sort(vu), np.sort(vs))


def test_out_torch_is_resized_and_returned_like_torch():
    t = torch.rand(4, 100, generator=torch.Generator().manual_seed(0))
    ov, oi = torch.empty(0), torch.empty(0, dtype=torch.int64)
    rv, ri = pp.topk(t, 7, axis=1, out=(ov, oi))
    assert rv is ov and ri is oi
    tv, ti = torch.topk(t, 7, dim=1)
    assert torch.equal(ov, tv) and torch.equal(oi, ti)


def test_out_numpy_is_filled_in_place():
    x = np.random.default_rng(1).random(1000)
    ov, oi = np.empty(9), np.empty(9, np.int64)
    rv, ri = pp.topk(x, 9, out=(ov, oi))
    assert rv is ov and ri is oi
    np.testing.assert_array_equal(oi, _ref(x, 9, True))
    np.testing.assert_array_equal(ov, x[oi])


@pytest.mark.parametrize("kind", ["transposed", "strided", "wrong shape, strided"])
def test_out_non_contiguous_is_written_like_torch(kind):
    """Views of other arrays as out=: written through their strides (the base sees the
    result), or, for a torch view of another shape, resized as torch.topk does."""
    t = torch.rand(5, 40, generator=torch.Generator().manual_seed(2))
    tv, ti = torch.topk(t, 4, dim=1)

    def views():
        if kind == "transposed":
            bv, bi = torch.zeros(4, 5), torch.zeros(4, 5, dtype=torch.int64)
            return bv, bi, bv.t(), bi.t()
        if kind == "strided":
            bv, bi = torch.zeros(5, 8), torch.zeros(5, 8, dtype=torch.int64)
            return bv, bi, bv[:, ::2], bi[:, ::2]
        bv, bi = torch.zeros(12), torch.zeros(12, dtype=torch.int64)
        return bv, bi, bv[::2], bi[::2]

    for side in ("torch", "propopt"):
        bv, bi, ov, oi = views()
        if side == "torch":
            torch.topk(t, 4, dim=1, out=(ov, oi))
            want = (ov.clone(), oi.clone(), bv.clone())
        else:
            rv, ri = pp.topk(t, 4, axis=1, out=(ov, oi))
            assert rv is ov and ri is oi
            assert torch.equal(ov, want[0]) and torch.equal(oi, want[1])
            assert torch.equal(bv, want[2])  # the same writes through the view
    assert torch.equal(ov, tv) and torch.equal(oi, ti)
    xn = t.numpy()
    bv, bi = np.zeros((5, 8), np.float32), np.zeros((4, 5), np.int64)
    rv, ri = pp.topk(xn, 4, axis=1, out=(bv[:, 1::2], bi.T))
    np.testing.assert_array_equal(bv[:, 1::2], tv.numpy())
    np.testing.assert_array_equal(bi.T, ti.numpy())
    assert not bv[:, ::2].any()


@pytest.mark.parametrize("sorted_", [True, False])
def test_out_1d_discontiguous_like_torchs_own_test(sorted_):
    """torch's test_topk_1d_output_discontiguous: k=1 into every other element of a buffer."""
    t = torch.randn(4, generator=torch.Generator().manual_seed(3))
    values = torch.empty(2)[::2]
    indices = torch.empty(2, dtype=torch.long)[::2]
    v, i = pp.topk(t, 1, sorted=sorted_, out=(values, indices))
    assert v is values and i is indices and values.stride() == (2,)
    assert values.item() == t.max().item() and indices.item() == t.argmax().item()


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("layout", ["every other column", "transposed", "reversed"])
@pytest.mark.parametrize("largest", [True, False])
def test_out_strided_views_hold_torchs_answer_and_nothing_else(kind, layout, largest):
    """Many rows on all threads into strided views: the views hold torch.topk's answer,
    the buffers' other elements keep their fill."""
    n, k = 64, 5
    t = torch.rand(n, 3000, generator=torch.Generator().manual_seed(4))
    tv, ti = torch.topk(t, k, dim=1, largest=largest)
    lib = np if kind == "numpy" else torch
    x = t.numpy() if kind == "numpy" else t
    if layout == "every other column":
        bv, bi = lib.full((n, 2 * k), -7.0, dtype=lib.float32), lib.full((n, 2 * k), -7)
        ov, oi = bv[:, ::2], bi[:, ::2]
    elif layout == "transposed":
        bv, bi = lib.full((k, n), -7.0, dtype=lib.float32), lib.full((k, n), -7)
        ov, oi = bv.T, bi.T
    else:  # negative strides: NumPy only (torch has none); torch gets a column of a matrix
        if kind == "torch":
            bv, bi = torch.full((n, k, 2), -7.0), torch.full((n, k, 2), -7)
            ov, oi = bv[:, :, 1], bi[:, :, 1]
        else:
            bv, bi = np.full((n, k), -7.0, np.float32), np.full((n, k), -7)
            ov, oi = bv[::-1, ::-1], bi[::-1, ::-1]
    assert not (ov.is_contiguous() if kind == "torch" else ov.flags.c_contiguous)
    rv, ri = pp.topk(x, k, axis=1, largest=largest, out=(ov, oi))
    assert rv is ov and ri is oi
    np.testing.assert_array_equal(np.asarray(ov), tv.numpy())
    np.testing.assert_array_equal(np.asarray(oi), ti.numpy())
    untouched = np.ones(tuple(bv.shape), bool)
    if layout == "every other column":
        untouched[:, ::2] = False
    elif layout == "reversed" and kind == "torch":
        untouched[:, :, 1] = False
    else:
        untouched[:] = False
    assert (np.asarray(bv)[untouched] == -7).all() and (np.asarray(bi)[untouched] == -7).all()


def test_out_strided_of_the_wrong_shape_or_dtype_is_one_line_naming_it():
    x = np.random.default_rng(5).random((6, 100)).astype(np.float32)
    bv, bi = np.zeros((6, 10), np.float32), np.zeros((6, 10), np.int64)
    with pytest.raises(ValueError) as e:
        pp.topk(x, 4, axis=1, out=(bv[:, ::2], bi[:, ::2]))  # (6, 5), the result is (6, 4)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("out[0] has shape (6, 5); the result has shape (6, 4)")
    assert "allocate out with that shape" in msg
    assert not bv.any() and not bi.any()  # nothing written before the refusal
    with pytest.raises(TypeError) as e:
        pp.topk(x, 4, axis=1, out=(bv[:, :8:2], bi.astype(np.int32)[:, :8:2]))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("out[1] is numpy.ndarray(dtype=int32")
    assert "(indices are int64)" in msg
    t = torch.from_numpy(x)
    tv = torch.zeros(6, 10, dtype=torch.float64)[:, ::2]
    with pytest.raises(TypeError, match=r"^out\[0\] is torch.Tensor\(dtype=torch.float64"):
        pp.topk(t, 4, axis=1, out=(tv, torch.zeros(6, 4, dtype=torch.int64)))


def test_bad_out_is_named():
    t = torch.rand(100)
    with pytest.raises(TypeError, match=r"out\[0\] is torch.Tensor\(dtype=torch.float64"):
        pp.topk(t, 5, out=(torch.empty(5, dtype=torch.float64), torch.empty(5, dtype=torch.int64)))
    with pytest.raises(TypeError, match=r"out\[1\] is numpy.ndarray"):
        pp.topk(t, 5, out=(torch.empty(5), np.empty(5, np.int64)))
    with pytest.raises(ValueError, match=r"out\[0\] has shape \(4,\); the result has shape \(5,\)"):
        pp.topk(t.numpy(), 5, out=(np.empty(4, np.float32), np.empty(5, np.int64)))
    with pytest.raises(TypeError, match=r"out must be a \(values, indices\) pair"):
        pp.topk(t, 5, out=torch.empty(5))
    with pytest.raises(TypeError, match=r"sorted must be a bool"):
        pp.topk(t, 5, sorted="no")


@pytest.mark.parametrize("largest", [True, False])
def test_unsorted_pieces_of_one_row_hold_the_same_pairs(largest):
    from propopt.associativity.topk import _threads as _topk_threads

    x = np.random.default_rng(7).integers(0, 40, 200_000).astype(np.float32)  # ties across pieces
    no_ids = np.empty(0, np.int64)
    want = sorted(_ref(x, 500, largest).tolist())
    for pieces in (2, 3):
        for ordered in (True, False):
            pos = _topk_threads._one_row_threads(
                x, no_ids, False, 500, pieces, largest, False, None, x[0], np.int64(0), ordered
            )
            assert sorted(pos.tolist()) == want
            if ordered:
                assert pos.tolist() == _ref(x, 500, largest).tolist()


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("shape, axis", [((40,), 0), ((3, 40), 1), ((40, 3), 0), ((2, 40, 3), -2)])
def test_distinct_values_match_torch_and_a_float64_argsort(shape, axis, largest):
    rng = np.random.default_rng(len(shape) + axis)
    x = rng.permutation(np.prod(shape)).reshape(shape).astype(np.float32) / 7  # no ties
    tv, ti = torch.topk(torch.from_numpy(x), 9, dim=axis, largest=largest)
    v, i = pp.topk(torch.from_numpy(x), 9, axis=axis, largest=largest)
    assert torch.equal(v, tv) and torch.equal(i, ti)
    nv, ni = pp.topk(x, 9, axis=axis, largest=largest)
    xm = np.moveaxis(x, axis, -1).reshape(-1, shape[axis])
    want = np.stack([_ref(row, 9, largest) for row in xm])
    got = np.moveaxis(ni, axis, -1).reshape(-1, 9)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(nv, np.take_along_axis(x, ni, axis))
    uv, ui = pp.topk(x, 9, axis=axis, largest=largest, sorted=False)
    np.testing.assert_array_equal(np.sort(ui, axis=axis), np.sort(ni, axis=axis))
    np.testing.assert_array_equal(uv, np.take_along_axis(x, ui, axis))


def test_out_on_another_device_or_dtype_is_named():
    t = torch.rand(50)
    with pytest.raises(ValueError, match=r"out\[0\] is on meta but the result is on cpu"):
        pp.topk(t, 5, out=(torch.empty(5, device="meta"), torch.empty(5, dtype=torch.int64)))
    with pytest.raises(TypeError, match=r"out\[1\] is numpy.ndarray\(dtype=int32"):
        pp.topk(t.numpy(), 5, out=(np.empty(5, np.float32), np.empty(5, np.int32)))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(256, 4000),
    st.integers(1, 200),
    st.sampled_from([3, 1000, 10**6]),  # how many distinct values: ties or none
    st.booleans(),
)
def test_sorted_false_is_a_permutation_of_sorted_on_long_rows(seed, n, k, distinct, largest):
    """Rows long enough for the sampled seed, the compactions and the radix sort."""
    x = np.random.default_rng(seed).integers(0, distinct, (2, n)).astype(np.float32)
    vs, is_ = pp.topk(x, k, axis=1, largest=largest)
    _, iu = pp.topk(x, k, axis=1, largest=largest, sorted=False)
    np.testing.assert_array_equal(np.sort(iu, axis=1), np.sort(is_, axis=1))
    for r in range(2):
        np.testing.assert_array_equal(is_[r], _ref(x[r], k, largest))
        np.testing.assert_array_equal(vs[r], x[r, is_[r]])
