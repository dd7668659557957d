"""Mamba-2's chunked SSD scan: the verb in :mod:`.core`, its kernels beside it.

* :mod:`.core`: ``ssd_scan`` (checks, the ``(method, device)`` table),
  ``phase_times`` and ``gemm_profile`` (where the time goes);
* ``'fused'``: ``_host.py`` (chunk bookkeeping, the GEMMs, the three
  phases) over the numba kernels of ``_cpu.py`` and the explicit vector code
  of ``_tile.py``;
* ``'ops'``: ``_torch.py`` (torch operations) with ``_carry.py`` (the carry
  pass and its adjoint as numba kernels);
* ``'reference'``: ``_reference.py``; ``_nonfinite.py`` keeps an inf or nan
  in its sequence for the chunked scans.
"""

from .core import (
    AUTO,
    BACKENDS,
    GEMM_BACKEND,
    OLD_METHODS,
    SSD_METHODS,
    SsdMethod,
    gemm_profile,
    phase_times,
    ssd_scan,
)

__all__ = [
    "AUTO",
    "BACKENDS",
    "GEMM_BACKEND",
    "OLD_METHODS",
    "SSD_METHODS",
    "SsdMethod",
    "gemm_profile",
    "phase_times",
    "ssd_scan",
]
