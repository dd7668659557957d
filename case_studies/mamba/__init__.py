"""Case study 1 of the capstone: Mamba's selective scan, on CPU and CUDA.

:func:`selective_scan` (mamba_ssm ``selective_scan_fn`` semantics, with
``initial_state`` and a differentiable last state), :func:`step` (one token
with a cached state), :func:`chapter_scan` (the chapter's layout),
:func:`naive` (the chapter's loop, the baseline) and :func:`reference`
(a sequential float64-capable loop), :func:`exps_only` (the forward's exps
alone, the floor it is measured against); Mamba-2's :func:`ssd_scan`
(mamba_ssm's ``mamba_chunk_scan_combined``: heads, groups, packed
sequences), and :func:`step` with multi-head states.  See docs/mamba.md.
"""

from ._reference import naive, reference
from .floor import exps_only
from .scan import METHODS, chapter_scan, selective_scan, step
from .ssd import SSD_METHODS, ssd_scan

__all__ = [
    "METHODS",
    "SSD_METHODS",
    "chapter_scan",
    "exps_only",
    "naive",
    "reference",
    "selective_scan",
    "ssd_scan",
    "step",
]
