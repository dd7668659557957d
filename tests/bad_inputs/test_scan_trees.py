"""Bad inputs of ``associative_scan``: one test per case (``_judge``)."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import propopt as pp
from tests.bad_inputs._judge import Case, Either, Error, Table, Value, judge, rng
from tests.oracles import cumsum64, linrec64

try:
    import dask.array as da
except ImportError:  # the cases that need it are left out
    da = None

pytestmark = pytest.mark.bad_inputs


def scan_tree_cases(case: Table) -> None:
    S = pp.associative_scan
    case(
        "linear_recurrence float32/float64 leaves",
        lambda: S(pp.linear_recurrence, (np.ones(3, np.float32), np.ones(3))),
        Error("elems"),
    )
    case(
        "linear_recurrence lengths 3 and 4",
        lambda: S(pp.linear_recurrence, (np.ones(3), np.ones(4))),
        Error("elems"),
    )
    case(
        "linear_recurrence three leaves",
        lambda: S(pp.linear_recurrence, (np.ones(3), np.ones(3), np.ones(3))),
        Error("elems"),
    )
    case("linear_recurrence one leaf", lambda: S(pp.linear_recurrence, np.ones(3)), Error("elems"))
    case(
        "linear_recurrence dict",
        lambda: S(pp.linear_recurrence, {"a": np.full(3, 0.5), "b": np.ones(3)}),
        Value(lambda: dict(zip("ab", linrec64(np.full(3, 0.5), np.ones(3))))),
    )
    case(
        "linear_recurrence namedtuple",
        lambda: S(
            pp.linear_recurrence, collections.namedtuple("AB", "a b")(np.full(3, 0.5), np.ones(3))
        ),
        Value(lambda: linrec64(np.full(3, 0.5), np.ones(3))),
    )
    case(
        "linear_recurrence with inf coefficient at 0",
        lambda: S(pp.linear_recurrence, (np.array([np.inf, 0.5]), np.array([2.0, 1.0])))[1],
        Value(np.array([2.0, 2.0])),
    )
    case(
        "linear_recurrence 1e-300 and 1e300",
        lambda: S(pp.linear_recurrence, (np.full(4, 1e-300), np.full(4, 1e300)))[1],
        Value(lambda: linrec64(np.full(4, 1e-300), np.full(4, 1e300))[1]),
    )

    def mm_ref(ms: list[np.ndarray], reverse: bool) -> list[np.ndarray]:
        out = []
        for t in range(len(ms)):
            seq = ms[t:][::-1] if reverse else ms[: t + 1]
            p = np.eye(2)
            for m in seq:
                p = p @ m
            out.append(p)
        return [
            np.array([p[0, 0] for p in out]),
            np.array([p[0, 1] for p in out]),
            np.array([p[1, 0] for p in out]),
            np.array([p[1, 1] for p in out]),
        ]

    mats = lambda: tuple(rng(5).normal(size=(4, 6)))  # noqa: E731
    mlist = lambda: [np.array([[a, b], [c, d]]) for a, b, c, d in zip(*mats())]  # noqa: E731
    case(
        "matmul2x2 (non-commutative)",
        lambda: S(pp.matmul2x2, mats()),
        Value(lambda: mm_ref(mlist(), False), rtol=1e-12),
    )
    case(
        "matmul2x2 reverse",
        lambda: S(pp.matmul2x2, mats(), reverse=True),
        Value(lambda: mm_ref(mlist(), True), rtol=1e-12),
    )
    case(
        "reset wrong length",
        lambda: S(pp.add, np.ones(3), reset=np.array([True, False])),
        Error("reset"),
    )
    case("reset of ints", lambda: S(pp.add, np.ones(3), reset=np.array([1, 0, 2])), Error("reset"))
    case(
        "reset of floats",
        lambda: S(pp.add, np.ones(3), reset=np.array([1.0, 0.0, 0.5])),
        Error("reset"),
    )
    case(
        "reset list of bools",
        lambda: S(pp.add, np.arange(1, 6), reset=[True, False, False, True, False]),
        Either(Value(np.array([1, 3, 6, 4, 9])), "reset"),
    )
    case(
        "reset bool array",
        lambda: S(pp.add, np.arange(1, 6), reset=np.array([True, False, False, True, False])),
        Value(np.array([1, 3, 6, 4, 9])),
    )
    case(
        "reset all True",
        lambda: S(pp.add, np.arange(1.0, 5.0), reset=np.ones(4, bool)),
        Value(np.arange(1.0, 5.0)),
    )
    case(
        "reset with exclusive",
        lambda: S(
            pp.add,
            np.arange(1, 6),
            reset=np.array([True, False, False, True, False]),
            exclusive=True,
        ),
        Value(np.array([0, 1, 3, 0, 4])),
    )
    case(
        "reset masked",
        lambda: S(pp.add, np.ones(3), reset=np.ma.array([True, False, False], mask=[0, 1, 0])),
        Error("reset"),
    )
    case(
        "reset per row, 2-D",
        lambda: S(
            pp.add,
            np.ones((2, 3)),
            axis=1,
            reset=np.array([[True, False, True], [True, True, False]]),
        ),
        Value(np.array([[1.0, 2, 1], [1, 1, 2]])),
    )
    case("identity=1 with add", lambda: S(pp.add, np.ones(3), identity=1), Error("identity"))
    case(
        "identity=0 with add",
        lambda: S(pp.add, np.ones(3), identity=0, exclusive=True),
        Value([0.0, 1.0, 2.0]),
    )
    case(
        "exclusive callable without identity",
        lambda: S(lambda a, b: a + b, np.ones(3), exclusive=True),
        Error("identity"),
    )
    case(
        "exclusive callable with identity",
        lambda: S(lambda a, b: a + b, np.ones(3), exclusive=True, identity=0.0),
        Value([0.0, 1.0, 2.0]),
    )
    case(
        "identity of the wrong structure",
        lambda: S(
            lambda a, b: (a[0] * b[0], b[0] * a[1] + b[1]),
            (np.ones(3), np.ones(3)),
            exclusive=True,
            identity={"x": 1},
        ),
        Error("identity"),
    )
    case(
        "identity of the wrong shape",
        lambda: S(lambda a, b: a + b, np.ones((2, 3)), exclusive=True, identity=np.zeros(5)),
        Error("identity"),
    )
    case("fn=None", lambda: S(None, np.ones(3)), Error("fn"))
    case("fn=np.add", lambda: S(np.add, np.ones(3)), Value([1.0, 2.0, 3.0]))
    case(
        "fn=np.subtract (not associative)",
        lambda: S(np.subtract, np.arange(5.0)),
        Error("fn", "subtract"),
    )
    case(
        "fn returns a shorter array",
        lambda: S(lambda a, b: (a + b)[:1], np.ones(4), check=False),
        Error("fn"),
    )
    case("fn returns a scalar", lambda: S(lambda a, b: 1.0, np.ones(4)), Error("fn"))
    case(
        "masked array add",
        lambda: S(pp.add, np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])),
        Value(lambda: np.ma.array([1.0, 1.0, 4.0], mask=[0, 1, 0])),
    )
    case(
        "masked array, callable, no identity",
        lambda: S(lambda a, b: a + b, np.ma.array([1.0, 2.0], mask=[0, 1])),
        Error("identity"),
    )
    case(
        "np.matrix",
        lambda: S(pp.add, np.matrix([[1.0, 2.0, 3.0]]), axis=1),
        Value(np.array([[1.0, 3.0, 6.0]])),
    )
    case("empty tuple", lambda: S(pp.add, ()), Error("elems"))
    case(
        "tuple of one array",
        lambda: S(pp.add, (np.array([1.0, 2.0]),)),
        Value((np.array([1.0, 3.0]),)),
    )
    if da is not None:
        case(
            "dask array",
            lambda: S(pp.add, da.from_array(np.arange(10.0), chunks=3)).compute(),
            Value(lambda: cumsum64(np.arange(10.0))),
        )
        case(
            "dask with device='cpu'",
            lambda: S(pp.add, da.from_array(np.arange(10.0), chunks=3), device="cpu"),
            Error("device", "elems"),
        )
        case(
            "dask with unknown chunks",
            lambda: S(pp.add, (lambda a: a[a > 2])(da.from_array(np.arange(10.0), chunks=3))),
            Error("elems"),
        )


SCAN_TREES = Table("associative_scan", scan_tree_cases)


@pytest.mark.parametrize("c", SCAN_TREES.params())
def test_scan_trees(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
