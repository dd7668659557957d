"""Property audits: does a computation really have the property a primitive needs?

Each optimization in propopt is licensed by a mathematical property; an audit
tests that property on samples and returns a small report a person can read
(``str(report)``), with the worst violation and a counterexample.

Laws of a binary combine (associativity)
    :func:`check_associative`, :func:`check_commutative`, :func:`check_identity`.
"""

from ._laws import (
    AssociativityError,
    AssociativityReport,
    Pair,
    PropertyReport,
    Single,
    Triple,
    check_associative,
    check_commutative,
    check_identity,
)

__all__ = [
    "AssociativityError",
    "AssociativityReport",
    "Pair",
    "PropertyReport",
    "Single",
    "Triple",
    "check_associative",
    "check_commutative",
    "check_identity",
]
