"""topk and TopK against the sorted() oracle; ties, NaN, dtypes, laws, serialization.

Every answer is exact, so results are compared for equality with
``_topk_reference`` (Python's ``sorted`` over (score, id) pairs).
"""

import importlib

import numba
import numpy as np
import pytest
from hypothesis import given, strategies as st

import propopt as pp
from propopt.associativity import TopK, merge_topk, topk
from propopt.associativity.topk import _cpu as K, _reference as ref

RNG = np.random.default_rng(7)
NO = np.empty(0, np.int64)  # no explicit ids


def _ref_1d(x, k, largest=True, nan="ignore", ids=None):
    ids = list(range(len(x))) if ids is None else list(ids)
    return np.array(ref.best(list(x), ids, k, largest, nan), np.int64)


# ------------------------------------------------------------------ topk 1-D
@pytest.mark.parametrize("n", [1, 2, 3, 17, 2047, 2049, 5000])
@pytest.mark.parametrize("k", [1, 3, 64])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_reference_float32_with_ties(n, k, largest):
    x = RNG.integers(0, 20, n).astype(np.float32)  # many ties
    v, i = topk(x, k, largest=largest)
    want = _ref_1d(x, k, largest)
    np.testing.assert_array_equal(i, want)
    np.testing.assert_array_equal(v, x[want])
    assert v.dtype == x.dtype and i.dtype == np.int64


@pytest.mark.parametrize(
    "dtype",
    [np.int32, np.uint8, np.bool_]
    + [
        pytest.param(d, marks=pytest.mark.slow)
        for d in (np.float64, np.int64, np.int8, np.uint16, np.uint32, np.uint64, np.float16)
    ],
)
def test_topk_dtypes_preserved(dtype):
    if dtype == np.bool_:
        x = RNG.integers(0, 2, 300).astype(bool)
    elif np.dtype(dtype).kind == "u":
        x = RNG.integers(0, 250, 300).astype(dtype)
        if dtype == np.uint64:
            x[:3] = [2**64 - 1, 2**63, 2**63 - 1]  # around the flipped bit
    else:
        x = RNG.integers(-100, 100, 300).astype(dtype)
    for largest in (True, False):
        v, i = topk(x, 10, largest=largest)
        np.testing.assert_array_equal(i, _ref_1d(x, 10, largest))
        assert v.dtype == x.dtype


def test_topk_special_floats():
    x = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 3.0, -0.0, 0.0], np.float32)
    for largest in (True, False):
        np.testing.assert_array_equal(topk(x, 9, largest=largest)[1], _ref_1d(x, 9, largest))


@pytest.mark.parametrize("largest", [True, False])
def test_nan_policies(largest):
    x = np.array([1.0, np.nan, 3.0, -np.nan, 2.0, np.nan, 0.5])
    v, i = topk(x, 3, largest=largest)  # ignored by default
    assert not np.isnan(v).any()
    np.testing.assert_array_equal(i, _ref_1d(x, 3, largest))
    v, i = topk(x, 5, largest=largest, nan="largest")
    np.testing.assert_array_equal(i, _ref_1d(x, 5, largest, "largest"))
    assert list(i[:3]) == ([1, 3, 5] if largest else [6, 0, 4])
    # only NaN left to fill k: fewer than k come back when ignoring them
    assert topk(x, 7)[0].shape == (4,)


def test_nan_largest_agrees_with_torch():
    torch = pytest.importorskip("torch")
    x = np.array([1.0, np.nan, 3.0, 2.0, np.nan], np.float32)
    for largest in (True, False):
        tv, _ = torch.topk(torch.from_numpy(x), 5, largest=largest)
        v, _ = topk(x, 5, largest=largest, nan="largest")
        np.testing.assert_array_equal(v, tv.numpy())


def test_k_larger_than_n_returns_all():
    x = np.array([2, 9, 4], np.int32)
    v, i = topk(x, 10)
    assert v.tolist() == [9, 4, 2] and i.tolist() == [1, 2, 0]


# ------------------------------------------------------------------ topk N-D
@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_topk_axis(axis):
    x = RNG.integers(0, 9, (4, 5, 33)).astype(np.float32)
    v, i = topk(x, 4, axis=axis)
    xm = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])
    want = ref.topk(xm, 4)
    got = np.moveaxis(i, axis, -1).reshape(-1, min(4, x.shape[axis]))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(v, np.take_along_axis(x, i, axis))


