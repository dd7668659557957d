"""topk and TopK on inputs that used to give silent wrong answers or unclear errors.

ml_dtypes scores (bfloat16, float8, int4), non-native byte order, masked
arrays and other ndarray subclasses, ids near the int64 limit, lists cast
into a summary's dtype, torch unsigned and float8 tensors, k = 0.  Answers
are compared with :func:`slow`, a plain float64/Python-int sort of
``(-value, index)`` written here (it shares no code with propopt).
"""

import math
import pickle
import re

import numpy as np
import pytest
from hypothesis import given, strategies as st

from propopt.associativity import TopK, merge_topk, topk

ml_dtypes = pytest.importorskip("ml_dtypes")

RNG = np.random.default_rng(11)
ID_MAX = 2**63 - 1


def slow(values, k, largest=True, nan="ignore", mask=None):
    """Positions of the best ``k`` by a Python sort of (rank, -value or value, index).

    ``values`` are Python floats or ints (exact); NaN is dropped with
    ``nan='ignore'`` and ranks above every number with ``'largest'``;
    masked positions are dropped.
    """
    keyed = []
    for i, v in enumerate(values):
        if mask is not None and mask[i]:
            continue
        if isinstance(v, float) and math.isnan(v):
            if nan == "ignore":
                continue
            keyed.append(((0 if largest else 2), 0, i))
        else:
            keyed.append((1, -v if largest else v, i))
    keyed.sort()
    return [i for *_, i in keyed[:k]]


def as_python(x):
    """Exact Python numbers: floats for any float dtype (ml_dtypes too), ints otherwise."""
    x = np.asarray(x)
    try:
        ml_dtypes.finfo(x.dtype)
        floats = True
    except (TypeError, ValueError):
        floats = x.dtype.kind == "f"
    if floats:
        return [float(v) for v in x.astype(np.float64).tolist()]
    return [int(v) for v in x.tolist()]


ML_FLOATS = [
    getattr(ml_dtypes, name)
    for name in sorted(dir(ml_dtypes))
    if name.startswith(("bfloat", "float"))
    and isinstance(getattr(ml_dtypes, name), type)
    and name not in ("finfo",)
]
ML_INTS = [
    getattr(ml_dtypes, name)
    for name in ("int2", "int4", "uint2", "uint4")
    if hasattr(ml_dtypes, name)
]


def _has_nan(dtype):
    return bool(np.isnan(np.array([np.nan]).astype(dtype).astype(np.float64))[0])


# -------------------------------------------------------------- ml_dtypes
def test_bfloat16_ranks_by_value_not_truncated_integers():
    x = np.array([0.5, -0.25, 0.75, -0.5, 0.1], ml_dtypes.bfloat16)
    v, i = topk(x, 5)
    assert i.tolist() == [2, 0, 4, 1, 3]
    assert v.dtype == x.dtype and v.tolist() == x[[2, 0, 4, 1, 3]].tolist()


def test_bfloat16_nan_behaves_like_float32():
    x = np.array([1.5, np.nan, 2.5], ml_dtypes.bfloat16)
    for nan in ("ignore", "largest"):
        for largest in (True, False):
            got = topk(x, 3, largest=largest, nan=nan)[1]
            want = topk(x.astype(np.float32), 3, largest=largest, nan=nan)[1]
            assert got.tolist() == want.tolist() == slow(as_python(x), 3, largest, nan)
    assert topk(x, 3)[1].tolist() == [2, 0]  # the NaN is never returned


