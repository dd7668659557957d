"""The serialized form of a ``TopK``: a versioned header, the pairs, their id spans, a CRC-32."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

_MAGIC = b"PPTOPK"
_VERSION = 2  # 2 adds the spans of positional ids; version 1 is still read
_HEAD = struct.Struct("<6sHQQQBB")  # magic, version, k, n_seen, start, largest, nan
_CRC = struct.Struct("<I")


def dumps(
    k: int,
    dtype: np.dtype,
    largest: bool,
    nan: str,
    start: int,
    n_seen: int,
    scores: np.ndarray,
    ids: np.ndarray,
    spans: tuple[tuple[int, int], ...],
) -> bytes:
    """The bytes of a summary with these fields (``TopK.to_bytes``)."""
    dt = dtype.newbyteorder("<")
    code = dt.str.encode()
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
        + scores.astype(dt).tobytes()
        + ids.astype("<i8").tobytes()
        + struct.pack("<Q", len(spans))
        + np.asarray(spans, "<i8").reshape(-1).tobytes()
    )
    return body + _CRC.pack(zlib.crc32(body))


def loads(data: bytes) -> tuple[Any, ...]:
    """Fields of a summary from :func:`dumps` (as ``TopK``'s constructor takes them).

    Corrupted data raise ``ValueError``.
    """
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
        dt = np.dtype(body[off : off + clen].decode())
        off += clen
        (count,) = struct.unpack_from("<Q", body, off)
        off += 8
        scores = np.frombuffer(body, dt, count, off).astype(dt.newbyteorder("="))
        off += count * dt.itemsize
        ids = np.frombuffer(body, "<i8", count, off).astype(np.int64)
        off += count * 8
        spans: tuple[tuple[int, int], ...] = ()
        if version == 1:  # positions numbered from start, as that version did
            spans = ((start, start + n_seen),) if n_seen else ()
        else:
            (nspans,) = struct.unpack_from("<Q", body, off)
            off += 8
            flat = np.frombuffer(body, "<i8", 2 * nspans, off).tolist()
            off += 16 * nspans
            spans = tuple(zip(flat[::2], flat[1::2]))
    except (struct.error, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise ValueError(f"corrupted TopK bytes: {exc}") from exc
    if off != len(body) or count > k or k < 1:
        raise ValueError("corrupted TopK bytes: lengths do not match the header")
    if start >= 2**63:
        start -= 2**64
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
