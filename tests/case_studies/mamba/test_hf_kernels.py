"""The decode kernels' matrix-vector product against a float64 product written out."""

import numpy as np
import pytest

from propopt_case_studies.mamba.hf import _kernels as K


def _reference(W, bias, x):
    n, k = W.shape
    out = np.zeros((x.shape[0], n))
    for b in range(x.shape[0]):
        for r in range(n):
            out[b, r] = sum(float(W[r, j]) * float(x[b, j]) for j in range(k)) + float(bias[r])
    return out


@pytest.mark.parametrize("n", [1, 3, 7, 8, 9, 17, 32, 33, 50])  # whole and partial blocks of 8, 32
@pytest.mark.parametrize("nb", [1, 3])
@pytest.mark.parametrize("accumulate", [False, True])
def test_gemv_matches_float64(n, nb, accumulate):
    rng = np.random.default_rng(n * 10 + nb)
    k = 37
    W = rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    x = rng.standard_normal((nb, k)).astype(np.float32)
    start = rng.standard_normal((nb, n)).astype(np.float32)
    out = start.copy()
    K._gemv(W, bias, x, out, accumulate, np.float32(1))
    want = _reference(W, bias, x) + (start if accumulate else 0)
    # rounding of a float32 sum of k + 2 terms: at most (k + 2) u times the sum of magnitudes
    size = np.abs(x).astype(np.float64) @ np.abs(W).T + np.abs(bias) + np.abs(start)
    assert np.all(np.abs(out - want) <= (k + 2) * 2.0**-24 * size)