def test_topk_reference_method_and_empty_axis():
    x = RNG.normal(size=(3, 50)).astype(np.float32)
    for a, b in zip(topk(x, 5), topk(x, 5, method="reference")):
        np.testing.assert_array_equal(a, b)
    v, i = topk(np.empty((3, 0)), 4)
    assert v.shape == (3, 0) and i.shape == (3, 0)


def test_topk_ragged_nan_rows_error():
    x = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]], np.float32)
    with pytest.raises(ValueError, match="ragged: pass nan='largest'"):
        topk(x, 3)
    assert topk(x, 3, nan="largest")[1].shape == (2, 3)


def test_topk_torch_cpu():
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(RNG.normal(size=(6, 300)).astype(np.float32))
    v, i = topk(t, 7, axis=1)
    tv, ti = torch.topk(t, 7, dim=1)
    assert isinstance(v, torch.Tensor) and i.dtype == torch.int64
    assert torch.equal(v, tv) and torch.equal(i, ti)
    b = t.to(torch.bfloat16)
    bv, bi = topk(b, 3)
    assert bv.dtype == torch.bfloat16 and torch.equal(bv, torch.gather(b, -1, bi))


# ------------------------------------------------- agnosticism and adversary
def test_independent_of_thread_count_and_pieces():
    x = RNG.integers(0, 50, 300_000).astype(np.float32)  # heavy ties across pieces
    want = _ref_1d(x, 100)
    xs = x.reshape(1, -1)
    for pieces in (1, 2, 3, 7):
        pos, c, _ = K.topk_rows(
            xs, NO, False, 100, pieces, True, False, False, np.float32(0), 0, True
        )
        np.testing.assert_array_equal(pos[0, : c[0]], want)
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        np.testing.assert_array_equal(topk(x, 100)[1], want)
    finally:
        numba.set_num_threads(old)


def test_ascending_input_stays_linear():
    """Every element of ascending input beats the threshold: count the compactions.

    A compaction runs only when the buffer of ``2k + SLACK`` is full, and it
    frees at least ``SAMPLE`` slots (else it selects exactly ``k``), so the
    count grows linearly with n: O(n) work, never a heap operation per element.
    The rows are seeded below every value, so that the kernel does not seed
    them from a sample of themselves (which spares the adversary: see the end).
    """
    k = 100

    def compactions(x, seeded=True):
        pos, _, comp = K.topk_rows(
            x.reshape(1, -1), NO, False, k, 1, True, False, seeded, np.float32(-1), 0, True
        )
        return pos[0], comp

    n = 200_000
    x = np.arange(2 * n, dtype=np.float32)
    pos, c1 = compactions(x[:n])
    assert pos.tolist() == list(range(n - 1, n - 1 - k, -1))
    pos, c2 = compactions(x)
    assert pos.tolist() == list(range(2 * n - 1, 2 * n - 1 - k, -1))
    assert n // (2 * k + K.SLACK) <= c1 <= n // K.SAMPLE + 1  # the adversary does fill it
    assert 1.8 <= c2 / c1 <= 2.2  # linear in n
    _, c_random = compactions(RNG.permutation(x))
    assert c_random < c2 / 10
    pos, c_sampled = compactions(x, seeded=False)  # seeded from 8k strided elements
    assert pos.tolist() == list(range(2 * n - 1, 2 * n - 1 - k, -1))
    assert c_sampled < c2 / 4  # only the last ~1/8 of the row (k of 8k sampled) is admitted


# ---------------------------------------------------------------------- TopK
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_summary_streams_equal_in_memory(dtype, largest):
    x = RNG.integers(0, 30, 4000).astype(dtype)
    s = TopK.empty(25, dtype, largest)
    for chunk in np.array_split(x, 13):
        s.update(chunk)
    scores, ids = s.result()
    want = _ref_1d(x, 25, largest)
    np.testing.assert_array_equal(ids, want)
    np.testing.assert_array_equal(scores, x[want])
    assert scores.dtype == np.dtype(dtype) and s.n_seen == 4000


def test_explicit_ids_break_ties():
    s = TopK.empty(2, np.float64).update([1.0, 5.0, 5.0, 5.0], ids=[10, 30, 20, 40])
    assert s.result()[1].tolist() == [20, 30]
    s.update(np.array([5.0]), ids=np.array([5]))
    assert s.result()[1].tolist() == [5, 20]


