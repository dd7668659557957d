"""``TopK.from_bytes`` rebuilds only summaries a ``TopK`` could hold.

A valid checksum says the bytes are those written, not that what was written
is a summary: every blob here carries a correct CRC-32, computed as the
format does, and ``from_bytes`` must either raise ``ValueError`` or return a
summary that keeps every invariant of an in-memory ``TopK`` (checked below
in plain Python, sharing no code with the library) and writes the same bytes
back.
"""

import math
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from propopt.associativity import TopK

HEAD = struct.Struct("<6sHQQQBB")  # magic, version, k, n_seen, start, largest, nan
U64 = 2**64 - 1


def blob(k, largest, nan, n_seen, start, code, scores, ids, spans, version=2):
    """The bytes of the documented format, with a correct CRC-32."""
    body = HEAD.pack(b"PPTOPK", version, k, n_seen, start & U64, largest, nan)
    body += struct.pack("<B", len(code)) + code + struct.pack("<Q", len(ids))
    body += bytes(scores) + np.asarray(ids, "<i8").tobytes()
    if version == 2:
        body += struct.pack("<Q", len(spans))
        body += np.array([v & U64 for span in spans for v in span], "<u8").tobytes()
    return body + struct.pack("<I", zlib.crc32(body))


def keeps_invariants(t):
    """Every invariant of an in-memory TopK, in plain Python."""
    scores = [float(v) for v in t._scores.tolist()]
    ids = [int(i) for i in t._ids.tolist()]
    assert t.largest in (True, False) and t.nan in ("ignore", "largest")
    assert 0 <= t.k <= 2**63 - 1
    assert len(scores) == len(ids) <= min(t.k, t.n_seen)
    assert -(2**63) <= t.start <= 2**63 - 1
    if t._scores.dtype == np.bool_:
        assert set(t._scores.view(np.uint8).tolist()) <= {0, 1}
    if t.nan == "ignore":
        assert not any(math.isnan(v) for v in scores)

    def rank(v, i):  # smaller ranks first: best first, ties by smaller id
        if math.isnan(v):
            return (0 if t.largest else 2, 0.0, i)
        return (1, -v if t.largest else v, i)

    keys = [rank(v, i) for v, i in zip(scores, ids)]
    assert keys == sorted(keys)
    end = None
    for lo, hi in t._spans:
        assert -(2**63) <= lo < hi <= 2**63
        assert end is None or lo > end  # sorted, disjoint, adjacent ones coalesced
        end = hi
    assert sum(hi - lo for lo, hi in t._spans) <= t.n_seen


def test_a_valid_checksum_does_not_make_unsorted_pairs_a_summary():
    # before: accepted, and one update gave [2.5, 1.0, 3.0, 2.0]
    scores = np.array([1.0, 2.5], "<f8").tobytes()
    data = blob(4, 1, 0, 2, 0, b"<f8", scores, [0, 1], [(0, 2)])
    with pytest.raises(ValueError, match=r"^corrupted TopK bytes: pair 1 \(2.5, id 1\) ranks "
                       r"before pair 0 \(1.0, id 0\)") as info:  # fmt: skip
        TopK.from_bytes(data)
    assert "\n" not in str(info.value)
    good = blob(4, 1, 0, 2, 0, b"<f8", np.array([2.5, 1.0]).tobytes(), [1, 0], [(0, 2)])
    t = TopK.from_bytes(good).update(np.array([3.0, 2.0]))
    assert t.result()[0].tolist() == [3.0, 2.5, 2.0, 1.0]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (dict(nan=0, scores=[math.nan]), r"scores\[0\] is NaN, which nan='ignore' never holds"),
        (dict(largest=7), r"largest byte 7 and NaN-policy byte 1 must each be 0 or 1"),
        (dict(nan=2), r"largest byte 1 and NaN-policy byte 2 must each be 0 or 1"),
        (dict(k=U64), r"k=18446744073709551615 exceeds 2\*\*63 - 1"),
        (dict(spans=[(5, 3)]), r"id span \(5, 3\) is empty"),
        (dict(spans=[(0, 1), (1, 2)]), r"id span \(1, 2\) is .*not after the one before"),
        (dict(spans=[(0, 9)]), r"id spans number more scores than the 2 seen"),
        (dict(n_seen=0), r"1 pairs held, more than k=4 or the 0 scores seen"),
        (dict(k=0), r"1 pairs held, more than k=0"),
        (dict(code=b"|O"), r"dtype=object cannot be ranked"),
        (dict(code=b"|b1", scores=b"\x02"), r"scores\[0\] has the bytes of no bool value"),
    ],
)
def test_blobs_that_break_an_invariant_are_value_errors(fields, match):
    f = dict(k=4, largest=1, nan=1, n_seen=2, start=0, code=b"<f8", scores=[1.0], ids=[0],
             spans=[(0, 2)]) | fields  # fmt: skip
    if isinstance(f["scores"], list):
        f["scores"] = np.array(f["scores"], "<f8").tobytes()
    with pytest.raises(ValueError, match="^corrupted TopK bytes: " + match) as info:
        TopK.from_bytes(blob(**f))
    assert "\n" not in str(info.value)


