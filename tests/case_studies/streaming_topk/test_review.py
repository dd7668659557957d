"""The capstone rows of the streaming top-K case study."""

import pytest

from case_studies.streaming_topk.review import review


def test_review_small():
    (row,) = review("small")  # no GPU here: the CPU row only
    assert row["rel_error"] == 0  # identical winners to sorting everything
    assert row["speedup"] > 1 and row["optimized_ms"] > 0
    assert {"problem", "bottleneck", "key_property", "technique", "baseline", "device"} <= set(row)


def test_review_unknown_size():
    with pytest.raises(ValueError, match="size='huge' is not one of 'small', 'default', 'large'"):
        review("huge")
