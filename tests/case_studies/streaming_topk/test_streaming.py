"""The streaming case study: baselines, chunked threads, dask; all equal the exact answer."""

import numpy as np
import pytest

import propopt as pp
from propopt_case_studies.streaming_topk import heapq_loop, sort_everything, top_k_chunks

RNG = np.random.default_rng(3)
EVENT = np.dtype([("score", np.float32), ("user", np.int64), ("tag", "U3")])


def _events(n, seed=0):
    r = np.random.default_rng(seed)
    ev = np.empty(n, EVENT)
    ev["score"] = r.integers(0, 200, n)  # ties across chunks
    ev["user"] = np.arange(n)
    ev["tag"] = r.choice(["a", "b", "c"], n)
    return ev


def _exact_ids(scores, k, largest=True):
    return pp.topk(scores, k, largest=largest)[1]


def test_baselines_agree_with_topk():
    x = RNG.integers(0, 50, 3000).astype(np.float64)
    want = _exact_ids(x, 40)
    events = [(float(s), i) for i, s in enumerate(x)]
    key = lambda e: e[0]  # noqa: E731
    assert [e[1] for e in sort_everything(events, 40, key=key)] == want.tolist()
    assert [e[1] for e in heapq_loop(events, 40, key=key)] == want.tolist()
    assert heapq_loop(x.tolist(), 5, key=None) == x[want[:5]].tolist()


@pytest.mark.parametrize("baseline", [sort_everything, heapq_loop])
def test_baselines_take_k_zero_and_refuse_a_bad_k(baseline):
    events = [3.0, 1.0, 2.0]
    assert baseline(events, 0, key=None) == []
    assert baseline(events, 2, key=None) == [3.0, 2.0]
    for k in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=rf"^k={k!r}: must be an int >= 0$"):
            baseline(events, k, key=None)


@pytest.mark.parametrize("threads", [1, 3])
def test_structured_chunks(threads):
    ev = _events(20_000)
    chunks = np.array_split(ev, 23)
    rows, ids = top_k_chunks(iter(chunks), 50, threads=threads)
    want = _exact_ids(ev["score"], 50)
    np.testing.assert_array_equal(ids, want)
    np.testing.assert_array_equal(rows, ev[want])  # payload rows of the winners


def test_dataframe_chunks_smallest():
    pd = pytest.importorskip("pandas")
    ev = _events(5000, 1)
    df = pd.DataFrame({n: ev[n] for n in EVENT.names}).rename(columns={"score": "latency"})
    chunks = (df.iloc[s : s + 700] for s in range(0, len(df), 700))
    rows, ids = top_k_chunks(chunks, 30, score="latency", largest=False, threads=2)
    want = _exact_ids(ev["score"], 30, largest=False)
    np.testing.assert_array_equal(ids, want)
    assert rows["user"].tolist() == want.tolist() and list(rows.columns) == list(df.columns)


def test_k_larger_than_stream_and_empty_chunks():
    ev = _events(30)
    rows, ids = top_k_chunks([ev[:0], ev[:10], ev[10:10], ev[10:]], 100, threads=2)
    assert len(rows) == 30 and ids.tolist() == _exact_ids(ev["score"], 100).tolist()


def test_chunk_without_score_column():
    ev = _events(10)
    bad = ev[["user", "tag"]]
    with pytest.raises(ValueError, match=r"chunk 1 has no column 'score' \(columns: user, tag\)"):
        top_k_chunks([ev, bad], 3, threads=1)
    with pytest.raises(TypeError, match="chunk 0 is a plain array"):
        top_k_chunks([np.ones(3)], 3)
    with pytest.raises(ValueError, match="k=-1: k must be >= 0"):
        top_k_chunks([ev], -1)
    with pytest.raises(ValueError, match="chunks is empty"):
        top_k_chunks([], 3)


def test_chunks_must_be_an_iterable_of_chunks():
    ev = _events(10)
    with pytest.raises(TypeError, match=r"^chunks=5 is not iterable: pass a list or generator"):
        top_k_chunks(5, 2)
    with pytest.raises(TypeError, match=r"^chunks is one NumPy array, not an iterable of chunks"):
        top_k_chunks(ev, 2)
    # numpy ints are ints
    ids = top_k_chunks([ev[:4], ev[4:]], 3, threads=np.int64(2))[1]
    assert ids.tolist() == _exact_ids(ev["score"], 3).tolist()
    with pytest.raises(ValueError, match=r"^threads=0: must be an int >= 1"):
        top_k_chunks([ev], 2, threads=0)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_chunks_unlike_chunk_0_are_refused_whatever_the_schedule(threads):
    # the score dtype was compared per thread at the end: a float chunk and an int
    # chunk taken by two threads gave a float result, by one thread an error
    pd = pytest.importorskip("pandas")
    ev = _events(12)
    floats = [pd.DataFrame({"score": [1.0, 5.0]}), pd.DataFrame({"score": [2.0, 3.0]})]
    cases = [
        (
            floats + [pd.DataFrame({"score": [7, 0]})],
            r"^chunk 2: the score column 'score' has dtype int64 but chunk 0's has float64",
        ),
        (
            [ev, pd.DataFrame({"score": [7.0, 0.0]})],
            r"^chunk 1 is a DataFrame but chunk 0 is a structured array: pass chunks of one kind",
        ),
        (
            [ev, ev[["score", "user"]]],
            r"^chunk 1 has fields \(score, user\) but chunk 0 has \(score, user, tag\)",
        ),
        (
            [pd.DataFrame({"score": ["a", "b"]})],
            r"^chunk 0: the score column 'score' has dtype object, which top-k cannot rank",
        ),
    ]
    for chunks, msg in cases:
        for _ in range(10):
            with pytest.raises(TypeError, match=msg):
                top_k_chunks(iter(chunks), 2, threads=threads)


def test_default_threads_are_propopts(monkeypatch):
    """With no ``threads=``, the worker count is :func:`propopt.get_num_threads` (load-aware,
    capped by ``propopt.set_num_threads``), not numba's pool size."""
    asked = []
    monkeypatch.setattr(pp, "get_num_threads", lambda: asked.append(1) or 1)
    ev = _events(400)
    _, ids = top_k_chunks([ev[:150], ev[150:]], 30)
    assert asked
    np.testing.assert_array_equal(ids, _exact_ids(ev["score"], 30))


def test_duplicate_score_columns_are_refused_and_duplicate_payload_is_kept():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame([[1.0, 5.0, 7.0], [3.0, 2.0, 8.0], [2.0, 9.0, 6.0]], columns=list("spp"))
    with pytest.raises(ValueError, match=r"^chunk 0 has 2 columns named 's'.*rename") as info:
        top_k_chunks([frame.set_axis(list("ssp"), axis=1)], 1, score="s")
    assert "\n" not in str(info.value)
    rows, ids = top_k_chunks([frame], 2, score="s")
    assert rows.to_numpy().tolist() == [[3.0, 2.0, 8.0], [2.0, 9.0, 6.0]]
    assert ids.tolist() == [1, 2]
