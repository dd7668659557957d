"""The vectorizable ``exp`` and ``softplus`` of the Mamba kernels: :mod:`propopt.vmath`'s.

They moved into propopt's core, beside a vectorizable ``log1p``, so that the
library's own kernels (the ``logaddexp`` scan) use them too; their method,
accuracy in ulp and edge cases are in :mod:`propopt.vmath`'s docstring.  The
names stay here for the kernels that import them, and the float32 constants
for ``_lanes.py``, which repeats ``fexp`` operation for operation on vectors.
"""

from __future__ import annotations

from propopt.vmath import (  # noqa: F401  (re-exported for the kernels and _lanes.py)
    _BIAS,
    _C2,
    _C3,
    _C4,
    _C5,
    _C6,
    _HALF,
    _KMAX,
    _KMIN,
    _LN2_HI,
    _LN2_LO,
    _LOG2E,
    _ONE,
    _SHIFT,
    _XMIN,
    _ZERO,
    fexp,
    fsoftplus,
)

__all__ = ["fexp", "fsoftplus"]
