"""The long-row filter of top-k (``topk._filter``): a guessed threshold, blocks skipped whole.

Blocks with no element passing the threshold are skipped after one
vectorized count, so the edge cases are elements equal to the threshold
(ties at the k-th value, on and off the sampled runs), NaN inside skipped
blocks, the running threshold raised by compactions, and a guess that
too few elements pass (the caller then runs the exact path).  Answers are
compared with a float64 ``np.lexsort`` of ``(rank, value, position)``
written here.
"""

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from propopt import topk
from propopt.associativity.topk import _filter, _threads

# the sample needs n // LINES >= its runs' length (128 float32); 2^17 is the
# shortest row with room for it and for the candidate buffer
N = 1 << 17


def lexsort_ref(x, k, largest, nanbig):
    """Best ``k`` positions of ``x`` by (NaN rank, value, position), in float64."""
    v = x.astype(np.float64)
    nan = np.isnan(v)
    keep = np.flatnonzero(~nan) if not nanbig else np.arange(v.shape[0])
    vv = np.where(nan, 0.0, v)[keep]
    nn = nan[keep]
    if largest:
        order = np.lexsort((keep, -vv, ~nn if nanbig else nn))
    else:
        order = np.lexsort((keep, vv, nn))
    return keep[order][:k]


def _row(kind, rng, n, dtype):
    if kind == "normal":
        x = rng.standard_normal(n)
    elif kind == "few values":
        x = rng.integers(0, 6, n).astype(np.float64)
    elif kind == "sorted":
        x = np.sort(rng.integers(0, 1000, n)).astype(np.float64)
    elif kind == "reversed":
        x = np.sort(rng.standard_normal(n))[::-1]
    else:  # constant
        x = np.full(n, 2.0)
    return np.ascontiguousarray(x.astype(dtype))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    kind=st.sampled_from(["normal", "few values", "sorted", "reversed", "constant"]),
    dtype=st.sampled_from([np.float32, np.float64, np.int32, np.int64]),
    k=st.sampled_from([1, 2, 50, 700, N // 64]),
    largest=st.booleans(),
    nanbig=st.booleans(),
    ordered=st.booleans(),
    nan_frac=st.sampled_from([0.0, 0.001, 0.3, 0.9]),
    inf_frac=st.sampled_from([0.0, 0.5]),
    pieces=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 2**16),
)
def test_filter_matches_a_float64_lexsort(
    kind, dtype, k, largest, nanbig, ordered, nan_frac, inf_frac, pieces, seed
):
    rng = np.random.default_rng(seed)
    x = _row(kind, rng, N, dtype)
    if x.dtype.kind == "f":
        x[rng.random(N) < inf_frac] = -np.inf if largest else np.inf
        x[rng.random(N) < nan_frac] = np.nan
    got = _filter.top_row(x, k, largest, nanbig, ordered, pieces)
    if got is None:  # the guess failed: the caller runs the exact path instead
        return
    want = lexsort_ref(x, k, largest, nanbig)
    if ordered:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_array_equal(np.sort(got), np.sort(want))


@pytest.mark.parametrize("nanbig", [False, True])
@pytest.mark.parametrize("largest", [True, False])
def test_ties_at_the_threshold_in_skipped_and_searched_blocks(largest, nanbig):
    """Every element equal to the k-th value passes the stepped threshold; the earliest win."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 100, N).astype(np.float32)  # ~1300 copies of each value
    x[rng.integers(0, N, 3000)] = np.nan  # NaN in blocks that are skipped and searched
    for k in (1, 1000, 1500):
        got = _filter.top_row(x, k, largest, nanbig, True, 2)
        # a few values: the guess holds, unless the sample's NaN (ranked first)
        # fill its rank r
        assert got is not None or (nanbig and largest)
        if got is None:
            continue
        np.testing.assert_array_equal(got, lexsort_ref(x, k, largest, nanbig))


def test_nan_largest_fills_the_top_k_and_stops_the_scan():
    """With NaN largest and more than k NaNs the k-th best is NaN: the first k NaNs win."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(N).astype(np.float32)
    x[rng.random(N) < 0.02] = np.nan  # ~2600 NaN; the sample holds fewer than r of them
    got = _filter.top_row(x, 2000, True, True, True, 1)
    want = lexsort_ref(x, 2000, True, True)
    if got is not None:
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(topk(x, 2000, nan="largest")[1], want)


