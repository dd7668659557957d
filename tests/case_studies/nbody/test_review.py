"""The capstone row of the N-body case study."""

import pytest

from case_studies.nbody.review import review


def test_review_small():
    row = review("small")
    assert 0 < row["rel_error"] < 2e-3  # quadrupole, theta 0.7
    assert row["speedup"] > 1 and row["optimized_ms"] > 0 and row["baseline_ms"] > 0
    assert "scaled" in row["baseline"]
    keys = {"problem", "bottleneck", "key_property", "technique", "baseline", "device"}
    assert keys <= set(row)


def test_review_unknown_size():
    with pytest.raises(ValueError, match="size='huge' is not one of 'small', 'default', 'large'"):
        review("huge")
