"""``TopK``, a mergeable summary of the k best (score, id) pairs, and ``merge_topk``.

The law: ``top_k(A ∪ B) == merge_topk(top_k(A), top_k(B))``, and ``merge_topk`` is
associative and commutative exactly, because ties between equal scores go
to the smaller id (a total order).  See ``topk.py`` for the verb.
"""

from __future__ import annotations

import warnings
from os import PathLike
from typing import Any

import numpy as np

from ...arrays import inexact
from ...files import write_bytes
from . import _cpu, _format
from ._checks import (
    ID_MAX,
    NanPolicy,
    as_numpy_1d,
    check_dtype,
    check_id,
    check_ids_fit,
    check_k,
    check_nan,
    dtype_name,
    is_float,
    kernel_view,
    mask_of,
)
from ._threads import best_positions


class TopK:
    """A mergeable summary of the ``k`` best ``(score, id)`` pairs seen so far.

    Build one with :meth:`TopK.empty`, feed it with :meth:`update` (any
    number of chunks), combine summaries with :func:`merge_topk` and read the
    answer with :meth:`result`.  Serialize with :meth:`to_bytes` /
    :meth:`from_bytes` (or :meth:`save` / :meth:`load`) to checkpoint a
    stream or merge summaries computed elsewhere.

    The law it relies on: ``top_k(A ∪ B) == merge_topk(top_k(A), top_k(B))``;
    :func:`merge_topk` is associative and commutative, exactly (no rounding is
    involved), because ties between equal scores go to the smaller id.

    Notes
    -----
    Memory is ``O(k)``.  :meth:`update` with ``n`` scores costs ``O(n)``
    amortized on all threads whatever their order (a threshold filter; see
    :func:`topk`) plus ``O(k)`` to merge and ``O(m log m)`` to sort the
    ``m <= k`` new winners; :func:`merge_topk` costs ``O(k)``.  ``update``
    releases the GIL in its kernel, so several threads may update their own
    summaries at once.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.associativity import TopK, merge_topk
    >>> a = TopK.empty(3, np.float32).update(np.array([5, 1, 7, 3], np.float32))
    >>> b = TopK.empty(3, np.float32, start=4).update(np.array([7, 2, 9], np.float32))
    >>> scores, ids = merge_topk(a, b).result()
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
            How many pairs to keep (>= 0; a summary with ``k = 0`` holds nothing).
        dtype : dtype
            Dtype of the scores (bool, integer or float, ml_dtypes ``bfloat16``
            and ``float8_*`` included); preserved in results.
        largest : bool
            Keep the largest scores (else the smallest).
        nan : {'ignore', 'largest'}
            Drop NaN scores, or rank them above every number (torch).
        start : int
            Id of the first score when :meth:`update` numbers scores by
            position (give each stream its own range to merge them).  Ids
            are int64: an update that would number a score past
            ``2**63 - 1`` raises instead of wrapping around.
        """
        k = check_k(k)
        if k > ID_MAX:  # to_bytes writes k as an unsigned 64-bit count; ids are int64
            raise ValueError(f"k={k}: a TopK keeps at most 2**63 - 1 pairs; pass a smaller k")
        dt = check_dtype(dtype)
        check_nan(nan)
        if not isinstance(largest, (bool, np.bool_)):
            raise TypeError(f"largest must be a bool, got {largest!r}")
        start = check_id(start, "start", "the id of the first score")
        return cls(k, dt, bool(largest), nan, start, 0, np.empty(0, dt), np.empty(0, np.int64))

    # ------------------------------------------------------------- feeding
    def update(self, scores: Any, ids: Any = None, *, offset: int | None = None) -> TopK:
        """Add a chunk of scores (in place) and return ``self``.

        ``ids`` default to running positions: ``start + (scores seen before)``
        ``+ arange(len(scores))``, or ``offset + arange(len(scores))`` when
        ``offset`` is given (chunks of one stream handed to several
        summaries, e.g. one per thread).  Explicit ids are int64-compatible
        integers, one per score.  Positional ids past ``2**63 - 1`` raise.
        Once ``k`` pairs are held, the chunk is filtered against the k-th
        best from its first element, so streaming many chunks costs about
        what one pass over their concatenation does.

        Scores of another dtype are taken when the cast is safe
        (``np.can_cast(..., 'safe')``) and exact (int64 above ``2**53`` is
        safe to NumPy but rounds in float64); lists, tuples and Python scalars when
        every value converts exactly (``[1, 2]`` into int8, ``[0.5]`` into
        float32), else the call raises: nothing is rounded, truncated or
        wrapped.  Masked entries of a masked array are never selected; they
        still take their position (an id).
        """
        mask = mask_of(scores)
        s = as_numpy_1d(_as_scores(scores, self.dtype), "scores")
        if s.dtype != self.dtype:
            if not np.can_cast(s.dtype, self.dtype, "safe"):
                raise TypeError(
                    f"scores of dtype {s.dtype} do not fit this TopK of dtype {self.dtype}; "
                    f"cast them (scores.astype({dtype_name(self.dtype)})) or use "
                    f"TopK.empty(k, {dtype_name(s.dtype)})"
                )
            at = inexact(s, self.dtype) if is_float(self.dtype) else None
            if at is not None:  # int64 -> float64 is 'safe' to NumPy, yet rounds above 2**53
                raise TypeError(
                    f"scores[{at}] = {s[at]} cannot be held exactly by a TopK of dtype "
                    f"{self.dtype} (it would become {s[at : at + 1].astype(self.dtype)[0]}); "
                    f"use TopK.empty(k, {dtype_name(s.dtype)}), or round the scores yourself"
                )
            s = s.astype(self.dtype)
        n = s.shape[0]
        if ids is not None and offset is not None:
            raise ValueError("pass ids or offset, not both")
        if offset is not None:
            offset = check_id(offset, "offset", "the id of the chunk's first score")
        idv = None  # explicit ids for the kernel; None: positions from first
        if ids is not None:
            if mask_of(ids) is not None:
                raise ValueError("ids is a masked array with masked entries; pass one id per score")
            idv = as_numpy_1d(ids, "ids")
            if idv.shape[0] != n:
                raise ValueError(
                    f"ids has {idv.shape[0]} elements but scores has {n}; pass one id per score"
                )
            if idv.dtype.kind not in "iu" or (idv.dtype == np.uint64 and n and idv.max() >= 2**63):
                raise TypeError(f"ids must be integers that fit int64, got dtype {idv.dtype}")
            idv = idv.astype(np.int64, copy=False)
        first = self.start + self.n_seen if offset is None else offset
        if ids is None:
            check_ids_fit(first, n, "update")
        if n:
            spans = _add_span(self._spans, (first, first + n), "update") if ids is None else None
            if mask is not None:  # the unmasked scores, under their own ids
                keep = ~mask
                idv = (first + np.arange(n, dtype=np.int64) if idv is None else idv)[keep]
                s = s[keep]
            if s.shape[0] and self.k:
                self._add(s, idv, first)
            if spans is not None:
                self._spans = spans
        self.n_seen += n
        return self

    def _add(self, s: np.ndarray, idv: np.ndarray | None, first: int) -> None:
        """Merge the winners of ``s`` (ids ``idv``, or ``first + position``) into the list."""
        n = s.shape[0]
        nanbig = self.nan == "largest"
        # once k are held, only pairs beating the k-th best can enter
        seed = (self._scores[-1], int(self._ids[-1])) if len(self) == self.k else None
        kernel_ids = idv
        if seed is not None and idv is None:
            if seed[1] > first:
                # ids from an offset below the k-th best's: a tie can win
                kernel_ids = first + np.arange(n, dtype=np.int64)
            else:  # the kernel compares positions in the chunk (every one >= 0)
                seed = (seed[0], max(seed[1] - first, -1))
        pos, counts = best_positions(
            s.reshape(1, n), self.k, self.largest, nanbig, kernel_ids, seed
        )
        pos = pos[0, : counts[0]]
        if pos.shape[0]:  # late in a stream most chunks hold no winner
            cs = s[pos]
            ci = idv[pos] if idv is not None else first + pos
            self._scores, self._ids = _merge_sorted_lists(
                self._scores, self._ids, cs, ci, self.k, self.largest, nanbig
            )

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (dask, multiprocessing) through the checksummed format
        return (TopK.from_bytes, (self.to_bytes(),))

    def merge(self, other: TopK) -> TopK:
        """``merge_topk(self, other)``: a new summary of both streams."""
        return merge_topk(self, other)

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
            and np.array_equal(self._scores, other._scores, equal_nan=is_float(self.dtype))
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
        return _format.dumps(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> TopK:
        """Rebuild a summary from :meth:`to_bytes`; corrupted data raise ``ValueError``.

        ``data`` is bytes-like (``bytes``, ``bytearray``, ``memoryview``); other
        types raise ``TypeError``.
        """
        k, dt, largest, nan, start, n_seen, scores, ids, spans = _format.loads(data)
        return cls(k, check_dtype(dt), largest, nan, start, n_seen, scores, ids, spans)

    def save(self, path: str | PathLike[str]) -> None:
        """Write :meth:`to_bytes` to a file, atomically (:func:`propopt.files.write_bytes`)."""
        write_bytes(path, self.to_bytes())

    @classmethod
    def load(cls, path: str | PathLike[str]) -> TopK:
        """Read a summary written by :meth:`save`."""
        with open(path, "rb") as f:
            return cls.from_bytes(f.read())


def _as_scores(scores: Any, dtype: np.dtype) -> Any:
    """Arrays as they are; lists, tuples and scalars in ``dtype`` if every value fits exactly.

    Each value is compared with its converted self in Python (``1 == 1.0``,
    ``1.7 != 1``, exact for ints of any size), so floats are not truncated
    into integers, nor integers wrapped or rounded.
    """
    if hasattr(scores, "dtype"):
        return scores
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NaN -> int casts warn, then are refused below
            cast = np.asarray(scores, dtype=dtype)
    except (OverflowError, ValueError, TypeError) as exc:
        raise TypeError(
            f"scores cannot be held by a TopK of dtype {dtype} ({exc}); pass numbers that "
            f"fit {dtype}, or an array of another dtype with TopK.empty(k, that dtype)"
        ) from exc
    given = np.asarray(scores, dtype=object).ravel().tolist()
    for want, got in zip(given, cast.ravel().tolist()):
        if not (want == got or (want != want and got != got)):  # NaN stays NaN
            raise TypeError(
                f"scores hold {want!r}, which a TopK of dtype {dtype} cannot hold exactly "
                f"(it would become {got!r}); round or clip the scores yourself, or build "
                "the TopK with a dtype that holds them (TopK.empty(k, np.float64))"
            )
    return cast


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
    side, at = _cpu.merge_two(kernel_view(s1), i1, kernel_view(s2), i2, k, largest, nanbig)
    first = side == 0
    s = np.empty(side.shape[0], s1.dtype)
    i = np.empty(side.shape[0], np.int64)
    s[first], i[first] = s1[at[first]], i1[at[first]]
    s[~first], i[~first] = s2[at[~first]], i2[at[~first]]
    return s, i


def merge_topk(a: TopK, b: TopK) -> TopK:
    """The summary of both streams: ``merge_topk(top_k(A), top_k(B)) == top_k(A ∪ B)``.

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
