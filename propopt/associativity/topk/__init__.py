"""Top-k as a mergeable summary: ``topk`` along an axis, ``TopK`` and ``merge_topk``.

:mod:`.core` is the verb ``topk``; :mod:`._summary` the mergeable summary;
:mod:`._backends` the table of ``(method, device)`` rows: the threshold
selection on numba threads (:mod:`._threads`, :mod:`._cpu`, with
:mod:`._order` and :mod:`._radix` for the final order) and on CUDA
(:mod:`._cuda`), and the reference sort (:mod:`._reference`).
"""

from ._backends import DEVICES, METHODS
from ._summary import TopK, merge_topk
from .core import topk

__all__ = ["DEVICES", "METHODS", "TopK", "merge_topk", "topk"]
