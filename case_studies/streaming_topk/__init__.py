"""Case study 2 of the capstone: streaming top-K, exact, parallel and distributed.

Baselines (the chapter's): :func:`sort_everything` and :func:`heapq_loop`.
Built from propopt's :class:`~propopt.TopK` (a mergeable summary whose merge
is associative and commutative) and :func:`~propopt.topk`:

* :func:`top_k_chunks`: the best rows of a stream of chunks (structured
  arrays or DataFrames) on several threads, in ``O(k)`` memory;
* :func:`top_k_dask_array`, :func:`top_k_dask_dataframe`: a tree reduction
  of summaries over a dask cluster;
* the redundancy variant, approximate heavy hitters by frequency, is
  :class:`propopt.redundancy.MisraGries`.

See docs/streaming_topk.md.
"""

from .distributed import top_k_dask_array, top_k_dask_dataframe
from .naive import heapq_loop, sort_everything
from .streaming import top_k_chunks

__all__ = [
    "heapq_loop",
    "sort_everything",
    "top_k_chunks",
    "top_k_dask_array",
    "top_k_dask_dataframe",
]
