"""Mamba's selective scan: the verbs in :mod:`.core`, their kernels beside it.

* :mod:`.core`: ``selective_scan``, ``step``, ``chapter_scan`` (checks, the
  ``(method, device)`` table, the drivers);
* ``_host.py`` (layouts, buffers, the gradients' reduction) over the fused
  numba kernels of ``_cpu.py`` (real) and ``_complex.py`` (complex ``A``),
  differentiable through ``_autograd.py``; ``_cuda.py`` (numba.cuda);
  ``_parallel.py`` (the chapter's derivation on :func:`propopt.associative_scan`);
  ``_step.py`` (one token of Mamba-2's multi-head state).

The explicit vector code (``.._lanes``, ``.._exp``), the argument checks
(``.._checks``) and the references (``.._reference``) are the case study's,
shared with :mod:`..ssd` and :mod:`..floor`.
"""

from .core import (
    AUTO,
    BACKENDS,
    COMPLEX_ARGS,
    DEVICES,
    METHODS,
    OLD_METHODS,
    Device,
    Method,
    chapter_scan,
    selective_scan,
    step,
)

__all__ = [
    "AUTO",
    "BACKENDS",
    "COMPLEX_ARGS",
    "DEVICES",
    "METHODS",
    "OLD_METHODS",
    "Device",
    "Method",
    "chapter_scan",
    "selective_scan",
    "step",
]