@pytest.mark.parametrize("dtype", ML_FLOATS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("method", ["auto", "reference"])
def test_ml_dtypes_floats_match_float64_sort(dtype, largest, method):
    x = RNG.uniform(-4, 4, 300).astype(dtype)  # few distinct values: many ties
    nan = "largest" if _has_nan(dtype) else "ignore"
    if _has_nan(dtype):
        x[[3, 50, 299]] = np.array([np.nan] * 3).astype(dtype)
    for policy in {"ignore", nan}:
        v, i = topk(x, 40, largest=largest, nan=policy, method=method)
        want = slow(as_python(x), 40, largest, policy)
        assert i.tolist() == want
        assert v.dtype == x.dtype
        np.testing.assert_array_equal(v.astype(np.float64), x[want].astype(np.float64))


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_ml_dtypes_rows_along_each_axis(dtype):
    x = RNG.uniform(-8, 8, (7, 9)).astype(dtype)
    for axis in (0, 1):
        _, i = topk(x, 4, axis=axis)
        xm = np.moveaxis(x, axis, -1)
        want = [slow(as_python(row), 4) for row in xm]
        assert np.moveaxis(i, axis, -1).tolist() == want


def test_reference_oracle_reads_ml_dtypes_scalars():
    from propopt.associativity.topk import _reference as ref

    x = np.array([0.5, -0.25, 0.75, np.nan, 0.1], ml_dtypes.bfloat16)
    for nan in ("ignore", "largest"):
        got = ref.best(list(x), list(range(5)), 5, nan=nan)  # bfloat16 scalars
        assert got == slow(as_python(x), 5, nan=nan)


@pytest.mark.parametrize("dtype", ML_INTS, ids=lambda d: d.__name__)
def test_ml_dtypes_integers_rank_by_value(dtype):
    info = ml_dtypes.iinfo(dtype)
    x = RNG.integers(int(info.min), int(info.max) + 1, 50).astype(dtype)
    for largest in (True, False):
        assert topk(x, 9, largest=largest)[1].tolist() == slow(as_python(x), 9, largest)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e5m2, ml_dtypes.int4])
def test_summary_of_ml_dtypes(dtype):
    x = RNG.uniform(-6, 6, 500).astype(dtype)
    a = TopK.empty(20, dtype)  # refused before: the same dtype topk took
    for chunk in np.array_split(x[:300], 7):
        a.update(chunk)
    b = TopK.empty(20, dtype, start=300).update(x[300:])
    total = merge_topk(a, b)
    scores, ids = total.result()
    assert ids.tolist() == slow(as_python(x), 20)
    assert scores.dtype == np.dtype(dtype)
    back = TopK.from_bytes(total.to_bytes())
    assert back == total and back.dtype == np.dtype(dtype)
    assert pickle.loads(pickle.dumps(total)) == total


def test_bfloat16_summary_drops_nan_like_float32():
    x = np.array([1.5, np.nan, 2.5, -1.0], ml_dtypes.bfloat16)
    got = TopK.empty(3, ml_dtypes.bfloat16).update(x).result()[1]
    want = TopK.empty(3, np.float32).update(x.astype(np.float32)).result()[1]
    assert got.tolist() == want.tolist() == [2, 0, 3]


@pytest.mark.parametrize(
    "dtype", [np.dtype([("score", "f4"), ("id", "i4")]), np.dtype("V4"), np.dtype("V2")]
)
def test_structured_and_raw_dtypes_are_refused_in_one_line(dtype):
    x = np.zeros(4, dtype)
    with pytest.raises(TypeError, match=r"structured or raw-bytes dtype.*pick one field") as e:
        topk(x, 2)
    assert "\n" not in str(e.value)
    with pytest.raises(TypeError, match="structured or raw-bytes dtype"):
        TopK.empty(2, dtype)


# ---------------------------------------------------------- byte order
@pytest.mark.parametrize("code", [">i8", ">u8", ">f8", ">f4", ">i4", ">u4"])
def test_non_native_byte_order_ranks_by_value(code):
    x = np.array([2**40 + 1, 3, 2**41, 2**40, 7, 2**33], np.float64)
    if code == ">f8":
        x = np.array([1.0000001, 1.0, 1.00000001, 0.5, 1.0, 1.0000000001])
    elif code in (">f4", ">i4", ">u4"):
        x = np.array([70000.0, 3, 1e5, 2**20, 7, 8])
    if code == ">u8":
        x = np.array([2**63 + 1, 5, 2**63, 2**64 - 1, 0, 2**40], dtype=np.uint64)
    xb = x.astype(code)
    for largest in (True, False):
        v, i = topk(xb, 4, largest=largest)
        want = slow(as_python(xb), 4, largest)
        assert i.tolist() == want and v.dtype == xb.dtype
        s = TopK.empty(4, xb.dtype, largest).update(xb[:3]).update(xb[3:])
        assert s.result()[1].tolist() == want


