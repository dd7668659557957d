"""The serialized form of a ``TopK``: a versioned header, the pairs, their id spans, a CRC-32."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

from ._checks import ID_MAX, ID_MIN, check_dtype, is_float, kernel_view, score_kind

_MAGIC = b"PPTOPK"
_VERSION = 2  # 2 adds the spans of positional ids; version 1 is still read
_HEAD = struct.Struct("<6sHQQQBB")  # magic, version, k, n_seen, start, largest, nan
_CRC = struct.Struct("<I")


def dumps(s: Any) -> bytes:
    """The bytes of a summary ``s`` (``TopK.to_bytes``: its fields are what :func:`loads`
    returns, in that order)."""
    k, dtype, largest, nan, start, n_seen = s.k, s.dtype, s.largest, s.nan, s.start, s.n_seen
    scores, ids, spans = s._scores, s._ids, s._spans
    code, dt = _dtype_code(dtype)
    head = _HEAD.pack(
        _MAGIC,
        _VERSION,
        k,
        n_seen,
        start & (2**64 - 1),
        int(largest),
        int(nan == "largest"),
    )
    body = (
        head
        + struct.pack("<B", len(code))
        + code
        + struct.pack("<Q", len(scores))
        + np.ascontiguousarray(scores).view(dt.newbyteorder("=")).astype(dt).tobytes()
        + ids.astype("<i8").tobytes()
        + struct.pack("<Q", len(spans))
        # an exclusive end may be 2**63 (the last id 2**63 - 1 used): two's complement
        + np.array([v & _U64 for span in spans for v in span], "<u8").tobytes()
    )
    return body + _CRC.pack(zlib.crc32(body))


_U64 = 2**64 - 1

#: ml_dtypes scalar types are written by name: their ``dtype.str`` is ``'<V2'``
#: (or ``'<f1'``), which NumPy reads back as raw bytes.  Written as the
#: little-endian unsigned integer of their width, read back through that view.
_ML_PREFIX = "ml_dtypes."


def _dtype_code(dtype: np.dtype) -> tuple[bytes, np.dtype]:
    """The dtype's code in the header, and the little-endian dtype its bytes are written in."""
    if dtype.type.__module__.startswith("ml_dtypes"):
        return (_ML_PREFIX + dtype.name).encode(), np.dtype(f"<u{dtype.itemsize}")
    dt = dtype.newbyteorder("<")
    return dt.str.encode(), dt


def _dtype_of(code: str) -> tuple[np.dtype, np.dtype]:
    """The scores' dtype for a header code, and the dtype their bytes were written in."""
    if code.startswith(_ML_PREFIX):
        try:
            import ml_dtypes
        except ImportError as exc:
            raise ImportError(
                f"these TopK bytes hold {code} scores; install ml_dtypes to read them"
            ) from exc
        dt = np.dtype(getattr(ml_dtypes, code[len(_ML_PREFIX) :]))
        return dt, np.dtype(f"<u{dt.itemsize}")
    dt = np.dtype(code)
    return dt.newbyteorder("="), dt


