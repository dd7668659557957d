"""Bad inputs of ``Monoid``: one test per case (``_judge``)."""

from __future__ import annotations

import numpy as np
import pytest

import propopt as pp
from tests.bad_inputs._judge import Case, Either, Error, Table, Value, judge

pytestmark = pytest.mark.bad_inputs


def monoid_cases(case: Table) -> None:
    case("Monoid(combine=5)", lambda: pp.Monoid(5, 0), Error("combine"))
    case(
        "identity of 2 for a 1-arity combine",
        lambda: pp.Monoid(lambda a, b: a + b, (0, 0)),
        Error("combine", "identity"),
    )
    case(
        "combine returns 2 values for arity 1",
        lambda: pp.Monoid(lambda a, b: (a, b), 0),
        Error("combine"),
    )
    case(
        "@monoid without identity, used in a scan",
        lambda: pp.associative_scan(pp.monoid(lambda a, b: a + b), np.ones(3)),
        Error("monoid", "identity", "fn"),
    )
    case(
        "kinds='f' monoid given ints",
        lambda: pp.associative_scan(pp.Monoid(lambda a, b: a + b, 0.0, kinds="f"), np.arange(3)),
        Error("elems"),
    )
    case(
        "combine numba cannot compile",
        lambda: pp.associative_scan(
            pp.Monoid(lambda a, b: {}.get(a, b), 0.0, name="dictget"), np.ones(3)
        ),
        Error("combine", "dictget"),
    )
    case(
        "custom monoid (affine)",
        lambda: pp.associative_scan(
            pp.Monoid(lambda a1, b1, a2, b2: (a1 * a2, a2 * b1 + b2), (1.0, 0.0)),
            (np.full(3, 0.5), np.ones(3)),
        )[1],
        Value([1.0, 1.5, 1.75]),
    )
    case("Monoid called on lists", lambda: pp.add([1.0], [2.0]), Either(Value([3.0]), "a", "b"))
    case("Monoid.identity(dtype='banana')", lambda: pp.maximum.identity("banana"), Error("dtype"))


MONOID = Table("Monoid", monoid_cases)


@pytest.mark.parametrize("c", MONOID.params())
def test_monoid(c: Case, request: pytest.FixtureRequest) -> None:
    judge(c, request)