# ------------------------------------------------------------------ ids
def test_positional_ids_never_wrap_past_int64():
    s = TopK.empty(3, np.float32, start=2**63 - 2)
    with pytest.raises(ValueError, match=r"reach id 9223372036854775810, past the largest"):
        s.update(np.arange(5, dtype=np.float32))
    assert s.n_seen == 0 and len(s) == 0  # nothing was taken
    s.update(np.arange(2, dtype=np.float32))  # ids 2**63 - 2 and 2**63 - 1: fine
    assert s.result()[1].tolist() == [ID_MAX, ID_MAX - 1]
    with pytest.raises(ValueError, match="past the largest int64 id"):
        s.update(np.ones(1, np.float32))
    back = TopK.from_bytes(s.to_bytes())  # the span ends at 2**63 exactly
    assert back == s
    with pytest.raises(ValueError, match="past the largest int64 id"):
        back.update(np.ones(1, np.float32))


def test_offset_ids_never_wrap_past_int64():
    s = TopK.empty(3, np.float32)
    with pytest.raises(ValueError, match="past the largest int64 id"):
        s.update(np.ones(4, np.float32), offset=2**63 - 3)
    with pytest.raises(ValueError, match=r"offset=9223372036854775808: ids are int64"):
        s.update(np.ones(1, np.float32), offset=2**63)
    with pytest.raises(ValueError, match=r"offset=-9223372036854775809: ids are int64"):
        s.update(np.ones(1, np.float32), offset=-(2**63) - 1)
    s.update(np.ones(3, np.float32), offset=2**63 - 3)
    assert sorted(s.result()[1].tolist()) == [ID_MAX - 2, ID_MAX - 1, ID_MAX]
    s.update(np.full(2, 5, np.float32), offset=-(2**63))  # the lowest ids
    assert s.result()[1].tolist() == [-(2**63), -(2**63) + 1, ID_MAX - 2]


def test_merged_summaries_keep_ids_in_range():
    a = TopK.empty(2, np.int64, start=2**63 - 4).update(np.array([1, 9], np.int64))
    b = TopK.empty(2, np.int64, start=2**63 - 2).update(np.array([9, 1], np.int64))
    m = merge_topk(a, b)
    assert m.result()[1].tolist() == [ID_MAX - 2, ID_MAX - 1]
    assert TopK.from_bytes(m.to_bytes()) == m
    with pytest.raises(ValueError, match="past the largest int64 id"):
        b.update(np.ones(1, np.int64))
    with pytest.raises(ValueError, match=r"from id 9223372036854775808 .* past the largest"):
        m.update(np.ones(1, np.int64))  # positions continue at min(start) + n_seen = 2**63
    assert m.result()[1].tolist() == [ID_MAX - 2, ID_MAX - 1] and m.n_seen == 4


@pytest.mark.parametrize("bad", [1.5, 2.0, True, np.float64(3.0), "4", None])
def test_start_and_offset_must_be_ints(bad):
    with pytest.raises(TypeError, match=re.escape(f"start={bad!r}: must be an int")) as e:
        TopK.empty(3, np.float32, start=bad)
    assert "\n" not in str(e.value)
    if bad is not None:  # offset=None means positions from start
        with pytest.raises(TypeError, match=re.escape(f"offset={bad!r}: must be an int")):
            TopK.empty(3, np.float32).update(np.ones(2, np.float32), offset=bad)


def test_start_accepts_numpy_integers_and_refuses_out_of_range():
    s = TopK.empty(3, np.float32, start=np.int64(5)).update(np.ones(2, np.float32))
    assert s.result()[1].tolist() == [5, 6] and type(s.start) is int
    assert TopK.empty(3, np.float32, start=np.uint64(7)).start == 7
    with pytest.raises(ValueError, match=r"start=9223372036854775808: ids are int64"):
        TopK.empty(3, np.float32, start=2**63)