def loads(data: bytes) -> tuple[Any, ...]:
    """Fields of a summary from :func:`dumps` (as ``TopK``'s constructor takes them).

    Corrupted data raise ``ValueError``; data that are not bytes-like, ``TypeError``.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        shown = repr(data) if len(repr(data)) <= 40 else repr(data)[:37] + "..."
        raise TypeError(
            f"data={shown} is a {type(data).__name__}; TopK.from_bytes takes the bytes "
            "of TopK.to_bytes() (to read a file, use TopK.load(path))"
        )
    data = bytes(data)
    if len(data) < _HEAD.size + 1 + _CRC.size:
        raise ValueError(
            f"corrupted TopK bytes: {len(data)} bytes is shorter than any serialized TopK"
        )
    magic, version = struct.unpack_from("<6sH", data)
    if magic != _MAGIC:
        raise ValueError(
            f"corrupted TopK bytes: magic {magic!r} is not {_MAGIC!r}; "
            "this is not a serialized TopK"
        )
    if version not in (1, _VERSION):
        raise ValueError(
            f"TopK bytes of format version {version}; this propopt reads versions 1 "
            f"and {_VERSION} (upgrade propopt)"
        )
    (stored,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    body = data[: -_CRC.size]
    if zlib.crc32(body) != stored:
        raise ValueError(
            f"corrupted TopK bytes: checksum mismatch (stored {stored:#010x}, computed "
            f"{zlib.crc32(body):#010x}); the data were altered or truncated"
        )
    try:
        _, _, k, n_seen, start, largest, nanflag = _HEAD.unpack_from(body)
        off = _HEAD.size
        (clen,) = struct.unpack_from("<B", body, off)
        off += 1
        dt, stored_dt = _dtype_of(body[off : off + clen].decode())
        dt = check_dtype(dt)  # a dtype top-k ranks (TypeError, then ValueError below)
        off += clen
        (count,) = struct.unpack_from("<Q", body, off)
        off += 8
        raw = np.frombuffer(body, stored_dt, count, off)
        scores = raw.astype(stored_dt.newbyteorder("=")).view(dt)
        off += count * dt.itemsize
        ids = np.frombuffer(body, "<i8", count, off).astype(np.int64)
        off += count * 8
        spans: tuple[tuple[int, int], ...] = ()
        if version == 1:  # positions numbered from start, as that version did
            spans = ((start, start + n_seen),) if n_seen else ()
        else:
            (nspans,) = struct.unpack_from("<Q", body, off)
            off += 8
            flat = np.frombuffer(body, "<u8", 2 * nspans, off).tolist()
            off += 16 * nspans
            # back from two's complement; an end of exactly 2**63 stays (ends exceed starts)
            lows = [v - 2**64 if v >= 2**63 else v for v in flat[::2]]
            highs = [v - 2**64 if v > 2**63 else v for v in flat[1::2]]
            spans = tuple(zip(lows, highs))
    except (struct.error, ValueError, TypeError, UnicodeDecodeError, AttributeError) as exc:
        raise ValueError(f"corrupted TopK bytes: {exc}") from exc
    if off != len(body):
        raise ValueError("corrupted TopK bytes: lengths do not match the header")
    if start >= 2**63:
        start -= 2**64
    why = _broken(k, largest, nanflag, n_seen, scores, ids, spans)
    if why:
        raise ValueError(f"corrupted TopK bytes: {why}; these are not bytes TopK wrote")
    return (
        int(k),
        dt,
        bool(largest),
        ("ignore", "largest")[nanflag],
        start,
        int(n_seen),
        scores,
        ids,
        spans,
    )


def _broken(k: int, largest: int, nanflag: int, n_seen: int, scores: np.ndarray,
            ids: np.ndarray, spans: tuple[tuple[int, int], ...]) -> str:  # fmt: skip
    """Which invariant of an in-memory ``TopK`` the read fields break, or ``''``.

    A checksum only says the bytes are those written; these say that what
    was written is a summary ``TopK`` could hold: its flags, its ``k``, its
    pairs best first (ties by the smaller id), no NaN under
    ``nan='ignore'``, and its id spans sorted, disjoint and within int64.
    """
    if largest > 1 or nanflag > 1:
        return f"largest byte {largest} and NaN-policy byte {nanflag} must each be 0 or 1"
    if k > ID_MAX:
        return f"k={k} exceeds 2**63 - 1, the most a TopK keeps"
    count = scores.shape[0]
    if count > k or count > n_seen:
        return f"{count} pairs held, more than k={k} or the {n_seen} scores seen"
    kind = score_kind(scores.dtype)
    if kind in ("b", "i") and count:  # bool bytes 0/1; ml_dtypes ints within their bits
        bits = f"u{scores.dtype.itemsize}"
        back = scores.astype(np.int64).astype(scores.dtype)
        bad = np.flatnonzero(back.view(bits) != scores.view(bits))
        if bad.size:
            return f"scores[{bad[0]}] has the bytes of no {scores.dtype} value"
    v = kernel_view(scores)
    nan = np.isnan(v) if is_float(scores.dtype) else np.zeros(count, bool)
    if nanflag == 0 and nan.any():
        return f"scores[{np.argmax(nan)}] is NaN, which nan='ignore' never holds"
    if count > 1:
        a, b, ia, ib, an, bn = v[:-1], v[1:], ids[:-1], ids[1:], nan[:-1], nan[1:]
        with np.errstate(invalid="ignore"):
            beats = (b > a) if largest else (b < a)  # the later pair ranks first: out of order
            tie = (a == b) | (an & bn)
        if largest:
            beats = (beats & ~an & ~bn) | (bn & ~an)  # NaN ranks above every number
        else:
            beats = (beats & ~an & ~bn) | (an & ~bn)
        wrong = np.flatnonzero(beats | (tie & (ib < ia)))
        if wrong.size:
            i = int(wrong[0])
            return (
                f"pair {i + 1} ({scores[i + 1]}, id {ids[i + 1]}) ranks before pair {i} "
                f"({scores[i]}, id {ids[i]}), but pairs are held best first, ties by smaller id"
            )
    end = None
    for lo, hi in spans:
        if not (ID_MIN <= lo < hi <= ID_MAX + 1) or (end is not None and lo <= end):
            return f"id span ({lo}, {hi}) is empty, out of int64 or not after the one before"
        end = hi
    if sum(hi - lo for lo, hi in spans) > n_seen:
        return f"id spans number more scores than the {n_seen} seen"
    return ""