def test_k_past_int64_is_refused_in_memory_too():
    with pytest.raises(ValueError, match=r"^k=9223372036854775808: a TopK keeps at most"):
        TopK.empty(2**63, np.float32)
    assert TopK.from_bytes(TopK.empty(2**63 - 1, np.float32).to_bytes()).k == 2**63 - 1


DTYPES = [(b"<f8", "<f8"), (b"<f4", "<f4"), (b"<i4", "<i4"), (b"|u1", "|u1"), (b"|b1", "|u1")]
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                    st.integers(-3, 3).map(float), st.just(math.nan))  # fmt: skip


@st.composite
def blobs(draw):
    code, raw = draw(st.sampled_from(DTYPES))
    count = draw(st.integers(0, 5))
    values = draw(st.lists(NUMBERS, min_size=count, max_size=count))
    ids = draw(st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 3),
                        min_size=count, max_size=count))  # fmt: skip
    largest = draw(st.sampled_from([0, 1, 0, 1, 2]))
    nan = draw(st.sampled_from([0, 1, 0, 1, 3]))
    if code == b"|b1":
        scores = bytes(draw(st.lists(st.sampled_from([0, 1, 1, 0, 2]), min_size=count,
                                     max_size=count)))  # fmt: skip
    elif raw in ("<i4", "|u1"):
        lo, hi = (-(2**31), 2**31 - 1) if raw == "<i4" else (0, 255)
        ints = [int(v) if math.isfinite(v) and lo <= v <= hi else 0 for v in values]
        scores = np.array(ints, raw).tobytes()
    else:
        scores = np.array(values, raw).tobytes()
    if draw(st.booleans()):  # put the pairs in TopK's order, so that many blobs are valid
        v = np.frombuffer(scores, np.dtype(code.decode()) if code != b"|b1" else "|u1")
        v = [float(a) for a in v.tolist()]

        def rank(j):
            if math.isnan(v[j]):
                return (0 if largest else 2, 0.0, ids[j])
            return (1, -v[j] if largest else v[j], ids[j])

        order = sorted(range(count), key=rank)
        size = np.dtype(raw).itemsize
        scores = b"".join(scores[j * size : (j + 1) * size] for j in order)
        ids = [ids[j] for j in order]
    k = draw(st.sampled_from([count, count + 1, 2**63 - 1, max(count - 1, 0), U64]))
    n_seen = draw(st.sampled_from([count, count + 3, 2**40, max(count - 1, 0), U64]))
    start = draw(st.integers(-(2**63), 2**63 - 1))
    edges = sorted(draw(st.lists(st.integers(-(2**63), 2**63), max_size=4)))
    spans = list(zip(edges[::2], edges[1::2]))
    if draw(st.booleans()):
        spans = spans[::-1]
    return blob(k, largest, nan, n_seen, start, code, scores, ids, spans)


@settings(max_examples=400, deadline=None)
@given(blobs())
def test_every_valid_checksum_blob_is_refused_or_a_true_summary(data):
    try:
        t = TopK.from_bytes(data)
    except ValueError as e:
        assert str(e).startswith("corrupted TopK bytes: ") and "\n" not in str(e)
        return
    keeps_invariants(t)
    assert t.to_bytes() == data  # the same summary, written back byte for byte
    assert TopK.from_bytes(t.to_bytes()) == t