# ------------------------------------------------------ lists into a dtype
@pytest.mark.parametrize(
    "dtype, values",
    [
        (np.int8, [1.7, 2.2]),
        (np.int8, (1.5,)),
        (np.int8, [300]),
        (np.int8, [-129, 3]),
        (np.uint8, [-1]),
        (np.int32, [float("nan")]),
        (np.bool_, [2]),
        (np.float32, [0.1]),  # float64 -> float32 rounds, like an ndarray would
        (np.float32, [1e40]),
        (np.uint64, [2**70]),
    ],
)
def test_lists_cast_exactly_or_are_refused(dtype, values):
    s = TopK.empty(3, dtype)
    with pytest.raises(TypeError, match=r"cannot (be held|hold exactly)") as e:
        s.update(values)
    assert "\n" not in str(e.value)
    assert s.n_seen == 0
    with pytest.raises(TypeError):  # the same values as an ndarray: refused too
        s.update(np.asarray(values))


@pytest.mark.parametrize(
    "dtype, values",
    [
        (np.int8, [1, -128, 127]),
        (np.int8, (3.0, 2.0)),
        (np.uint64, [2**64 - 1, 0]),
        (np.float32, [0.5, float("nan"), float("inf"), -2.25]),
        (np.float16, [1, 2, 2048]),
        (np.bool_, [True, 0, 1]),
        (ml_dtypes.bfloat16, [0.5, -0.25, 0.75]),
    ],
)
def test_lists_that_convert_exactly_are_taken(dtype, values):
    scores, ids = TopK.empty(5, dtype).update(values).result()
    want = slow([float(v) if isinstance(v, float) else int(v) for v in values], 5)
    assert ids.tolist() == want and scores.dtype == np.dtype(dtype)


# ------------------------------------------------ masks and subclasses
def test_masked_entries_are_never_selected():
    x = np.ma.array([1, 5, 3], mask=[0, 1, 0])
    v, i = topk(x, 1)
    assert i.tolist() == [2] and v.tolist() == [3]
    v, i = topk(x, 3)
    assert i.tolist() == [2, 0] and type(v) is np.ndarray
    assert topk(np.ma.array([1.0, 2.0], mask=False), 2)[1].tolist() == [1, 0]


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.int64, np.uint64, np.int8, np.bool_, "bf16"]
)
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("nan", ["ignore", "largest"])
def test_masked_rows_match_reference(dtype, largest, nan):
    dtype = ml_dtypes.bfloat16 if dtype == "bf16" else dtype
    data = RNG.integers(-3, 4, (5, 12))
    if np.dtype(dtype) == np.uint64:
        data = (data + 3).astype(np.uint64) + np.uint64(2**63 - 2)  # across the top bit
    x = data.astype(dtype)
    mask = np.zeros(x.shape, bool)
    for r in range(5):
        mask[r, RNG.choice(12, 4, replace=False)] = True  # 8 unmasked a row
    if np.dtype(dtype).kind == "f" or dtype is ml_dtypes.bfloat16:
        x[0, np.flatnonzero(~mask[0])[:2]] = np.nan  # row 0: 6 non-NaN
        x[1, np.flatnonzero(mask[1])[:2]] = np.nan  # masked NaNs: never seen
    m = np.ma.array(x, mask=mask)
    k = 6
    v, i = topk(m, k, axis=1, largest=largest, nan=nan)
    want = [slow(as_python(x[r]), k, largest, nan, mask[r]) for r in range(5)]
    assert i.tolist() == want
    assert v.dtype == x.dtype
    np.testing.assert_array_equal(
        v.astype(np.float64), np.take_along_axis(x, np.array(want), 1).astype(np.float64)
    )
    _, it = topk(m.T, k, axis=0, largest=largest, nan=nan)
    assert it.T.tolist() == want
    _, iu = topk(m, k, axis=1, largest=largest, nan=nan, sorted=False)
    assert np.sort(iu, 1).tolist() == np.sort(np.array(want), 1).tolist()


def test_masked_ragged_rows_refused_in_one_line():
    m = np.ma.array(np.arange(6.0).reshape(2, 3), mask=[[0, 0, 1], [0, 0, 0]])
    with pytest.raises(
        ValueError, match=r"different numbers of unmasked non-NaN values \(2 to 3\)"
    ):
        topk(m, 3)
    assert topk(m, 2)[1].tolist() == [[1, 0], [2, 1]]
    with pytest.raises(ValueError, match="0-d masked array whose one value is masked"):
        topk(np.ma.array(1.0, mask=True), 1)
    assert topk(np.ma.array(1.0, mask=False), 1)[0].tolist() == 1.0