def test_chunk_order_and_nan_largest():
    x = np.array([np.nan, 1.0, 7.0, np.nan, 7.0, 3.0])
    a = TopK.empty(4, np.float64, nan="largest")
    a.update(x[:3]).update(x[3:])
    assert a.result()[1].tolist() == [0, 3, 2, 4]
    b = TopK.empty(4, np.float64).update(x)
    assert b.result()[1].tolist() == [2, 4, 5, 1]


@st.composite
def three_summaries(draw):
    k = draw(st.integers(1, 6))
    largest = draw(st.booleans())
    kind = draw(st.sampled_from(["f", "i"]))
    out = []
    for _ in range(3):
        vals = draw(st.lists(st.integers(-4, 4), max_size=25))
        ids = draw(st.lists(st.integers(0, 60), min_size=len(vals), max_size=len(vals)))
        dt = np.float32 if kind == "f" else np.int16
        out.append((np.array(vals, dt), np.array(ids, np.int64)))
    return k, largest, out


@given(three_summaries())
def test_merge_is_associative_commutative_and_exact(case):
    k, largest, parts = case
    dt = parts[0][0].dtype
    a, b, c = (TopK.empty(k, dt, largest).update(v, i) for v, i in parts)
    assert merge_topk(merge_topk(a, b), c) == merge_topk(a, merge_topk(b, c))
    assert merge_topk(a, b) == merge_topk(b, a)
    allv = np.concatenate([p[0] for p in parts])
    alli = np.concatenate([p[1] for p in parts])
    want = _ref_1d(allv, k, largest, ids=alli)
    scores, ids = merge_topk(merge_topk(a, b), c).result()
    np.testing.assert_array_equal(ids, alli[want])
    np.testing.assert_array_equal(scores, allv[want])


# ------------------------------------------------------------ serialization
def test_bytes_and_file_round_trip(tmp_path):
    s = TopK.empty(5, np.float32, largest=False, nan="largest", start=100)
    s.update(RNG.normal(size=50).astype(np.float32))
    t = TopK.from_bytes(s.to_bytes())
    assert t == s and t.start == 100 and t.nan == "largest" and not t.largest
    s.save(tmp_path / "s.topk")
    assert TopK.load(tmp_path / "s.topk") == s
    # resume a checkpointed stream: same answer as never stopping
    more = RNG.normal(size=40).astype(np.float32)
    t.update(more)
    s.update(more)
    assert t == s


def test_corrupted_bytes_are_detected():
    data = bytearray(TopK.empty(3, np.int32).update(np.arange(10, dtype=np.int32)).to_bytes())
    for pos in (10, len(data) // 2, len(data) - 1):
        bad = bytearray(data)
        bad[pos] ^= 0x40
        with pytest.raises(ValueError, match="corrupted TopK bytes: checksum mismatch"):
            TopK.from_bytes(bytes(bad))
    with pytest.raises(ValueError, match="shorter than any serialized TopK"):
        TopK.from_bytes(bytes(data[:10]))
    with pytest.raises(ValueError, match="magic b'XXTOPK' is not"):
        TopK.from_bytes(b"XX" + bytes(data[2:]))
    with pytest.raises(ValueError, match="checksum mismatch"):
        TopK.from_bytes(bytes(data[:-5]) + bytes(data[-4:]))


def test_top_level_names():
    assert pp.TopK is TopK and pp.topk is topk and pp.merge_topk is merge_topk


def test_large_updates_threaded_with_ids_and_seed():
    """Chunks long enough to be split across threads, explicit ids, a seeded second update."""
    x = RNG.integers(0, 40, 300_000).astype(np.float32)
    ids = RNG.permutation(300_000).astype(np.int64)
    s = TopK.empty(50, np.float32).update(x[:150_000], ids=ids[:150_000])
    s.update(x[150_000:], ids=ids[150_000:])
    want = _ref_1d(x, 50, ids=ids)
    np.testing.assert_array_equal(s.result()[1], ids[want])


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("nan", ["ignore", "largest"])
def test_adversarial_order_with_ties_and_nan(largest, nan):
    """Input sorted toward the winners (every element admitted, many compactions)."""
    x = np.repeat(np.arange(12_000, dtype=np.float64), 3)  # ties in every compaction
    if not largest:
        x = x[::-1].copy()
    x[::997] = np.nan
    for k in (1, 50, 7000):
        _, i = topk(x, k, largest=largest, nan=nan)
        np.testing.assert_array_equal(i, _ref_1d(x, k, largest, nan))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 100, 1500])
