"""propopt: mathematical properties of a computation, turned into speed.

Each property licenses a transformation; each subpackage exposes a few verbs
that are correct for any input with the property and fast on CPU threads,
CUDA and dask.

Associativity (:mod:`propopt.associativity`)
    :func:`associative_scan`, :class:`Monoid`, :func:`monoid` and the built-in
    monoids :data:`add`, :data:`mul`, :data:`maximum`, :data:`minimum`,
    :data:`logaddexp`, :data:`linear_recurrence`, :data:`matmul2x2`;
    :func:`recurrence` (the ``h`` of ``h = a h + b`` alone);
    :class:`TopK` (a mergeable top-k summary; :func:`merge_topk` combines two)
    and :func:`topk` (top-k along an axis, like torch.topk).

Separability (:mod:`propopt.separability`)
    :func:`low_rank` (randomized SVD to a rank or a tolerance), :func:`moments`
    and :class:`Moments` (multipoles: merge, evaluate; numba building blocks).

Locality (:mod:`propopt.locality`)
    :func:`morton_order` and :func:`morton_keys` (Z-order of 2-D / 3-D points);
    tiles, tiled matmul and pair sums, :func:`roofline` in the subpackage.

Symmetry (:mod:`propopt.symmetry`)
    :func:`pairwise_sum` (each unordered pair once, credited to both ends) and
    :func:`direct_gravity` (softened direct N-body sum, also at separate targets).

Threads (:mod:`propopt.threads`)
    :func:`set_num_threads` (also a context manager) and :func:`get_num_threads`:
    each parallel call uses the cores that are free, unless a count is set.

Auditing (:mod:`propopt.audit`)
    :func:`propopt.audit.check_associative` tests the law a primitive relies on.
"""

from . import _jit, _numba_policy, _numba_stamp, _numba_startup

_numba_stamp.install()  # before any kernel is decorated: numba picks its cache locator then

from .associativity import (  # noqa: E402
    Monoid,
    TopK,
    add,
    associative_scan,
    linear_recurrence,
    logaddexp,
    matmul2x2,
    maximum,
    merge_topk,
    minimum,
    monoid,
    mul,
    recurrence,
    topk,
)
from .locality import morton_keys, morton_order  # noqa: E402
from .separability import Moments, low_rank, moments  # noqa: E402
from .symmetry import direct_gravity, pairwise_sum  # noqa: E402
from .threads import get_num_threads, set_num_threads  # noqa: E402

_numba_policy.install()
_numba_startup.install()
_jit.install_compile_notice()

__version__ = "0.1.0"

__all__ = [
    "Moments",
    "Monoid",
    "TopK",
    "__version__",
    "add",
    "associative_scan",
    "direct_gravity",
    "get_num_threads",
    "linear_recurrence",
    "logaddexp",
    "low_rank",
    "matmul2x2",
    "maximum",
    "merge_topk",
    "minimum",
    "moments",
    "monoid",
    "morton_keys",
    "morton_order",
    "mul",
    "pairwise_sum",
    "recurrence",
    "set_num_threads",
    "topk",
]