def test_summary_skips_masked_scores_but_numbers_them():
    x = np.ma.array([9.0, 1.0, 7.0, 8.0, 2.0], mask=[1, 0, 0, 1, 0])
    s = TopK.empty(2, np.float64).update(x[:2]).update(x[2:])
    assert s.result()[1].tolist() == [2, 4] and s.n_seen == 5
    ids = np.array([40, 30, 20, 10, 0])
    s = TopK.empty(2, np.float64).update(x, ids=ids)
    assert s.result()[1].tolist() == [20, 0]
    # already full: the seeded filter also skips masked entries
    s = TopK.empty(1, np.float64).update(np.array([0.0])).update(x)
    assert s.result()[1].tolist() == [3]  # position 3 is x[2], the best unmasked
    with pytest.raises(ValueError, match="ids is a masked array"):
        TopK.empty(2, np.float64).update(np.ones(2), ids=np.ma.array([1, 2], mask=[0, 1]))


@given(
    st.lists(st.tuples(st.integers(-5, 5), st.booleans()), min_size=0, max_size=60),
    st.integers(0, 70),
    st.booleans(),
)
def test_masked_topk_and_summary_agree_with_reference(pairs, k, largest):
    x = np.ma.array([p[0] for p in pairs], mask=[p[1] for p in pairs], dtype=np.int32)
    want = slow([p[0] for p in pairs], k, largest, mask=[p[1] for p in pairs])
    assert topk(x, k, largest=largest)[1].tolist() == want
    s = TopK.empty(k, np.int32, largest)
    for part in range(0, len(pairs), 7):
        s.update(x[part : part + 7])
    assert s.result()[1].tolist() == want


class _Tagged(np.ndarray):
    """A generic ndarray subclass (as libraries define them)."""


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_ndarray_subclasses_rank_as_plain_arrays():
    mat = np.matrix([[1, 5, 3], [4, 0, 6]])
    plain = np.asarray(mat)
    for axis in (0, 1, -1):
        v, i = topk(mat, 1, axis=axis)
        wv, wi = topk(plain, 1, axis=axis)
        assert type(v) is np.ndarray and type(i) is np.ndarray
        assert v.tolist() == wv.tolist() and i.tolist() == wi.tolist()
    t = np.array([0.5, 2.0, 1.0]).view(_Tagged)
    v, i = topk(t, 2)
    assert type(v) is np.ndarray and i.tolist() == [1, 2] and v.tolist() == [2.0, 1.0]
    assert TopK.empty(2, np.float64).update(t).result()[1].tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"scores must be 1-D, got shape \(1, 3\)"):
        TopK.empty(2, np.int64).update(np.matrix([[1, 5, 3]]))


# ---------------------------------------------------------------- torch
@pytest.mark.parametrize("name", ["uint64", "uint32", "uint16"])
def test_torch_unsigned_tensors(name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"torch has no {name}")
    bits = int(name[4:])
    vals = [1, 2 ** (bits - 1) + 5, 3, 2**bits - 1, 2 ** (bits - 1), 0, 3]
    x = torch.from_numpy(np.array(vals, f"u{bits // 8}"))
    for largest in (True, False):
        v, i = topk(x, 4, largest=largest)
        want = slow(vals, 4, largest)
        assert i.tolist() == want and v.dtype == dtype
        assert [int(e) for e in v.numpy().tolist()] == [vals[j] for j in want]
    x2 = x.reshape(1, -1).expand(2, -1)
    assert topk(x2, 3, axis=1)[1].tolist() == [slow(vals, 3)] * 2


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_torch_narrow_floats(name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"torch has no {name}")
    x = torch.tensor([0.5, -0.25, 0.75, -0.5, 0.125, 0.75]).to(dtype)
    vals = [float(e) for e in x.float().tolist()]
    v, i = topk(x, 4)
    assert i.tolist() == slow(vals, 4) and v.dtype == dtype
    s = TopK.empty(4, np.float32).update(x)  # exact, the same bits
    assert s.result()[1].tolist() == slow(vals, 4)
    s = TopK.empty(4, getattr(ml_dtypes, name)).update(x)
    assert s.result()[1].tolist() == slow(vals, 4)


