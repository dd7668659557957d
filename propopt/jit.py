"""Generated numba kernels for code built on propopt, cached on disk like hand-written ones.

Some kernels are best written per case: the straight-line code of one
expansion order, a user's combine function spliced into a scan.  Their
source is generated as text and loaded with :func:`load_module`: written to
a file named by its hash under ``$PROPOPT_CACHE_DIR`` (``~/.cache/propopt``)
and imported from there once per process, so that numba's ``cache=True``
keeps the compiled code between processes.  The case studies use it (the
N-body code's mutual M2L, one module per order); propopt's own verbs do too.
"""

from __future__ import annotations

from ._jit import cache_dir, load_module

__all__ = ["cache_dir", "load_module"]
