"""Associativity: regroup a fold into independent pieces.

``fn(a, fn(b, c)) == fn(fn(a, b), c)`` licenses the parallel scan (and
chunked and tree reductions): pieces are reduced independently, their totals
scanned, and each piece finished from its carry.

Verbs
-----
associative_scan
    All prefix combinations of a sequence, on CPU threads, CUDA or dask.
Monoid, monoid
    A numba-compilable combine with its identity; built-ins ``add``, ``mul``,
    ``maximum``, ``minimum``, ``logaddexp``, ``linear_recurrence``,
    ``matmul2x2``.
recurrence
    The state ``h`` of ``h_t = a_t h_{t-1} + b_t`` alone: the linear
    recurrence's scan without the array of running products.
segmented
    The segmented monoid of a combine, over (flag, element) pairs: what
    ``associative_scan(..., reset=)`` scans.
TopK, merge_topk, topk
    A mergeable summary of the k best (score, id) pairs (exact; merge_topk is
    associative and commutative), and top-k along an axis like torch.topk.
"""

from .monoid import (
    Monoid,
    add,
    linear_recurrence,
    logaddexp,
    matmul2x2,
    maximum,
    minimum,
    monoid,
    mul,
)
from .recurrence import recurrence
from .scan import associative_scan
from .segmented import segmented
from .topk import TopK, merge_topk, topk

__all__ = [
    "Monoid",
    "TopK",
    "add",
    "associative_scan",
    "linear_recurrence",
    "logaddexp",
    "matmul2x2",
    "maximum",
    "merge_topk",
    "minimum",
    "monoid",
    "mul",
    "recurrence",
    "segmented",
    "topk",
]