def test_distinct_random_floats_match_a_full_sort(largest, k):
    """Random input, long enough for the dense early phase, compactions and threads."""
    x = RNG.random(400_000)
    order = np.argsort(-x if largest else x, kind="stable")[:k]
    v, i = topk(x, k, largest=largest)
    np.testing.assert_array_equal(i, order)
    np.testing.assert_array_equal(v, x[order])
    for pieces in (1, 2):
        pos, c, _ = K.topk_rows(
            x.reshape(1, -1), NO, False, k, pieces, largest, False, False, np.float64(0), 0, True
        )
        np.testing.assert_array_equal(pos[0, : c[0]], order)


def test_offset_chunk_below_held_ids_wins_ties():
    """An update with ``offset`` below the held ids: an equal score with a smaller id wins."""
    s = TopK.empty(2, np.float32).update(np.array([5, 5, 1, 1], np.float32), offset=100)
    s.update(np.array([5, 0, 0, 0], np.float32), offset=0)
    np.testing.assert_array_equal(s.result()[1], [0, 100])
    s = TopK.empty(2, np.float32).update(np.array([5, 5, 1, 1], np.float32), offset=0)
    s.update(np.array([5, 0, 0, 0], np.float32), offset=100)  # later ids lose ties
    np.testing.assert_array_equal(s.result()[1], [0, 1])


# ------------------------------------------- long rows: the sampled threshold
def _lexsort_ref(x, k, largest):
    """Best k positions by (score, position), from NumPy's lexsort in float64."""
    v = x.astype(np.float64)
    return np.lexsort((np.arange(v.shape[0]), -v if largest else v))[:k]


LONG = 1 << 22  # topk.SAMPLE_ABOVE: rows this long are sampled first


@pytest.mark.parametrize("largest", [True, False])
def test_long_rows_in_any_order_match_a_full_sort(largest):
    topk_module = importlib.import_module("propopt.associativity.topk._threads")

    assert LONG >= topk_module.SAMPLE_ABOVE
    base = RNG.integers(0, 1 << 20, LONG).astype(np.float32)  # ties on top of the orders
    for x in (base, np.sort(base), np.sort(base)[::-1].copy(), np.zeros(LONG, np.float32)):
        for k in (1, 7, 1000):
            want = _lexsort_ref(x, k, largest)
            np.testing.assert_array_equal(topk(x, k, largest=largest)[1], want)


def test_a_sample_holding_the_whole_top_k_keeps_its_kth():
    """Only k - 1 elements beat the sample's k-th best: the seed itself is returned last."""
    topk_module = importlib.import_module("propopt.associativity.topk._threads")

    k = 10
    stride = LONG // max(topk_module.SAMPLE, topk_module.SAMPLE_PER_K * k // 4)
    x = np.zeros(LONG, np.float32)
    x[: k * stride : stride] = np.arange(1, k + 1, dtype=np.float32)  # all on sampled positions
    vals, pos = topk(x, k)
    np.testing.assert_array_equal(pos, _lexsort_ref(x, k, True))
    assert vals[-1] == 1.0


def test_long_rows_with_nan():
    x = np.sort(RNG.random(LONG, dtype=np.float32))
    x[RNG.integers(0, LONG, 5000)] = np.nan
    fin = np.where(np.isnan(x), -np.inf, x)  # nan='ignore': NaN never wins
    np.testing.assert_array_equal(topk(x, 500)[1], _lexsort_ref(fin, 500, True))
    top = topk(x, 500, nan="largest")[1]  # NaN above everything, in position order
    nan_at = np.flatnonzero(np.isnan(x))
    np.testing.assert_array_equal(top[: nan_at.shape[0]], nan_at[:500])


