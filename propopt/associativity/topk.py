"""Top-k as a mergeable summary: ``TopK`` and the ``topk`` verb.

The law: for multisets ``A``, ``B``, ``C`` of ``(score, id)`` pairs,
``top_k(A ∪ B) == merge(top_k(A), top_k(B))``, and ``merge`` is associative
and commutative::

    merge(merge(a, b), c) == merge(a, merge(b, c)),   merge(a, b) == merge(b, a)

because the order used is *total*: ``(s, i)`` ranks before ``(t, j)`` when
``s`` is better than ``t`` (larger, or smaller with ``largest=False``), or
``s == t`` and ``i < j``.  A total order makes the k best of any multiset
unique, so the answer does not depend on how the data were chunked, how many
threads ran, or in which order summaries were merged.  That licenses chunked,
multi-threaded, streaming and distributed top-k (see the streaming top-K case
study).

NaN: ignored by default (``nan='ignore'``: a NaN is never among the best);
``nan='largest'`` ranks NaN above every number, torch's convention (so NaNs
come first with ``largest=True`` and last with ``largest=False``).
"""

from __future__ import annotations

import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from os import PathLike
from typing import Any, Literal

import numpy as np

from .. import _dispatch, threads
from . import _topk_cpu, _topk_reference

NanPolicy = Literal["ignore", "largest"]
NAN_POLICIES: tuple[str, ...] = ("ignore", "largest")
METHODS: tuple[str, ...] = ("auto", "cpu", "cuda", "reference")

#: Each thread's piece of a row holds at least this many elements times k
#: (below it, merging the per-thread candidates costs more than it saves).
MIN_PIECE_PER_K = 8

#: ... and at least this many elements (a parallel region costs ~10 µs).
MIN_PIECE = 1 << 16

#: A seeded call (a summary that already holds k pairs taking a chunk) only
#: filters, at memory speed; below this many elements it runs on the calling
#: thread, above it in one parallel region (no hand-off to a pool).
#: Filtering 100 seeded chunks of 10^6 float32: 12.7-13.5 ms on one thread,
#: 11.8 ms in parallel regions, 22.7-24.5 ms through the thread pool.
SEEDED_ONE_THREAD_BELOW = 1 << 18

#: An in-memory row at least this long, and this many times ``k``, is first
#: sampled along its whole length: the best ``k`` of a strided sample are
#: ``k`` real elements, so the ``k``-th of them is a lower bound for the
#: ``k``-th of the row and seeds the filter.  Without it a row in ascending
#: order raised the threshold element by element (10^8 float32, k = 1000:
#: 360-530 ms against 15-23 ms for the same values in random order).
SAMPLE_ABOVE = 1 << 22
SAMPLE_PER_K = 64
#: Sample size (elements, spread evenly over the row).
SAMPLE = 1 << 16

_MAGIC = b"PPTOPK"
_VERSION = 2  # 2 adds the spans of positional ids; version 1 is still read
_HEAD = struct.Struct("<6sHQQQBB")  # magic, version, k, n_seen, start, largest, nan
_CRC = struct.Struct("<I")


# ------------------------------------------------------------------ helpers
def _check_k(k: Any, least: int = 1) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {k!r}")
    if k < least:
        raise ValueError(f"k={k}: k must be >= {least}")
    return int(k)


def _check_nan(nan: Any) -> bool:
    if nan not in NAN_POLICIES:
        raise ValueError(f"nan={nan!r} is not one of {', '.join(map(repr, NAN_POLICIES))}")
    return bool(nan == "largest")


def _check_dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype={dtype!r} is not a NumPy dtype") from exc
    if dt.kind not in "biuf" or dt.itemsize > 8:
        raise TypeError(
            f"dtype={dt} cannot be ranked; top-k takes bool, integer and float scores "
            "(cast complex or object scores to a real dtype first)"
        )
    return dt


def kernel_view(x: np.ndarray) -> np.ndarray:
    """Scores in one of the four dtypes the kernels are compiled for, same order.

    float16 -> float32 and small integers -> int32 (exact); uint32 -> int64;
    uint64 -> int64 with the top bit flipped (order preserving).
    """
    dt = x.dtype
    if dt in (np.float32, np.float64, np.int32, np.int64):
        return x
    if dt.kind == "f":
        return x.astype(np.float32)
    if dt == np.uint64:
        return (x ^ np.uint64(1 << 63)).view(np.int64)
    if dt == np.uint32:
        return x.astype(np.int64)
    return x.astype(np.int32)


