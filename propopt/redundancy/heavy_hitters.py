"""Misra-Gries heavy hitters: a mergeable frequency summary with a stated error.

The guarantee, for a stream of ``n`` items (total weight) summarized with
``m`` counters::

    f(x) - n / (m + 1)  <=  estimate(x)  <=  f(x)

so every item with ``f(x) > n / (m + 1)`` is held.  It survives merging
(Agarwal et al., "Mergeable summaries", PODS 2012): add the counters of the
two summaries, subtract the ``(m+1)``-th largest count from all of them and
keep the positive ones; the result has error at most ``(n1 + n2) / (m + 1)``.
A batch of items is folded in the same way, as the exact summary of the
batch (``np.unique`` with counts) merged into the current one, so an update
costs ``O(b log b + m)`` for ``b`` items and runs in NumPy rather than one
Python step per item.  Unlike :class:`propopt.TopK`, the merged counters
depend on the merge order (the bound does not): merges commute, but are
associative only up to the stated error.

References
----------
J. Misra and D. Gries, "Finding repeated elements", Sci. Comput. Program., 1982.
P. K. Agarwal, G. Cormode, Z. Huang, J. Phillips, Z. Wei and K. Yi,
"Mergeable summaries", PODS 2012.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays import plain, renamed, shown


@renamed(m="counters")
def merge_counts(
    keys1: np.ndarray, counts1: np.ndarray, keys2: np.ndarray, counts2: np.ndarray, counters: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """The Misra-Gries merge of two counter sets: ``(keys, counts, subtracted)``.

    Counters are summed by key; if more than ``counters`` (``m=`` before this
    release) remain, the ``(counters + 1)``-th largest count is subtracted from
    all and the non-positive ones dropped.
    """
    m = counters
    for name, a in (("keys1", keys1), ("counts1", counts1), ("keys2", keys2), ("counts2", counts2)):
        plain(name, a)  # a masked array is refused: a masked counter has no meaning here
    keys = np.concatenate([keys1, keys2])
    counts = np.concatenate([counts1, counts2])
    if keys1.shape[0] and keys2.shape[0]:
        keys, inv = np.unique(keys, return_inverse=True)
        counts = np.bincount(inv, weights=counts, minlength=keys.shape[0]).astype(np.int64)
    cut = 0
    if keys.shape[0] > m:
        cut = int(np.partition(counts, counts.shape[0] - m - 1)[counts.shape[0] - m - 1])
        keep = counts > cut
        keys, counts = keys[keep], counts[keep] - cut
    order = np.lexsort((keys, -counts))  # largest count first, then smaller key
    return keys[order], counts[order], cut


class MisraGries:
    """Approximate item frequencies of an integer stream with ``m`` counters.

    ``estimate(x)`` underestimates the true count ``f(x)`` by at most
    :attr:`error_bound` ``= n / (m + 1)`` (``n`` the number of items seen), and
    never overestimates; :func:`merge_summaries` keeps that guarantee for the union of
    the streams.  Memory ``O(m)``.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt.redundancy import MisraGries
    >>> s = MisraGries(2).update(np.array([7, 7, 7, 1, 7, 2, 3, 7]))
    >>> s.heavy_hitters()[0].tolist(), s.error_bound
    ([7], 2.6666666666666665)
    >>> bool(5 - s.error_bound <= s.estimate([7])[0] <= 5)
    True
    """

    __slots__ = ("_counts", "_keys", "m", "n")

    def __init__(self, m: int) -> None:
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)):
            raise TypeError(f"m must be an int, got {shown(m)}")
        if m < 1:
            raise ValueError(f"m={m}: the number of counters must be >= 1")
        self.m = int(m)
        self.n = 0
        self._keys = np.empty(0, np.int64)
        self._counts = np.empty(0, np.int64)

    @property
    def error_bound(self) -> float:
        """``n / (m + 1)``: the most any count is underestimated by."""
        return self.n / (self.m + 1)

    def update(self, items: Any) -> MisraGries:
        """Count a batch of integer items (in place); returns ``self``.

        Masked entries of a NumPy masked array are not items: they are neither
        counted nor added to ``n``.
        """
        if isinstance(items, np.ma.MaskedArray):
            items = items.compressed()
        a = np.asarray(items)
        if a.dtype.kind not in "iub":
            raise TypeError(
                f"items must be integers, got dtype {a.dtype}; map other items to integer "
                "ids first (e.g. with pandas.factorize or a hash)"
            )
        a = a.ravel()
        if a.dtype == np.uint64 and a.size and a.max() > np.iinfo(np.int64).max:
            i = int(np.argmax(a))
            raise ValueError(
                f"items[{i}] = {a[i]} does not fit int64, the type of the counters' keys; "
                "map such items to int64 ids first"
            )
        a = a.astype(np.int64, copy=False)
        if a.shape[0]:
            k2, c2 = np.unique(a, return_counts=True)
            self._keys, self._counts, _ = merge_counts(
                self._keys, self._counts, k2, c2.astype(np.int64), self.m
            )
            self.n += int(a.shape[0])
        return self

    def merge(self, other: MisraGries) -> MisraGries:
        """A summary of both streams (error at most ``(n1 + n2) / (m + 1)``)."""
        return merge_summaries(self, other)

    def estimate(self, items: Any) -> np.ndarray:
        """Lower estimates of the counts of integer ``items`` (0 for items not held).

        Floats and strings are refused (``7.9`` is not the item 7), as in :meth:`update`.
        A masked array of items gives a masked array of estimates, masked where
        the items are (flattened, as the result always is).
        """
        if isinstance(items, np.ma.MaskedArray):
            mask = np.ma.getmaskarray(items).ravel()
            return np.ma.MaskedArray(self.estimate(items.data), mask=mask)
        given = np.asarray(items)
        if given.dtype.kind not in "iub":
            raise TypeError(
                f"items must be integers, got dtype {given.dtype}; estimate() looks up the "
                "integer ids that update() counts (7.9 is not the item 7)"
            )
        given = given.ravel()
        fits = np.ones(given.shape[0], bool)  # only int64 items can be held
        if given.dtype == np.uint64:
            fits = given <= np.iinfo(np.int64).max
        q = np.where(fits, given, 0).astype(np.int64)
        order = np.argsort(self._keys)
        sk = self._keys[order]
        pos = np.clip(np.searchsorted(sk, q), 0, max(sk.shape[0] - 1, 0))
        found = (sk.shape[0] > 0) & (sk[pos] == q) if sk.shape[0] else np.zeros(q.shape, bool)
        out = np.zeros(q.shape[0], np.int64)
        found &= fits
        out[found] = self._counts[order][pos[found]]
        return out

    def heavy_hitters(self, threshold: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(items, estimates)`` of the held items, most frequent first.

        With ``threshold``, only items whose count may exceed it (estimate +
        error bound > threshold); every item with true count greater than
        ``max(threshold, error_bound)`` is among them (items not held have
        counts of at most the error bound).  Default: items whose true count surely exceeds the
        error bound (estimate > 0).
        """
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(
                threshold, (int, float, np.integer, np.floating)
            ):
                raise TypeError(f"threshold={shown(threshold)}: must be a number (a count)")
            if threshold != threshold:
                raise ValueError("threshold=nan: pass a count, or None for the default")
        if threshold is None:
            keep = self._counts > 0
        else:
            keep = self._counts + self.error_bound > threshold
        return self._keys[keep].copy(), self._counts[keep].copy()

    def __len__(self) -> int:
        return int(self._keys.shape[0])

    def __repr__(self) -> str:
        return f"MisraGries(m={self.m}, held={len(self)}, n={self.n})"


def merge_summaries(a: MisraGries, b: MisraGries) -> MisraGries:
    """Merge two summaries with the same ``m`` (Agarwal et al. 2012)."""
    for name, s in (("a", a), ("b", b)):
        if not isinstance(s, MisraGries):
            raise TypeError(f"{name} must be a MisraGries, got {type(s).__name__}")
    if a.m != b.m:
        raise ValueError(
            f"cannot merge MisraGries summaries with m={a.m} and m={b.m}; use the same m"
        )
    out = MisraGries(a.m)
    out._keys, out._counts, _ = merge_counts(a._keys, a._counts, b._keys, b._counts, a.m)
    out.n = a.n + b.n
    return out
