"""One dispatch layer: a verb's backend table and the choice of a backend for its plan.

Public so that code built on propopt (the case studies first) dispatches as
the verbs do.

A verb validates its arguments once into a plan, then picks a row of its
table.  Each row is a :class:`Backend`: ``refuse(plan)`` says why the row
cannot run the plan (the error an explicit choice raises, and the reason
``'auto'`` passes the row over), or returns ``None``; ``run(plan)`` runs it.
:func:`choose` is the one rule every verb follows: an explicit key runs its
row or raises that row's refusal; ``'auto'`` takes the first row of the
verb's order that accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P")
O = TypeVar("O")
K = TypeVar("K", bound=Hashable)

@dataclass(frozen=True)
class Backend(Generic[P, O]):
    """One way to run a plan ``P`` into a result ``O``: what it refuses, and the run."""

    refuse: Callable[[P], Exception | None]
    run: Callable[[P], O]


def choose(
    table: Mapping[K, Backend[P, O]],
    key: K | None,
    plan: P,
    auto: Sequence[K],
    auto_refuse: Mapping[K, Callable[[P], Exception | None]] | None = None,
) -> K | None:
    """The row that runs ``plan``.

    ``key``: that row, or its refusal raised.  ``key=None`` (``'auto'``): the
    first row of ``auto`` that accepts, judged by ``auto_refuse[row]`` where
    given (a row that 'auto' takes less often than an explicit choice would,
    e.g. only below a measured size); ``None`` when no row accepts, for the
    verb to explain.
    """
    if key is not None:
        err = table[key].refuse(plan)
        if err is not None:
            raise err
        return key
    judge = auto_refuse or {}
    for k in auto:
        if judge.get(k, table[k].refuse)(plan) is None:
            return k
    return None
