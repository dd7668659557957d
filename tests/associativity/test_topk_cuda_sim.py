"""CUDA top-k kernels in numba's CUDA simulator (tiny inputs, small blocks).

``select`` is called on simulator device arrays holding the integer view of
the scores, as ``_topk_cuda.topk`` does with torch CUDA tensors; the result
must equal the sorted() oracle, ties and NaN policy included.
"""

import numpy as np
import pytest

from propopt.associativity.topk import _cuda as _topk_cuda, _reference as ref

cuda = pytest.importorskip("numba.cuda")


@pytest.fixture(autouse=True)
def small_blocks():
    old = dict(_topk_cuda._config)
    _topk_cuda._config.update(threads=16, items=4)
    yield
    _topk_cuda._config.update(old)


def _run(x, k, largest, nan="ignore"):
    wide = x.dtype.itemsize == 8
    bits = x.view(np.int64 if wide else np.int32)
    return _topk_cuda.select(
        cuda.to_device(np.ascontiguousarray(bits)),
        wide,
        x.dtype.kind == "f",
        min(k, x.shape[1]),
        largest,
        nan == "largest",
    )


@pytest.mark.parametrize(
    "dtype, largest, k",
    [
        (np.float32, True, 7),
        (np.float32, False, 30),
        (np.int32, False, 1),
        (np.float64, True, 30),
        (np.int64, False, 7),
    ],
)
def test_select_matches_reference(dtype, largest, k):
    rng = np.random.default_rng(5)
    x = rng.integers(-6, 6, (2, 30)).astype(dtype)  # ties spanning segments
    if dtype == np.float32:
        x[0, :3] = [-0.0, np.inf, -np.inf]
    np.testing.assert_array_equal(_run(x, k, largest), ref.topk(x, k, largest))


@pytest.mark.parametrize("largest", [True, False])
def test_nan_policies(largest):  # 1 row of 8: 1 block per launch
    x = np.array([[1.0, np.nan, 3.0, -np.nan, 2.0, 3.0, np.nan, 0.5]], np.float32)
    np.testing.assert_array_equal(_run(x, 3, largest), ref.topk(x, 3, largest))
    got = _run(x, 6, largest, "largest")
    np.testing.assert_array_equal(got, ref.topk(x, 6, largest, "largest"))
    assert _run(x, 8, largest).shape == (1, 5)  # 3 NaNs ignored


@pytest.mark.parametrize("largest", [True, False])
def test_unordered_select_is_the_same_set(largest):
    x = np.random.default_rng(6).integers(-6, 6, (2, 30)).astype(np.float32)  # ties
    bits = cuda.to_device(np.ascontiguousarray(x.view(np.int32)))
    got = _topk_cuda.select(bits, False, True, 7, largest, False, ordered=False)
    want = ref.topk(x, 7, largest)
    np.testing.assert_array_equal(np.sort(got, axis=1), np.sort(want, axis=1))
    assert not np.array_equal(got, want)  # the host sort was skipped


@pytest.mark.parametrize("largest", [True, False])
def test_rows_of_many_tiles_and_blocks(largest, monkeypatch):
    # 200 keys a row: 4 tiles of 16 x 4, and 2 histogram blocks a row that
    # stride over it; ties of the k-th value span tiles, so only some are taken
    monkeypatch.setattr(_topk_cuda, "_TARGET_BLOCKS", 4)
    x = np.random.default_rng(7).integers(-10, 10, (2, 200)).astype(np.float32)
    np.testing.assert_array_equal(_run(x, 50, largest), ref.topk(x, 50, largest))


def test_order_sorts_best_first_then_by_index():
    torch = pytest.importorskip("torch")
    keys = np.array([[5, 9, 5, 1, 2**63 + 3, 9]], np.uint64)  # unsigned order: col 4 is best
    pos = torch.tensor([[5, 0, 4, 1, 2]])
    got = _topk_cuda.order(pos, torch.from_numpy(keys.view(np.int64)))
    assert got.tolist() == [[4, 1, 5, 0, 2]]