@pytest.mark.parametrize("pieces", [1, 2])
def test_a_lone_nan_in_a_block_passes_with_nan_largest(pieces):
    """``not (x <= thr)`` passes NaN: a block whose only candidate is a NaN is searched."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal(N).astype(np.float32)
    x[rng.choice(N, 20, replace=False)] = np.nan  # fewer than the sample's rank: a guess is made
    got = _filter.top_row(x, 50, True, True, True, pieces)
    assert got is not None
    np.testing.assert_array_equal(got, lexsort_ref(x, 50, True, True))
    assert np.isnan(x[got[:20]]).all()


def _sampled_top(n, k):
    """A row whose best values fill the first sampled runs: fewer than k pass the guess."""
    stride = n // _filter.RUNS
    run = _filter.RUN_BYTES // 4
    runs = -(-_filter.SPEC * k * _filter.RUNS // n) + 1  # as many as the guess ranks
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    for i in range(runs):
        x[i * stride : i * stride + run] = 100 + run * i + np.arange(run)
    assert runs * run < k
    return x


def test_a_failed_guess_returns_nothing():
    x = _sampled_top(1 << 20, 1000)
    for pieces in (1, 2):
        assert _filter.top_row(x, 1000, True, False, True, pieces) is None


def test_a_failed_guess_falls_back_to_the_exact_path():
    n = _threads.SAMPLE_ABOVE  # long enough for topk to try the guess
    x = _sampled_top(n, 1000)
    assert _filter.top_row(x, 1000, True, False, True, 1) is None
    np.testing.assert_array_equal(topk(x, 1000)[1], lexsort_ref(x, 1000, True, False))


def test_random_rows_take_the_guess():
    """On exchangeable data the guess holds (fewer than k pass with probability ~1e-5)."""
    for seed in range(5):
        x = np.random.default_rng(seed).standard_normal(N).astype(np.float32)
        got = _filter.top_row(x, 1000, True, False, True, 1)
        assert got is not None
        np.testing.assert_array_equal(got, lexsort_ref(x, 1000, True, False))


def _avx2() -> bool:
    import llvmlite.binding as llvm

    return "+avx2" in llvm.get_host_cpu_features().flatten().split(",")


@pytest.mark.skipif(not _avx2(), reason="the host has no AVX2")
@pytest.mark.parametrize("nanbig", [False, True])
def test_the_block_test_is_vector_code(nanbig):
    """The filter's count compiles to 8-lane compares (``vcmp*ps`` on ymm registers).

    A fresh, uncached compile of ``_piece`` (numba does not disassemble
    cached code).  With NaN largest the test is ``not (x <= thr)``
    (``vcmpnleps``, which also passes NaN); else ``thr < x`` (``vcmpltps``).
    """
    piece = numba.njit(_filter._piece.py_func)
    x = np.zeros(1 << 12, np.float32)
    x.flags.writeable = False
    cap = 2 * 10 + _filter.SLACK + _filter.SUB
    bufs = (np.empty(cap, np.float32), np.empty(cap, np.int64), np.empty(cap, np.int64))
    piece(x, 0, x.shape[0], 10, True, nanbig, np.float32(0.5), *bufs)
    (asm,) = piece.inspect_asm().values()
    want = "vcmpnleps" if nanbig else "vcmpltps"
    assert any(want in line and "%ymm" in line for line in asm.splitlines())