# ------------------------------------------------------ errors and k = 0
@pytest.mark.parametrize("data", ["abc", None, 3, [1, 2]])
def test_from_bytes_refuses_non_bytes_in_one_line(data):
    with pytest.raises(TypeError, match=r"data=.* is a .*TopK.from_bytes takes the bytes") as e:
        TopK.from_bytes(data)
    assert "\n" not in str(e.value)
    raw = TopK.empty(2, np.float32).update(np.ones(3, np.float32)).to_bytes()
    for like in (bytearray(raw), memoryview(raw)):
        assert TopK.from_bytes(like) == TopK.from_bytes(raw)


def test_k_zero_is_an_empty_summary_everywhere():
    s = TopK.empty(0, np.float32).update(np.arange(5, dtype=np.float32))
    scores, ids = s.result()
    assert scores.shape == ids.shape == (0,) and s.n_seen == 5
    t = TopK.empty(0, np.float32, start=5).update(np.ones(2, np.float32))
    m = merge_topk(s, t)
    assert len(m) == 0 and m.n_seen == 7
    assert TopK.from_bytes(m.to_bytes()) == m
    assert topk(np.ones(4), 0)[1].shape == (0,)


def test_case_study_k_zero():
    from propopt_case_studies.streaming_topk import top_k_chunks

    ev = np.zeros(5, [("score", "f8"), ("user", "i4")])
    ev["score"] = [3, 1, 4, 1, 5]
    rows, ids = top_k_chunks([ev[:2], ev[2:]], 0, threads=2)
    assert rows.shape == ids.shape == (0,) and rows.dtype == ev.dtype


def test_dask_entry_points_refuse_in_memory_data_in_one_line():
    da = pytest.importorskip("dask.array")
    pd = pytest.importorskip("pandas")
    from propopt_case_studies.streaming_topk import top_k_dask_array, top_k_dask_dataframe

    with pytest.raises(TypeError, match=r"numpy.ndarray, not a dask array.*from_array") as e:
        top_k_dask_array(np.arange(5.0), 2)
    assert "\n" not in str(e.value)
    with pytest.raises(TypeError, match=r"pandas.DataFrame, not a dask dataframe.*from_pandas"):
        top_k_dask_dataframe(pd.DataFrame({"score": [1.0, 2.0]}), 1)
    with pytest.raises(ValueError, match=r"1-D dask array, got shape \(2, 2\)"):
        top_k_dask_array(da.ones((2, 2), chunks=1), 1)


def test_dask_array_honours_masks_and_k_zero():
    da = pytest.importorskip("dask.array")
    from propopt_case_studies.streaming_topk import top_k_dask_array

    x = np.array([1.0, 5.0, 3.0, 7.0, 2.0, 9.0, 0.0])
    mask = np.array([0, 1, 0, 1, 0, 0, 1], bool)
    dx = da.ma.masked_array(da.from_array(x, chunks=2), mask=da.from_array(mask, chunks=2))
    v, i = top_k_dask_array(dx, 3)
    assert i.tolist() == slow(x.tolist(), 3, mask=mask) == [5, 2, 4]
    assert v.tolist() == [9.0, 3.0, 2.0]
    v, i = top_k_dask_array(da.from_array(x, chunks=3), 0)
    assert v.shape == i.shape == (0,)


def test_read_only_and_writeable_inputs_share_one_compiled_kernel():
    """A pandas column or a Dask chunk is read-only; the kernel compiled for a
    writeable array of the same dtype serves it (propopt.arrays.frozen)."""
    from propopt.arrays import frozen
    from propopt.associativity.topk import _cpu

    x = np.random.default_rng(3).normal(size=5000).astype(np.float32)
    want = topk(x, 7)
    before = len(_cpu._topk_one_kernel.signatures)
    ro = x.copy()
    ro.flags.writeable = False
    got = topk(ro, 7)
    assert len(_cpu._topk_one_kernel.signatures) == before
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert all(s[0].mutable is False for s in _cpu._topk_one_kernel.signatures)
    v = frozen(x)
    assert not v.flags.writeable and x.flags.writeable and np.shares_memory(v, x)
    assert frozen(v) is v
