"""Top-k of dask arrays and dataframes on a distributed.LocalCluster.

The cluster runs its 2 workers as threads of this process
(``processes=False``): tasks still go through the distributed scheduler,
and the summaries are pickled explicitly below to check the wire format,
without paying for JIT compilation in worker processes.
"""

import pickle

import numpy as np
import pytest

import propopt as pp
from propopt_case_studies.streaming_topk import top_k_dask_array, top_k_dask_dataframe

da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    )
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


@pytest.mark.parametrize("split_every", [2, 5])
@pytest.mark.parametrize("largest", [True, False])
def test_dask_array_equals_in_memory(client, split_every, largest):
    x = np.random.default_rng(0).integers(0, 100, 50_000).astype(np.float32)
    dx = da.from_array(x, chunks=3_001)
    v, i = top_k_dask_array(dx, 64, largest, split_every=split_every)
    wv, wi = pp.topk(x, 64, largest=largest)
    np.testing.assert_array_equal(i, wi)
    np.testing.assert_array_equal(v, wv)


def test_dask_dataframe_equals_in_memory(client):
    pd = pytest.importorskip("pandas")
    r = np.random.default_rng(1)
    df = pd.DataFrame(
        {"score": r.integers(0, 40, 8000), "user": np.arange(8000), "w": r.normal(size=8000)}
    )
    ddf = dd.from_pandas(df, npartitions=7)
    got = top_k_dask_dataframe(ddf, 25, split_every=3)
    want = df.iloc[pp.topk(df["score"].to_numpy(), 25)[1]]
    pd.testing.assert_frame_equal(got, want)
    with pytest.raises(ValueError, match="df has no column 'latency'"):
        top_k_dask_dataframe(ddf, 3, score="latency")


def test_summary_pickles_through_checksummed_bytes():
    s = pp.TopK.empty(4, np.int32).update(np.arange(10, dtype=np.int32))
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(ValueError, match="split_every=1"):
        top_k_dask_array(da.ones(10, chunks=5), 3, split_every=1)


def test_unrankable_scores_name_the_argument(client):
    # 'dtype=object cannot be ranked' named neither x nor the score column
    pd = pytest.importorskip("pandas")
    ddf = dd.from_pandas(pd.DataFrame({"name": ["a", "b", "c"], "s": [1, 2, 3]}), npartitions=2)
    with pytest.raises(TypeError, match=r"^the score column 'name' has dtype .*cannot rank"):
        top_k_dask_dataframe(ddf, 1, score="name")
    x = da.from_array(np.array([1 + 1j, 2]), chunks=1)
    with pytest.raises(TypeError, match=r"^x has dtype complex128, which top-k cannot rank"):
        top_k_dask_array(x, 1)
    # numpy ints are ints
    _, i = top_k_dask_array(da.arange(10, chunks=3), 2, split_every=np.int64(2))
    assert i.tolist() == [9, 8]


def test_duplicate_score_columns_are_refused_and_duplicate_payload_is_kept():
    # a second column named like the score made df[score] a DataFrame (no .dtype)
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame([[1.0, 5.0, 7.0], [3.0, 2.0, 8.0], [2.0, 9.0, 6.0]], columns=list("spp"))
    ddf = dd.from_pandas(frame, npartitions=2)
    dup = dd.from_pandas(frame.set_axis(list("ssp"), axis=1), npartitions=2)
    with pytest.raises(ValueError, match=r"^df has 2 columns named 's'.*rename") as info:
        top_k_dask_dataframe(dup, 1, score="s")
    assert "\n" not in str(info.value)
    rows = top_k_dask_dataframe(ddf, 2, score="s")
    assert rows.to_numpy().tolist() == [[3.0, 2.0, 8.0], [2.0, 9.0, 6.0]]
