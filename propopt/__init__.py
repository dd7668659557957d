"""propopt: mathematical properties of a computation, turned into speed.

Each property licenses a transformation; each subpackage exposes a few verbs
that are correct for any input with the property and fast on CPU threads,
CUDA and dask.

Associativity (:mod:`propopt.associativity`)
    :func:`associative_scan`, :class:`Monoid`, :func:`monoid` and the built-in
    monoids :data:`add`, :data:`mul`, :data:`maximum`, :data:`minimum`,
    :data:`logaddexp`, :data:`linear_recurrence`, :data:`matmul2x2`.

Separability (:mod:`propopt.separability`)
    :func:`low_rank` (randomized SVD to a rank or a tolerance), :func:`moments`
    and :class:`Moments` (multipoles: merge, evaluate; numba building blocks).

Auditing (:mod:`propopt.audit`)
    :func:`propopt.audit.check_associative` tests the law a primitive relies on.
"""

from .associativity import (
    Monoid,
    add,
    associative_scan,
    linear_recurrence,
    logaddexp,
    matmul2x2,
    maximum,
    minimum,
    monoid,
    mul,
)
from .separability import Moments, low_rank, moments

__version__ = "0.1.0"

__all__ = [
    "Moments",
    "Monoid",
    "__version__",
    "add",
    "associative_scan",
    "linear_recurrence",
    "logaddexp",
    "low_rank",
    "matmul2x2",
    "maximum",
    "minimum",
    "moments",
    "monoid",
    "mul",
]
