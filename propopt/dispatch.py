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

import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
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


def takes_any(plan: object) -> Exception | None:
    """``refuse`` of a row that runs every plan its verb has validated: refuses nothing."""
    return None


def on_devices(
    method: str, run: Callable[[P], O], devices: Iterable[str] = ("cpu", "cuda")
) -> dict[tuple[str, str], Backend[P, O]]:
    """Rows ``(method, device)`` for each of ``devices``: one ``run`` that takes any plan,
    on the device where the plan's arrays are."""
    return {(method, d): Backend(takes_any, run) for d in devices}


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


#: where a verb runs: ``device=`` on every verb that takes it
DEVICES: tuple[str, ...] = ("cpu", "cuda", "dask")


def method_device(
    verb: str,
    method: str,
    device: str,
    keys: Iterable[tuple[str, str]],
    old: Mapping[str, tuple[str, str]] | None = None,
    stacklevel: int = 3,
) -> tuple[str, str]:
    """``(method, device)`` checked against a table keyed by ``(method, device)``.

    ``method`` names the algorithm and ``device`` the place; ``'auto'`` is
    allowed for either.  ``old`` maps a retired ``method=`` spelling that
    named a place (``'cpu'``, ``'cuda'``...) or a library (device ``'auto'``:
    wherever the arrays are) to its pair: it still works, with a
    ``DeprecationWarning`` (``stacklevel`` points it at the verb's caller).
    """
    if isinstance(method, str) and isinstance(device, str) and method == device == "auto":
        return method, device  # the common call, without building the lists below
    keys = list(keys)
    methods = ["auto", *dict.fromkeys(m for m, _ in keys)]
    devices = ["auto", *(d for d in DEVICES if any(d == k[1] for k in keys))]
    if old and isinstance(method, str) and method in old:
        new_method, new_device = old[method]
        if new_device == "auto":  # a spelling that named a library, not a place
            new_device = device
        elif device not in ("auto", new_device):
            raise ValueError(
                f"{verb}(method={method!r}, device={device!r}) is contradictory: method="
                f"{method!r} is the old spelling of method={new_method!r}, "
                f"device={new_device!r}; pass method={new_method!r}"
            )
        where = "" if new_device == "auto" else f", device={new_device!r}"
        warnings.warn(
            f"{verb}(method={method!r}) is deprecated: pass method={new_method!r}{where} "
            "(method names the algorithm, device the place)",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        method, device = new_method, new_device
    if method not in methods:
        raise ValueError(f"method={method!r} is not one of {', '.join(map(repr, methods))}")
    if device not in devices:
        raise ValueError(f"device={device!r} is not one of {', '.join(map(repr, devices))}")
    return method, device


def choose_on(
    table: Mapping[tuple[str, str], Backend[P, O]],
    method: str,
    device: str,
    plan: P,
    here: str,
    auto: Sequence[tuple[str, str]],
    auto_refuse: Mapping[tuple[str, str], Callable[[P], Exception | None]] | None = None,
    what: str = "the arrays",
    moves: bool = False,
) -> tuple[str, str] | None:
    """:func:`choose` for a table keyed by ``(method, device)``.

    ``here`` is where the plan's arrays (named ``what`` in errors) are, and
    ``device='auto'`` runs there.  Another ``device`` must equal ``here``,
    unless the verb ``moves`` its arrays to the device it is given (and the
    result back).  An explicit ``method`` runs its row there or raises the
    row's refusal (or says on which devices it runs); ``method='auto'``
    takes the first row of ``auto`` there that accepts, and ``None`` when
    none does.
    """
    if device not in ("auto", here) and not moves:
        raise ValueError(
            f"device={device!r}, but the data ({what}) is on {here!r}; move it there first, "
            f"or pass device={here!r} (or 'auto')"
        )
    where = here if device == "auto" else device
    if method != "auto":
        if (method, where) not in table:
            on = [d for m, d in table if m == method]
            runs = f"method={method!r} runs on device {' or '.join(map(repr, on))}"
            if device != "auto":
                raise ValueError(f"{runs}, not device={device!r}; pass another device or method")
            raise ValueError(
                f"{runs}, but the data ({what}) is on {where!r}; move it, or pick another method"
            )
        return choose(table, (method, where), plan, ())
    return choose(table, None, plan, [k for k in auto if k[1] == where], auto_refuse)
