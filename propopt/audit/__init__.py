"""Property audits: does a computation really have the property a primitive needs?

Each optimization in propopt is licensed by a mathematical property; an audit
tests that property on samples and returns a small report a person can read
(``str(report)``), with the worst violation and a counterexample.

Laws of a binary combine (associativity)
    :func:`check_associative`, :func:`check_commutative`, :func:`check_identity`.

Separability and locality of a pair function or kernel
    :func:`check_low_rank` (numerical rank of a far-field block),
    :func:`check_decay` (decay exponent with distance).

Symmetry of a pair function
    :func:`check_symmetric` (``f(x_j, x_i) = +/- f(x_i, x_j)``, the law
    :func:`propopt.pairwise_sum` halves the work with).

The six-property table of the capstone chapter
    :func:`audit_table` runs every check that applies to an operator, a pair
    function or a kernel (``python -m propopt audit module:function``).
"""

# re-exported (``X as X``): the associativity checks and their reports
from ..associativity.laws import (
    AssociativityError as AssociativityError,
    AssociativityReport as AssociativityReport,
    Pair as Pair,
    PropertyReport as PropertyReport,
    Single as Single,
    Triple as Triple,
    check_associative as check_associative,
    check_commutative as check_commutative,
    check_identity as check_identity,
)
from ._separability import DecayReport, LowRankReport, check_decay, check_low_rank
from ._symmetry import PairCounterexample, SymmetryReport, check_symmetric
from ._table import AuditTable, Verdict, audit_table

__all__ = [
    "AssociativityError",
    "AssociativityReport",
    "AuditTable",
    "DecayReport",
    "LowRankReport",
    "Pair",
    "PairCounterexample",
    "PropertyReport",
    "Single",
    "SymmetryReport",
    "Triple",
    "Verdict",
    "audit_table",
    "check_associative",
    "check_commutative",
    "check_decay",
    "check_identity",
    "check_low_rank",
    "check_symmetric",
]
