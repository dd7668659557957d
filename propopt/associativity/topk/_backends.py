"""The top-k backends behind one table: each takes a :class:`TopKPlan` and says if it accepts it.

A backend is a pair of functions with one signature each, as for the scans
(``_backends.py``):

* ``refuse(plan) -> Exception | None``: why this backend cannot run the
  plan (the error an explicit ``method=`` raises), or ``None``;
* ``run(plan) -> (values, indices)``: the result, of the input's kind.

The table is keyed by ``(method, device)``: ``'select'``, the threshold
selection of the compiled kernels (numba threads on the host, the CUDA
kernel on the GPU), and ``'reference'``, the slow sort the tests trust, on
the device that holds ``x``.  ``method='auto'`` is ``'select'``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import _kinds, dispatch
from . import _reference
from ._checks import torch_gather, torch_numpy
from ._threads import best_positions


@dataclass
class TopKPlan:
    """A validated call of ``topk``: what every backend receives."""

    x: Any
    k: int
    axis: int
    largest: bool
    nanbig: bool
    ordered: bool
    kind: str

    @property
    def on_gpu(self) -> bool:
        return self.kind in (_kinds.TORCH_CUDA, _kinds.CUDA)


Backend = dispatch.Backend  # Backend[TopKPlan, (values, indices)]


def _refuse_cuda(plan: TopKPlan) -> Exception | None:
    if not _cuda_available():
        return RuntimeError(
            f"x is on {_kinds.device_of(plan.x)} but numba.cuda cannot use the GPU "
            "(numba.cuda.is_available() is False); install the CUDA toolkit numba "
            "needs, or move x to the host with x.cpu()"
        )
    return None


def _cuda_available() -> bool:
    try:
        from numba import cuda
    except ImportError:  # pragma: no cover - numba without its cuda module
        return False
    return bool(cuda.is_available())


def _run_cuda(plan: TopKPlan) -> tuple[Any, Any]:
    from . import _cuda

    return _cuda.topk(plan.x, plan.k, plan.axis, plan.largest, plan.nanbig, plan.ordered)


#: ``pick(x2, k, largest, nanbig, ordered) -> (positions, counts)``: the top k
#: positions of each row of a 2-D array, and how many of them are real
Pick = Callable[[np.ndarray, int, bool, bool, bool], tuple[np.ndarray, np.ndarray]]


def _select_rows(
    x2: np.ndarray, k: int, largest: bool, nanbig: bool, ordered: bool
) -> tuple[np.ndarray, np.ndarray]:
    return best_positions(x2, k, largest, nanbig, ordered=ordered)  # type: ignore[no-any-return]


def _sorted_rows(
    x2: np.ndarray, k: int, largest: bool, nanbig: bool, ordered: bool
) -> tuple[np.ndarray, np.ndarray]:
    pos = _reference.topk(x2, k, largest, "largest" if nanbig else "ignore")
    return pos, (pos >= 0).sum(axis=1)


def _run_host(pick: Pick) -> Callable[[TopKPlan], tuple[Any, Any]]:
    def run(plan: TopKPlan) -> tuple[Any, Any]:
        x, ax = plan.x, plan.axis
        if plan.kind == _kinds.TORCH:
            return _topk_torch_cpu(x, plan.k, ax, plan.largest, plan.nanbig, pick, plan.ordered)
        idx = _positions(x, plan.k, ax, plan.largest, plan.nanbig, pick, plan.ordered)
        return np.take_along_axis(x, idx, ax), idx

    return run


Key = tuple[str, str]  # (method, device)

BACKENDS: dict[Key, Backend] = {
    ("select", "cpu"): Backend(dispatch.takes_any, _run_host(_select_rows)),
    ("select", "cuda"): Backend(_refuse_cuda, _run_cuda),
    ("reference", "cpu"): Backend(dispatch.takes_any, _run_host(_sorted_rows)),
}
"""Every backend by its ``(method, device)``."""

AUTO: tuple[Key, ...] = (("select", "cuda"), ("select", "cpu"))
"""``method='auto'``: the first of these on the device of ``x`` that accepts."""

METHODS: tuple[str, ...] = ("auto", *dict.fromkeys(m for m, _ in BACKENDS))
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")

#: the retired ``method=`` spellings that named a place, and what they now are
OLD_METHODS: dict[str, Key] = {"cpu": ("select", "cpu"), "cuda": ("select", "cuda")}


def choose(method: str, device: str, plan: TopKPlan) -> Key:
    """The backend for ``(method, device)`` ('auto': the first of :data:`AUTO` that accepts)."""
    key = dispatch.choose_on(
        BACKENDS, method, device, plan, _kinds.PLACES[plan.kind], AUTO, what="x"
    )
    if key is None:  # only CUDA inputs get here, when numba cannot use the GPU
        raise _refuse_cuda(plan) or AssertionError("no top-k backend accepts")
    return key


def _positions(
    x: np.ndarray, k: int, ax: int, largest: bool, nanbig: bool, pick: Pick, ordered: bool = True
) -> np.ndarray:
    """int64 indices of the top k along ``ax`` (shape of ``x`` with min(k, n) there)."""
    xm = np.moveaxis(x, ax, -1)
    lead, n = xm.shape[:-1], xm.shape[-1]
    rows = int(np.prod(lead, dtype=np.int64))
    kk = min(k, n)
    if n == 0 or rows == 0:
        return np.moveaxis(np.empty(lead + (kk,), np.int64), -1, ax)
    x2 = xm.reshape(rows, n)
    pos, counts = pick(x2, kk, largest, nanbig, ordered)
    got = int(counts.min())
    if got < kk:
        if rows > 1 and got != int(counts.max()):
            raise ValueError(
                f"rows of x hold different numbers of non-NaN values ({got} to "
                f"{int(counts.max())}) and k={k}; with nan='ignore' the result would be "
                "ragged: pass nan='largest' (torch's convention) or a k no larger than "
                f"{got}"
            )
        pos = pos[:, :got]
        kk = got
    return np.moveaxis(pos.reshape(lead + (kk,)), -1, ax)


def _topk_torch_cpu(
    x: Any, k: int, ax: int, largest: bool, nanbig: bool, pick: Pick, ordered: bool = True
) -> tuple[Any, Any]:
    import torch

    view = torch_numpy(x)
    idx = torch.from_numpy(
        np.ascontiguousarray(_positions(view, k, ax, largest, nanbig, pick, ordered))
    )
    return torch_gather(x, ax, idx), idx
