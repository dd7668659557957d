"""Property audits: does a computation really have the property a primitive needs?

Each optimization in propopt is licensed by a mathematical property; an audit
tests that property on samples and returns a small report a person can read
(``str(report)``), with the worst violation and a counterexample.

Laws of a binary combine (associativity)
    :func:`check_associative`, :func:`check_commutative`, :func:`check_identity`.

The six-property table of the capstone chapter
    :func:`audit_table` runs every check that applies to an operator, a pair
    function or a kernel (``python -m propopt audit module:function``).
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
from ._table import AuditTable, Verdict, audit_table

__all__ = [
    "AssociativityError",
    "AssociativityReport",
    "AuditTable",
    "Pair",
    "PropertyReport",
    "Single",
    "Triple",
    "Verdict",
    "audit_table",
    "check_associative",
    "check_commutative",
    "check_identity",
]
