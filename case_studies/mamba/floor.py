"""The floor the fused forward is measured against: its exps and nothing else.

The selective scan evaluates ``exp(delta_t A)`` for every (token, channel,
state) triple, 67 M of them at L = d_model = 2048 and d_state = 16, and on a
CPU without a vector libm those exps are most of its arithmetic.
:func:`exps_only` evaluates exactly them, with the same vectorized
polynomial (:func:`._exp.fexp`), the same channels-in-SIMD-lanes layout and
the same threads, and sums them so that nothing is optimized away: the time
of a forward pass that did nothing else.  The capstone and the benchmarks
report the forward's time over this floor.

In float32 each token's exps are :func:`._lanes.exp_sum_lanes`, the code of
the forward's token update less the state update, so the floor is as fast
as the forward's own exps (one thread, L = d_model = 1024: 2.2 ms; written
as numba loops, like the forward before it, 2.8 ms, slower than the whole
token update of the forward now).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from propopt import threads
from propopt.arrays import plain

from . import _checks
from ._lanes import exp_sum_update

#: numba keys its on-disk cache on this file only: change this line when
#: editing what :func:`_exps` compiles in from ``_lanes`` or ``_exp``.
DEPENDS_ON = "_lanes: exp_sum_lanes (inlined), _vexp; _exp: fexp constants"

#: Channels per SIMD block, as the forward's lane kernel.
W = 64


@njit(parallel=True, fastmath=True, cache=True)
def _exps(delta, A, out):  # type: ignore[no-untyped-def]
    nb, L, D = delta.shape
    N = A.shape[1]
    nblk = D // W
    for task in prange(nb * nblk):
        b = task // nblk
        d0 = (task - b * nblk) * W
        AT = np.empty((N, W), dtype=delta.dtype)
        for n in range(N):
            for j in range(W):
                AT[n, j] = A[d0 + j, n]
        # one accumulator per (state, channel), as the forward's state h:
        # independent chains, so the adds do not serialize
        acc = np.zeros((N, W), dtype=delta.dtype)
        for t in range(L):
            exp_sum_update(acc, AT, delta[b, t, d0 : d0 + W])
        for j in range(W):
            total = acc[0, j]
            for n in range(1, N):
                total += acc[n, j]
            out[b, d0 + j] = total


@threads.parallel
def exps_only(delta: Any, A: Any) -> np.ndarray:
    """``sum_t exp(delta[b, t, d] * A[d, n])`` per (b, d): the exps of a forward pass, alone.

    Parameters
    ----------
    delta : array (batch, L, d_model)
        The chapter's layout: float16, bfloat16, float32 or float64 (torch
        CPU tensors are viewed, lists read as arrays).  As in
        :func:`selective_scan`, half precisions are computed in float32, and
        integers and complex numbers are refused.
    A : array (d_model, d_state)
        Real floats, cast to the compute dtype.

    Returns
    -------
    ndarray (batch, d_model)
        The sums, so that the exps cannot be skipped, in the compute dtype
        (float64 for float64 ``delta``, else float32).  ``d_model`` must be
        a multiple of 64.
    """
    dl, a = (_floats(name, v) for name, v in (("delta", delta), ("A", A)))
    cdt = np.float64 if dl.dtype == np.float64 else np.float32
    dl = np.ascontiguousarray(dl, dtype=cdt)
    a = np.ascontiguousarray(a, dtype=cdt)
    if dl.ndim != 3 or a.ndim != 2 or a.shape[0] != dl.shape[2] or dl.shape[2] % W:
        raise ValueError(
            f"delta has shape {dl.shape} and A {a.shape}: need (batch, L, d_model) and "
            f"(d_model, d_state) with d_model a multiple of {W}"
        )
    out = np.empty((dl.shape[0], dl.shape[2]), cdt)
    _exps(dl, a, out)
    return out


def _floats(name: str, v: Any) -> np.ndarray:
    """``v`` as a NumPy array of real floats (native byte order; bfloat16 as float32)."""
    x = plain(name, v)
    if x.dtype.kind != "f":
        raise TypeError(
            f"{name} has dtype {x.dtype}; expected one of {', '.join(_checks.FLOATS)} "
            f"(cast it first, e.g. {name}.astype(np.float32))"
        )
    return x