def _pieces(rows: int, n: int, k: int, seeded: bool = False) -> int:
    threads = _topk_cpu_threads()
    if rows >= threads or (seeded and rows * n < SEEDED_ONE_THREAD_BELOW):
        return 1
    per = max(MIN_PIECE, MIN_PIECE_PER_K * k)
    return max(1, min(threads // rows, n // per))


def _topk_cpu_threads() -> int:
    import numba

    return int(numba.get_num_threads())


_NO_IDS = np.empty(0, np.int64)


def _best_positions(
    x2: np.ndarray,
    k: int,
    largest: bool,
    nanbig: bool,
    ids: np.ndarray | None = None,
    seed: tuple[Any, int] | None = None,
    ordered: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Kernel call: best ``min(k, n)`` positions per row of ``x2`` and the counts.

    With ``seed=(score, id)`` only pairs that beat it are returned.  With
    ``ordered=False`` a row's positions may come in any order (no final sort
    where that saves one).
    """
    n = x2.shape[1]
    kk = min(k, n)
    xv = np.ascontiguousarray(kernel_view(x2))
    has_ids = ids is not None
    idv = ids if ids is not None else _NO_IDS
    with threads.sized():
        sampled = False
        if seed is None and not has_ids and x2.shape[0] == 1:
            bound = _sample_bound(xv[0], kk, largest, nanbig)
            if bound is not None:
                # pairs strictly beating a value just worse than the bound: every
                # element at least as good as the bound, ties included
                sampled, sv, sid = True, bound, np.int64(-1)
        if not sampled:
            sv = kernel_view(np.asarray([seed[0] if seed else 0], x2.dtype))[0]
            sid = np.int64(seed[1] if seed else 0)
        return _best_positions_sized(
            x2, kk, largest, nanbig, xv, idv, has_ids, seed if not sampled else (sv, -1), sv,
            sid, sampled, ordered,
        )  # fmt: skip


def _sample_bound(xv: np.ndarray, k: int, largest: bool, nanbig: bool) -> Any:
    """A value just worse than the ``k``-th best of a strided sample of ``xv``, or None.

    The sample's best ``k`` are ``k`` elements of the row, so every element of
    the row's best ``k`` is at least as good as the sample's ``k``-th: all of
    them beat the returned value strictly.  None for short rows, too few
    non-NaN samples, or a ``k``-th best with nothing worse than it.
    """
    n = xv.shape[0]
    if n < SAMPLE_ABOVE or n < SAMPLE_PER_K * k:
        return None
    stride = n // max(SAMPLE, SAMPLE_PER_K * k // 4)
    sample = np.ascontiguousarray(xv[::stride])
    best, _ = _topk_cpu.topk_one(sample, _NO_IDS, False, k, largest, nanbig, False, sample[0],
                                 np.int64(0), True)  # fmt: skip
    if best.shape[0] < k:
        return None
    v = sample[best[k - 1]]
    if xv.dtype.kind == "f":
        if np.isnan(v) or np.isinf(v):
            return None
        return np.nextafter(v, -np.inf if largest else np.inf, dtype=xv.dtype)
    info = np.iinfo(xv.dtype)
    if v == (info.min if largest else info.max):
        return None
    return xv.dtype.type(v - 1 if largest else v + 1)


def _best_positions_sized(
    x2: np.ndarray,
    kk: int,
    largest: bool,
    nanbig: bool,
    xv: np.ndarray,
    idv: np.ndarray,
    has_ids: bool,
    seed: tuple[Any, int] | None,
    sv: Any,
    sid: Any,
    sampled: bool = False,
    ordered: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    rows, n = x2.shape
    pieces = _pieces(rows, n, kk, seed is not None and not sampled)
    if rows == 1 and pieces == 1:
        p1, _ = _topk_cpu.topk_one(
            xv[0], idv, has_ids, kk, largest, nanbig, seed is not None, sv, sid, ordered
        )
        pos = np.zeros((1, kk), np.int64)
        pos[0, : p1.shape[0]] = p1
        return pos, np.array([p1.shape[0]])
    if rows == 1 and (seed is None or sampled):
        p1 = _one_row_threads(xv[0], idv, has_ids, kk, pieces, largest, nanbig, seed, sv, sid)
        pos = np.zeros((1, kk), np.int64)
        pos[0, : p1.shape[0]] = p1
        return pos, np.array([p1.shape[0]])
    pos, counts, _ = _topk_cpu.topk_rows(
        xv, idv, has_ids, kk, pieces, largest, nanbig, seed is not None, sv, sid, ordered
    )
    return pos, counts


_pool: ThreadPoolExecutor | None = None


def _one_row_threads(
    x: np.ndarray,
    idv: np.ndarray,
    has_ids: bool,
    k: int,
    pieces: int,
    largest: bool,
    nanbig: bool,
    seed: Any,
    sv: Any,
    sid: Any,
) -> np.ndarray:
    """One long row: a piece per thread through the GIL-free serial kernel, then merges.

    Python threads rather than a numba parallel region: on a 2-core machine
    shared with other work, a parallel region's barrier waits (spinning)
    for a descheduled thread; measured under load at n = 10^7, the region
    took 112 ms against 31 ms for threads that block on their result.
    """
    global _pool
    if _pool is None or _pool._max_workers < pieces:  # type: ignore[attr-defined]
        _pool = ThreadPoolExecutor(max(pieces, _topk_cpu_threads()))
    n = x.shape[0]
    step = (n + pieces - 1) // pieces

    def run(q: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = q * step, min(n, (q + 1) * step)
        ids = idv[a:b] if has_ids else idv
        p, _ = _topk_cpu.topk_one(  # sorted: the pieces are merged as sorted lists
            x[a:b], ids, has_ids, k, largest, nanbig, seed is not None, sv, sid, True
        )
        p = p + a
        return p, (idv[p] if has_ids else p)

    # the calling thread takes piece 0 itself: one hand-off fewer
    futures = [_pool.submit(run, q) for q in range(1, pieces)]
    parts = [run(0)] + [f.result() for f in futures]
    pos, ids = parts[0]
    for p2, i2 in parts[1:]:
        side, at = _topk_cpu.merge_two(x[pos], ids, x[p2], i2, k, largest, nanbig)
        first = side == 0
        npos = np.empty(side.shape[0], np.int64)
        nids = np.empty(side.shape[0], np.int64)
        npos[first], nids[first] = pos[at[first]], ids[at[first]]
        npos[~first], nids[~first] = p2[at[~first]], i2[at[~first]]
        pos, ids = npos, nids
    return pos


# --------------------------------------------------------------------- TopK
class TopK:
    """A mergeable summary of the ``k`` best ``(score, id)`` pairs seen so far.

    Build one with :meth:`TopK.empty`, feed it with :meth:`update` (any
    number of chunks), combine summaries with :func:`merge` and read the
    answer with :meth:`result`.  Serialize with :meth:`to_bytes` /
    :meth:`from_bytes` (or :meth:`save` / :meth:`load`) to checkpoint a
    stream or merge summaries computed elsewhere.

    The law it relies on: ``top_k(A ∪ B) == merge(top_k(A), top_k(B))``;
    :func:`merge` is associative and commutative, exactly (no rounding is
    involved), because ties between equal scores go to the smaller id.

    Notes
    -----
    Memory is ``O(k)``.  :meth:`update` with ``n`` scores costs ``O(n)``
    amortized on all threads whatever their order (a threshold filter; see
    :func:`topk`) plus ``O(k)`` to merge and ``O(m log m)`` to sort the
    ``m <= k`` new winners; :func:`merge` costs ``O(k)``.  ``update``
    releases the GIL in its kernel, so several threads may update their own
    summaries at once.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.associativity import TopK, merge
    >>> a = TopK.empty(3, np.float32).update(np.array([5, 1, 7, 3], np.float32))
    >>> b = TopK.empty(3, np.float32, start=4).update(np.array([7, 2, 9], np.float32))
    >>> scores, ids = merge(a, b).result()
    >>> scores.tolist(), ids.tolist()          # the 7 at id 2 beats the 7 at id 4
    ([9.0, 7.0, 7.0], [6, 2, 4])
    """

    __slots__ = ("_ids", "_scores", "_spans", "dtype", "k", "largest", "n_seen", "nan", "start")

    def __init__(
        self,
        k: int,
        dtype: np.dtype,
        largest: bool,
        nan: str,
        start: int,
        n_seen: int,
        scores: np.ndarray,
        ids: np.ndarray,
        spans: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.k, self.dtype, self.largest, self.nan = k, dtype, largest, nan
        self.start, self.n_seen = start, n_seen
        self._scores, self._ids = scores, ids
        # half-open ranges of the ids this summary numbered by position
        # (sorted, disjoint): two summaries that both numbered position p
        # would hold two different scores under one id, so merging them, or
        # numbering p again, is refused instead of returning wrong ids
        self._spans = spans

    @classmethod
    def empty(
        cls,
        k: int,
        dtype: Any,
        largest: bool = True,
        *,
        nan: NanPolicy = "ignore",
        start: int = 0,
    ) -> TopK:
        """A summary of nothing.

        Parameters
        ----------
        k : int
            How many pairs to keep (>= 1).
        dtype : dtype
            Dtype of the scores (bool, integer or float); preserved in results.
        largest : bool
            Keep the largest scores (else the smallest).
        nan : {'ignore', 'largest'}
            Drop NaN scores, or rank them above every number (torch).
        start : int
            Id of the first score when :meth:`update` numbers scores by
            position (give each stream its own range to merge them).
        """
        k = _check_k(k)
        dt = _check_dtype(dtype)
        _check_nan(nan)
        if not isinstance(largest, (bool, np.bool_)):
            raise TypeError(f"largest must be a bool, got {largest!r}")
        return cls(k, dt, bool(largest), nan, int(start), 0, np.empty(0, dt), np.empty(0, np.int64))

    # ------------------------------------------------------------- feeding
    def update(self, scores: Any, ids: Any = None, *, offset: int | None = None) -> TopK:
        """Add a chunk of scores (in place) and return ``self``.

        ``ids`` default to running positions: ``start + (scores seen before)``
        ``+ arange(len(scores))``, or ``offset + arange(len(scores))`` when
        ``offset`` is given (chunks of one stream handed to several
        summaries, e.g. one per thread).  Explicit ids are int64-compatible integers,
        one per score.  Once ``k`` pairs are held, the chunk is filtered
        against the k-th best from its first element, so streaming many
        chunks costs about what one pass over their concatenation does.
        """
        if not hasattr(scores, "dtype"):  # a list: take it in this summary's dtype
            scores = np.asarray(scores, dtype=self.dtype)
        s = _as_numpy_1d(scores, "scores")
        if s.dtype != self.dtype:
            if not np.can_cast(s.dtype, self.dtype, "safe"):
                raise TypeError(
                    f"scores of dtype {s.dtype} do not fit this TopK of dtype {self.dtype}; "
                    f"cast them (scores.astype(np.{self.dtype.name})) or use "
                    f"TopK.empty(k, np.{s.dtype.name})"
                )
            s = s.astype(self.dtype)
        n = s.shape[0]
        if ids is not None and offset is not None:
            raise ValueError("pass ids or offset, not both")
        if offset is not None and (
            isinstance(offset, (bool, np.bool_)) or not isinstance(offset, (int, np.integer))
        ):
            raise TypeError(
                f"offset={offset!r}: must be an int (the id of the chunk's first score)"
            )
        if ids is not None:
            idv = _as_numpy_1d(ids, "ids")
            if idv.shape[0] != n:
                raise ValueError(
                    f"ids has {idv.shape[0]} elements but scores has {n}; pass one id per score"
                )
            if idv.dtype.kind not in "iu" or (idv.dtype == np.uint64 and n and idv.max() >= 2**63):
                raise TypeError(f"ids must be integers that fit int64, got dtype {idv.dtype}")
            idv = idv.astype(np.int64, copy=False)
        if n:
            nanbig = self.nan == "largest"
            first = self.start + self.n_seen if offset is None else int(offset)
            if ids is None:
                spans = _add_span(self._spans, (first, first + n), "update")
            # once k are held, only pairs beating the k-th best can enter
            seed = (self._scores[-1], int(self._ids[-1])) if len(self) == self.k else None
            kernel_ids = None if ids is None else idv
            if seed is not None and ids is None:
                if seed[1] > first:
                    # ids from an offset below the k-th best's: a tie can win
                    kernel_ids = first + np.arange(n, dtype=np.int64)
                else:  # the kernel compares positions in the chunk
                    seed = (seed[0], seed[1] - first)
            pos, counts = _best_positions(
                s.reshape(1, n), self.k, self.largest, nanbig, kernel_ids, seed
            )
            pos = pos[0, : counts[0]]
            if pos.shape[0]:  # late in a stream most chunks hold no winner
                cs = s[pos]
                ci = idv[pos] if ids is not None else first + pos
                self._scores, self._ids = _merge_sorted_lists(
                    self._scores, self._ids, cs, ci, self.k, self.largest, nanbig
                )
            if ids is None:
                self._spans = spans
        self.n_seen += n
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (dask, multiprocessing) through the checksummed format
        return (TopK.from_bytes, (self.to_bytes(),))

    def merge(self, other: TopK) -> TopK:
        """``merge(self, other)``: a new summary of both streams."""
        return merge(self, other)

    # ------------------------------------------------------------- reading
    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)``, best first: ``min(k, valid scores seen)`` of each (copies)."""
        return self._scores.copy(), self._ids.copy()

    def __len__(self) -> int:
        return int(self._scores.shape[0])

    def __repr__(self) -> str:
        return (
            f"TopK(k={self.k}, dtype={self.dtype}, largest={self.largest}, nan={self.nan!r}, "
            f"held={len(self)}, n_seen={self.n_seen})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopK):
            return NotImplemented
        return (
            self._params() == other._params()
            and self.n_seen == other.n_seen
            and np.array_equal(self._scores, other._scores, equal_nan=self.dtype.kind == "f")
            and np.array_equal(self._ids, other._ids)
        )

    __hash__ = None  # type: ignore[assignment]

    def _params(self) -> tuple[Any, ...]:
        return (self.k, self.dtype, self.largest, self.nan)

    def copy(self) -> TopK:
        """An independent copy."""
        return TopK(
            self.k,
            self.dtype,
            self.largest,
            self.nan,
            self.start,
            self.n_seen,
            self._scores.copy(),
            self._ids.copy(),
            self._spans,
        )

    # ------------------------------------------------------- serialization
    def to_bytes(self) -> bytes:
        """Serialize: a versioned header, the pairs, and a CRC-32 of all of it."""
        dt = self.dtype.newbyteorder("<")
        code = dt.str.encode()
        head = _HEAD.pack(
            _MAGIC,
            _VERSION,
            self.k,
            self.n_seen,
            self.start & (2**64 - 1),
            int(self.largest),
            int(self.nan == "largest"),
        )
        body = (
            head
            + struct.pack("<B", len(code))
            + code
            + struct.pack("<Q", len(self))
            + self._scores.astype(dt).tobytes()
            + self._ids.astype("<i8").tobytes()
            + struct.pack("<Q", len(self._spans))
            + np.asarray(self._spans, "<i8").reshape(-1).tobytes()
        )
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def from_bytes(cls, data: bytes) -> TopK:
        """Rebuild a summary from :meth:`to_bytes`; corrupted data raise ``ValueError``."""
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
        return cls(
            int(k), _check_dtype(dt), bool(largest), NAN_POLICIES[nanflag], start, int(n_seen),
            scores, ids, spans,
        )  # fmt: skip

    def save(self, path: str | PathLike[str]) -> None:
        """Write :meth:`to_bytes` to a file."""
        with open(path, "wb") as f:
            f.write(self.to_bytes())

    @classmethod
    def load(cls, path: str | PathLike[str]) -> TopK:
        """Read a summary written by :meth:`save`."""
        with open(path, "rb") as f:
            return cls.from_bytes(f.read())


def _as_numpy_1d(x: Any, name: str) -> np.ndarray:
    kind = _dispatch.array_kind(x)
    if kind == _dispatch.TORCH_CUDA:
        x = x.detach().cpu()
        kind = _dispatch.TORCH
    a = _dispatch.to_numpy_view(x) if kind == _dispatch.TORCH else np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}; flatten it first (.ravel())")
    return a


def _merge_sorted_lists(
    s1: np.ndarray,
    i1: np.ndarray,
    s2: np.ndarray,
    i2: np.ndarray,
    k: int,
    largest: bool,
    nanbig: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two summaries' lists (each sorted best first) in O(k)."""
    if s2.shape[0] == 0:
        return s1, i1
    if s1.shape[0] == 0:
        return s2[:k], i2[:k]
    side, at = _topk_cpu.merge_two(kernel_view(s1), i1, kernel_view(s2), i2, k, largest, nanbig)
    first = side == 0
    s = np.empty(side.shape[0], s1.dtype)
    i = np.empty(side.shape[0], np.int64)
    s[first], i[first] = s1[at[first]], i1[at[first]]
    s[~first], i[~first] = s2[at[~first]], i2[at[~first]]
    return s, i


def merge(a: TopK, b: TopK) -> TopK:
    """The summary of both streams: ``merge(top_k(A), top_k(B)) == top_k(A ∪ B)``.

    Associative and commutative exactly; ``O(k)`` (both lists are sorted).  Both summaries must
    have the same ``k``, direction, dtype and NaN policy.  ``n_seen`` adds up.
    """
    for name, arg in (("a", a), ("b", b)):
        if not isinstance(arg, TopK):
            raise TypeError(f"{name} must be a TopK, got {type(arg).__name__}")
    for field in ("k", "largest", "dtype", "nan"):
        va, vb = getattr(a, field), getattr(b, field)
        if va != vb:
            raise ValueError(
                f"cannot merge TopK summaries with {field}={va!r} and {field}={vb!r}; "
                f"build both with the same {field}"
            )
    spans = a._spans
    for span in b._spans:
        spans = _add_span(spans, span, "merge")
    s, i = _merge_sorted_lists(
        a._scores, a._ids, b._scores, b._ids, a.k, a.largest, a.nan == "largest"
    )
    start = min(a.start, b.start)
    return TopK(a.k, a.dtype, a.largest, a.nan, start, a.n_seen + b.n_seen, s, i, spans)


def _add_span(
    spans: tuple[tuple[int, int], ...], new: tuple[int, int], verb: str
) -> tuple[tuple[int, int], ...]:
    """``spans`` with the id range ``new`` added; an overlap is an error naming both."""
    lo, hi = new
    for a, b in spans:
        if a < hi and lo < b:
            where = f"ids {max(a, lo)}..{min(b, hi) - 1}"
            if verb == "update":
                raise ValueError(
                    f"update would number scores by position as {where}, which this TopK "
                    "already gave to earlier scores; pass offset= with a fresh range, or ids="
                )
            raise ValueError(
                f"cannot merge: both summaries numbered scores by position as {where}, so "
                "those ids are ambiguous; give each stream its own range "
                "(TopK.empty(..., start=) or update(..., offset=))"
            )
    merged = sorted((*spans, new))
    out = [merged[0]]
    for a, b in merged[1:]:
        if a == out[-1][1]:  # adjacent ranges (chunks of one stream) coalesce
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return tuple(out)


# --------------------------------------------------------------------- topk
def topk(
    x: Any,
    k: int,
    axis: int = -1,
    largest: bool = True,
    sorted: bool = True,
    *,
    nan: NanPolicy = "ignore",
    method: str = "auto",
    out: tuple[Any, Any] | None = None,
) -> tuple[Any, Any]:
    """The ``k`` best values along an axis and their indices, like ``torch.topk``.

    Ties go to the smaller index, so the chosen set does not depend on thread
    count or on how the axis is split: it is unique for the total order
    ``(value, index)`` (see :class:`TopK`); with ``sorted`` (the default) it
    comes best first.

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor (CPU or CUDA)
        Bool, integer or float values.
    k : int
        How many to return (>= 0); ``k > n`` returns all ``n``.  A 0-d ``x``
        is one value, returned as 0-d arrays for ``k`` 0 or 1, as torch does.
    axis : int
        The axis to select along.
    largest : bool
        The largest values (else the smallest).
    sorted : bool
        Best first (the default).  ``False`` allows any order of the same
        ``k`` pairs, and skips the final sort where one row runs on one
        thread (``k`` log ``k`` work saved per row).
    nan : {'ignore', 'largest'}
        ``'ignore'`` never returns a NaN (a 1-D input may then yield fewer
        than ``k``; an N-D input whose rows would differ in length is an
        error); ``'largest'`` ranks NaN above every number, as torch does.
    method : {'auto', 'cpu', 'cuda', 'reference'}
        ``'auto'`` runs the CUDA kernel for CUDA tensors and the CPU kernel
        otherwise; ``'reference'`` sorts with Python (tests).
    out : (values, indices), optional
        Arrays to write the result into, of the input's kind, device and
        dtype (indices int64) and the result's shape; torch tensors of another
        shape are resized, as ``torch.topk(out=...)`` does.  They are returned.

    Returns
    -------
    values, indices
        Arrays of the input's type, device and dtype (indices int64) with
        ``min(k, n)`` entries along ``axis``.

    Notes
    -----
    ``O(n)`` work whatever the order of the input.  Each thread keeps its
    current k-th best as a threshold and tests blocks of 2048 values against
    it with a vectorized compare-and-count; only blocks holding a winner are
    searched, and winners go to a buffer of ``2k + 4096`` candidates that is
    compacted when full by one pass against a sampled pivot just below the
    k-th best.  Each compaction frees thousands of slots, so even ascending
    input (every value a winner) costs ``O(1)`` amortized per element
    (~5 ns measured), not the ``O(log k)`` of a heap.  On
    random data the filter runs at close to memory speed.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import topk
    >>> v, i = topk(np.array([3.0, 1.0, 4.0, 1.0, 5.0]), 3)
    >>> v.tolist(), i.tolist()
    ([5.0, 4.0, 3.0], [4, 2, 0])
    >>> topk(np.array([2, 7, 7, 1]), 2, largest=False)[1].tolist()
    [3, 0]
    """
    k = _check_k(k, least=0)
    nanbig = _check_nan(nan)
    if not isinstance(sorted, (bool, np.bool_)):
        raise TypeError(f"sorted must be a bool, got {sorted!r}")
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of {', '.join(map(repr, METHODS))}")
    if not isinstance(largest, (bool, np.bool_)):
        raise TypeError(f"largest must be a bool, got {largest!r}")
    kind = _dispatch.array_kind(x)
    if kind not in (_dispatch.NUMPY, _dispatch.TORCH, _dispatch.TORCH_CUDA, _dispatch.CUDA):
        raise TypeError(
            f"x must be a NumPy array or a torch tensor, got {type(x).__name__}; "
            "wrap lists with np.asarray (dask: see case_studies.streaming_topk)"
        )
    nd = len(x.shape)
    if nd == 0:
        if axis not in (0, -1) or isinstance(axis, bool):
            raise ValueError(f"axis={axis!r} is out of range for a 0-d x; use 0 or -1")
        if k > 1:
            raise ValueError(f"k={k}: a 0-d x holds one value, so k must be 0 or 1")
        v, i = topk(x.reshape(1), 1, 0, largest, sorted, nan="largest", method=method)
        return _into(out, v.reshape(()), i.reshape(()))
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {axis!r}")
    if not -nd <= axis < nd:
        raise ValueError(
            f"axis={axis} is out of range for x with {nd} dimension(s) (shape "
            f"{tuple(x.shape)}); use -{nd} <= axis < {nd}"
        )
    ax = int(axis) % nd
    on_gpu = kind in (_dispatch.TORCH_CUDA, _dispatch.CUDA)
    if method == "auto":
        method = "cuda" if on_gpu else "cpu"
    if method == "cuda" and not on_gpu:
        raise ValueError("method='cuda' needs a CUDA tensor; move x with x.cuda() first")
    if on_gpu and method != "cuda":
        raise ValueError(f"method={method!r} runs on the CPU; x is on {_dispatch.device_of(x)}")
    _check_dtype(_score_dtype(x))
    if k == 0:
        return _into(out, *_empty(x, ax))
    if method == "cuda":
        from . import _topk_cuda

        return _into(out, *_topk_cuda.topk(x, k, ax, bool(largest), nanbig))
    if kind == _dispatch.TORCH:
        return _into(out, *_topk_torch_cpu(x, k, ax, bool(largest), nanbig, method, sorted))
    idx = _positions(x, k, ax, bool(largest), nanbig, method, bool(sorted))
    return _into(out, np.take_along_axis(x, idx, ax), idx)


def _empty(x: Any, ax: int) -> tuple[Any, Any]:
    """``k = 0``: values and int64 indices with a zero-length ``ax``."""
    shape = tuple(x.shape[:ax]) + (0,) + tuple(x.shape[ax + 1 :])
    if isinstance(x, np.ndarray):
        return np.empty(shape, x.dtype), np.empty(shape, np.int64)
    import torch

    return x.new_empty(shape), torch.empty(shape, dtype=torch.int64, device=x.device)


def _into(out: Any, values: Any, indices: Any) -> tuple[Any, Any]:
    """The result, or written into ``out=(values, indices)`` and that returned."""
    if out is None:
        return values, indices
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"out must be a (values, indices) pair of arrays, got {type(out).__name__}")
    for name, dst, src in (("out[0]", out[0], values), ("out[1]", out[1], indices)):
        if type(dst) is not type(src) or str(dst.dtype) != str(src.dtype):
            raise TypeError(
                f"{name} is {_dispatch.describe(dst)}; pass "
                f"{_dispatch.describe(src)} like the result (indices are int64)"
            )
        if _dispatch.device_of(dst) != _dispatch.device_of(src):
            raise ValueError(
                f"{name} is on {_dispatch.device_of(dst)} but the result is on "
                f"{_dispatch.device_of(src)}; allocate out on the input's device"
            )
        if isinstance(dst, np.ndarray):
            if dst.shape != src.shape:
                raise ValueError(
                    f"{name} has shape {dst.shape}; the result has shape {src.shape}: "
                    "allocate out with that shape"
                )
            dst[...] = src
        else:
            if tuple(dst.shape) != tuple(src.shape):
                dst.resize_(src.shape)
            dst.copy_(src)
    return out[0], out[1]


def _score_dtype(x: Any) -> np.dtype:
    name = str(x.dtype).replace("torch.", "")
    if name == "bfloat16":
        return np.dtype(np.float32)
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(object)


def _positions(
    x: np.ndarray, k: int, ax: int, largest: bool, nanbig: bool, method: str, ordered: bool = True
) -> np.ndarray:
    """int64 indices of the top k along ``ax`` (shape of ``x`` with min(k, n) there)."""
    xm = np.moveaxis(x, ax, -1)
    lead, n = xm.shape[:-1], xm.shape[-1]
    rows = int(np.prod(lead, dtype=np.int64))
    kk = min(k, n)
    if n == 0 or rows == 0:
        return np.moveaxis(np.empty(lead + (kk,), np.int64), -1, ax)
    x2 = xm.reshape(rows, n)
    if method == "reference":
        pos = _topk_reference.topk(x2, kk, largest, "largest" if nanbig else "ignore")
        counts = (pos >= 0).sum(axis=1)
    else:
        pos, counts = _best_positions(x2, kk, largest, nanbig, ordered=ordered)
    got = int(counts.min())
    if got < kk:
        if rows > 1 and got != int(counts.max()):
            raise ValueError(
                f"rows of x hold different numbers of non-NaN values ({got} to "
                f"{int(counts.max())}) and k={k}; with nan='ignore' the result would be "
                "ragged: pass nan='largest' (torch's convention) or a k no larger than "
                f"{got}"
            )
        pos = pos[:, :got]
        kk = got
    return np.moveaxis(pos.reshape(lead + (kk,)), -1, ax)


def _topk_torch_cpu(
    x: Any, k: int, ax: int, largest: bool, nanbig: bool, method: str, ordered: bool = True
) -> tuple[Any, Any]:
    import torch

    xd = x.detach()
    view = xd.float().numpy() if xd.dtype == torch.bfloat16 else xd.numpy()
    idx = torch.from_numpy(
        np.ascontiguousarray(_positions(view, k, ax, largest, nanbig, method, ordered))
    )
    return torch.gather(x, ax, idx), idx
