"""The chapter's two baselines, written as the chapter writes them.

:func:`sort_everything` materializes and sorts every event (``O(n log n)``
time, ``O(n)`` memory); :func:`heapq_loop` streams them through a min-heap
of size ``k`` (``O(n log k)`` time in the worst case, ``O(k)`` memory, one
Python-level step per event).  Both return the best ``k`` events, best
first.  Ties between equal scores go to the earlier event, the order used
everywhere in propopt, so that all methods return the same answer.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

from propopt.arrays import count


def _score(event: Any) -> Any:
    return event.score


def sort_everything(
    events: Iterable[Any], k: int = 1000, key: Callable[[Any], Any] | None = _score
) -> list[Any]:
    """``sorted(events, key=score, reverse=True)[:k]`` (``key=None``: events are scores).

    Python's sort is stable, so equal scores keep their arrival order.
    """
    k = count("k", k, least=0)
    key = key or (lambda e: e)
    items = list(events)
    order = sorted(range(len(items)), key=lambda i: key(items[i]), reverse=True)
    # reverse=True keeps stability for equal keys: earlier events come first
    return [items[i] for i in order[:k]]


def heapq_loop(
    events: Iterable[Any], k: int = 1000, key: Callable[[Any], Any] | None = _score
) -> list[Any]:
    """The chapter's streaming loop: a min-heap of the ``k`` best seen so far.

    The heap holds ``(score, -seq, seq)``: its root is the worst kept event
    (smallest score, latest among equals), so an event enters only if it
    beats the root.
    """
    k = count("k", k, least=0)
    if k == 0:
        return []
    key = key or (lambda e: e)
    heap: list[tuple[Any, int, int]] = []
    kept: dict[int, Any] = {}
    for seq, event in enumerate(events):
        s = key(event)
        if len(heap) < k:
            heapq.heappush(heap, (s, -seq, seq))
            kept[seq] = event
        elif s > heap[0][0]:  # bigger than the smallest in the top k?
            _, _, old = heapq.heapreplace(heap, (s, -seq, seq))
            del kept[old]
            kept[seq] = event
    return [kept[seq] for _, _, seq in sorted(heap, key=lambda t: (-t[0], t[2]))]