@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.float64])
@pytest.mark.parametrize("largest", [True, False])
def test_long_sorted_rows_of_other_dtypes(dtype, largest):
    x = np.sort(RNG.integers(0, 256, LONG)).astype(dtype)  # runs of ties, extremes present
    for k in (1, 300):
        np.testing.assert_array_equal(topk(x, k, largest=largest)[1], _lexsort_ref(x, k, largest))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_rows_seeded_from_their_own_sample(largest, dtype):
    """Rows long enough beside k take a threshold from a strided sample of themselves.

    Ties at the k-th value lie both on and off the sample's stride; extreme
    values (the dtype's limits, +-inf) and ascending rows must not break the
    step to a value just worse than the sample's k-th.
    """
    from propopt.associativity.topk import _order as _topk_order

    n, k = 1200, 20
    assert _topk_order.ROW_SEED_MIN <= n <= _topk_order.ROW_SEED_MAX
    assert n >= _topk_order.ROW_SEED_PER_K * k
    rng = np.random.default_rng(11)
    info = np.finfo(dtype) if dtype == np.float32 else np.iinfo(dtype)
    rows = [
        rng.integers(0, 30, n),  # heavy ties at the k-th value
        np.arange(n),  # ascending
        np.arange(n)[::-1],  # descending
        np.full(n, 5),  # all equal
    ]
    x = np.stack(rows).astype(dtype)
    x[2, ::7] = info.min  # the worst value, on and off the stride
    x[3, 100:1100:3] = info.max
    if dtype == np.float32:
        x[0, ::5] = -np.inf
        x[1, 50:70] = np.inf
    for kk in (1, k, 60):
        _, i = topk(x, kk, axis=1, largest=largest)
        np.testing.assert_array_equal(i, ref.topk(x, kk, largest))
        for r in range(x.shape[0]):  # one row: the single-row kernel
            np.testing.assert_array_equal(topk(x[r], kk, largest=largest)[1], i[r])


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("nan", ["ignore", "largest"])
def test_rows_seeded_from_their_own_sample_with_nan(largest, nan):
    x = np.random.default_rng(12).integers(0, 40, (3, 1500)).astype(np.float64)
    x[0, ::3] = np.nan  # on and off any stride
    x[1, :1400] = np.nan  # fewer admissible values in the sample than k
    for k in (5, 80):
        _, i = topk(x, k, axis=1, largest=largest, nan="largest")
        np.testing.assert_array_equal(i, ref.topk(x, k, largest, "largest"))
        row = x[0] if nan == "largest" else x[2]
        np.testing.assert_array_equal(
            topk(row, k, largest=largest, nan=nan)[1], _ref_1d(row, k, largest, nan)
        )


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_radix_sort_of_winners_is_the_total_order(dtype):
    """sort_winners (keys by bytes, ties by id) equals the merge sort by _better."""
    from propopt.associativity.topk import _order as _topk_order, _radix as _topk_radix

    n = 3 * _topk_radix.RADIX_ABOVE
    rng = np.random.default_rng(13)
    if np.dtype(dtype).kind == "f":
        v = rng.normal(size=n).astype(dtype)
        v[::11] = np.nan
        v[5:12] = [-0.0, 0.0, np.inf, -np.inf, -0.0, np.finfo(dtype).max, np.finfo(dtype).tiny]
    else:
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, n, dtype=dtype)
        v[10:14] = [info.min, info.max, 0, -1]
    v[::7] = v[3]  # ties
    ids = rng.permutation(n).astype(np.int64)
    ids[::13] = -ids[::13] - 5  # explicit ids may be negative
    for desc in (True, False):
        for nanbig in (True, False):
            for lo, hi in ((0, n), (3, n - 5)):
                want = _topk_order._sort_order(v, ids, np.int64(lo), hi, desc, nanbig)
                got = _topk_radix.sort_winners(v, ids, np.int64(lo), hi, desc, nanbig)
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_long_rows_seeded_from_a_small_sample(largest, dtype):
    """Rows past ROW_SEED_MAX sample 8k elements; compared with a stable argsort."""
    from propopt.associativity.topk import _order as _topk_order

    n, k = _topk_order.ROW_SEED_MAX + 12_345, 40
    assert n >= _topk_order.ROW_SEED_LONG_PER_K * k
    rng = np.random.default_rng(14)
    info = np.finfo(dtype) if dtype == np.float32 else np.iinfo(dtype)
    x = np.stack([rng.integers(0, 60, n), np.arange(n), np.arange(n)[::-1]]).astype(dtype)
    x[2, ::9] = info.min
    x[1, -30:] = info.max  # ties at the top, off the stride
    if dtype == np.float32:
        x[0, ::5] = -np.inf

    def want(row, kk):  # best first, ties by position: a stable argsort of a monotone key
        key = (~row if row.dtype.kind == "i" else -row) if largest else row
        return np.argsort(key, kind="stable")[:kk]

    for kk in (1, k):
        _, i = topk(x, kk, axis=1, largest=largest)
        for r in range(x.shape[0]):
            np.testing.assert_array_equal(i[r], want(x[r], kk))
            np.testing.assert_array_equal(topk(x[r], kk, largest=largest)[1], i[r])
