"""The capstone rows of the N-body case study."""

import numpy as np
import pytest

from case_studies.nbody import plummer
from case_studies.nbody.review import gpu_row, review


def test_review_small():
    (row,) = review("small")  # no GPU here: the CPU row only
    assert 0 < row["rel_error"] < 2e-3  # quadrupole, theta 0.7
    assert row["speedup"] > 1 and row["optimized_ms"] > 0 and row["baseline_ms"] > 0
    assert "scaled" in row["baseline"]
    keys = {"problem", "bottleneck", "key_property", "technique", "baseline", "device"}
    assert keys <= set(row)


def test_review_unknown_size():
    with pytest.raises(ValueError, match="size='huge' is not one of 'small', 'default', 'large'"):
        review("huge")


def test_gpu_row_in_the_simulator():
    pytest.importorskip("numba.cuda")
    pos, _, m = plummer(300, seed=2)
    idx = np.arange(0, 300, 30)
    row = gpu_row(pos, m, idx, repeats=1, device="cuda (simulator)")
    assert row["device"] == "cuda (simulator)" and "GPU thread per target" in row["technique"]
    assert 0 < row["rel_error"] < 5e-3  # the same tree and theta as the CPU walk
    assert row["baseline_ms"] > 0 and row["optimized_ms"] > 0
    assert row["speedup"] == pytest.approx(row["baseline_ms"] / row["optimized_ms"])
