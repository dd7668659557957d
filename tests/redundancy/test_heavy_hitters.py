"""Misra-Gries: the error bound after updates and merge trees; peers; bad input."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from propopt.redundancy import MisraGries, merge_counts, merge_summaries as merge


def _zipf(n, seed=0):
    return np.random.default_rng(seed).zipf(1.3, n) % 5000


def _check_bound(s, items):
    keys, true = np.unique(items, return_counts=True)
    est = s.estimate(keys)
    assert (est <= true).all()  # never overestimates
    assert (true - est <= s.error_bound + 1e-9).all()  # underestimates by <= n/(m+1)
    return float((true - est).max())


@pytest.mark.parametrize("m", [1, 7, 64])
def test_bound_holds_after_batched_updates(m):
    x = _zipf(20_000)
    s = MisraGries(m)
    for chunk in np.array_split(x, 17):
        s.update(chunk)
    assert s.n == x.size and len(s) <= m
    _check_bound(s, x)
    heavy = np.unique(x, return_counts=True)
    must = heavy[0][heavy[1] > s.error_bound]
    assert np.isin(must, s.heavy_hitters()[0]).all()  # no false negatives
    t = max(500, s.error_bound)  # items not held have counts <= error_bound
    assert np.isin(heavy[0][heavy[1] > t], s.heavy_hitters(t)[0]).all()


@given(
    st.lists(st.lists(st.integers(0, 12), max_size=40), min_size=1, max_size=6),
    st.integers(1, 5),
    st.randoms(use_true_random=False),
)
def test_bound_holds_for_any_merge_tree(parts, m, rnd):
    summaries = [MisraGries(m).update(np.array(p, np.int64)) for p in parts]
    while len(summaries) > 1:  # merge random pairs in random order
        i, j = sorted(rnd.sample(range(len(summaries)), 2))
        b = summaries.pop(j)
        a = summaries.pop(i)
        summaries.append(merge(a, b) if rnd.random() < 0.5 else merge(b, a))
    allx = np.concatenate([np.array(p, np.int64) for p in parts])
    s = summaries[0]
    assert s.n == allx.size and len(s) <= m
    if allx.size:
        _check_bound(s, allx)


def test_merge_commutes():
    a = MisraGries(5).update(_zipf(3000, 1))
    b = MisraGries(5).update(_zipf(3000, 2))
    ab, ba = merge(a, b), merge(b, a)
    assert ab.heavy_hitters()[0].tolist() == ba.heavy_hitters()[0].tolist()
    assert ab.estimate(np.arange(50)).tolist() == ba.estimate(np.arange(50)).tolist()


def test_against_datasketches():
    """Equal memory budget: our error stays within our bound and datasketches' within theirs."""
    ds = pytest.importorskip("datasketches")
    x = _zipf(50_000)
    sk = ds.frequent_items_sketch(8)  # map of 256 slots, ~192 counters
    for v in x.tolist():
        sk.update(v)
    s = MisraGries(192).update(x)
    keys, true = np.unique(x, return_counts=True)
    ours = _check_bound(s, x)
    theirs = max(abs(int(t) - sk.get_lower_bound(int(k))) for k, t in zip(keys, true))
    assert theirs <= sk.get_apriori_error(8, x.size)
    top = keys[np.argsort(-true)[:10]]
    got = {
        int(i) for i, *_ in sk.get_frequent_items(ds.frequent_items_error_type.NO_FALSE_NEGATIVES)
    }
    assert set(top.tolist()) <= got
    assert set(top.tolist()) <= set(s.heavy_hitters()[0].tolist())
    assert ours <= s.error_bound


def test_bad_input():
    with pytest.raises(ValueError, match="m=0: the number of counters must be >= 1"):
        MisraGries(0)
    with pytest.raises(TypeError, match="items must be integers, got dtype float64"):
        MisraGries(3).update(np.ones(3))
    with pytest.raises(ValueError, match="cannot merge MisraGries summaries with m=3 and m=4"):
        merge(MisraGries(3), MisraGries(4))


def test_items_beyond_int64_are_refused():
    with pytest.raises(ValueError, match=r"items\[0\] = 18446744073709551615 does not fit int64"):
        MisraGries(2).update(np.array([2**64 - 1, 5], np.uint64))


def test_estimate_takes_integer_items():
    s = MisraGries(2).update(np.array([-1, -1, 7, 7, 7]))
    with pytest.raises(TypeError, match="items must be integers, got dtype float64"):
        s.estimate([7.9])  # was the count of 7
    with pytest.raises(TypeError, match="items must be integers"):
        s.estimate(["a"])
    assert s.estimate(np.array([2**64 - 1], np.uint64)).tolist() == [0]  # not the item -1
    assert s.estimate([2**64 - 1]).tolist() == [0]
    assert s.estimate([-1, 7, 8]).tolist() == [2, 3, 0]


def test_threshold_is_a_number():
    s = MisraGries(2).update(np.array([7, 7, 7]))
    with pytest.raises(TypeError, match="threshold='a'"):
        s.heavy_hitters("a")
    with pytest.raises(ValueError, match="threshold=nan"):
        s.heavy_hitters(float("nan"))


def test_masked_items_are_not_counted():
    # the four 1s are masked: the stream is [2], so f(1) = 0, f(2) = 1 and n = 1
    items = np.ma.MaskedArray([1, 1, 2, 1, 1], mask=[True, True, False, True, True])
    s = MisraGries(3).update(items)
    assert s.n == 1
    assert s.estimate([1, 2]).tolist() == [0, 1]
    rng = np.random.default_rng(5)
    data = rng.integers(0, 6, 400)
    mask = rng.random(400) < 0.3
    s = MisraGries(10).update(np.ma.MaskedArray(data, mask=mask))  # m > distinct items: exact
    kept = [int(v) for v, masked in zip(data, mask) if not masked]
    assert s.n == len(kept)
    assert s.estimate(np.arange(6)).tolist() == [kept.count(v) for v in range(6)]
    q = s.estimate(np.ma.MaskedArray([0, 1], mask=[False, True]))
    assert q.mask.tolist() == [False, True] and int(q[0]) == kept.count(0)
    with pytest.raises(TypeError, match="keys1 is a masked array"):
        merge_counts(np.ma.MaskedArray([1], mask=[True]), np.array([1]), np.array([2]),
                     np.array([1]), counters=2)  # fmt: skip
