"""The scan backends behind one table: each takes a :class:`ScanPlan` and says if it accepts it.

``associative_scan`` validates its arguments once into a plan; a backend is
a pair of functions with one signature each:

* ``refuse(plan) -> Exception | None``: why this backend cannot run the plan
  (the error an explicit ``method=`` raises), or ``None``;
* ``run(plan) -> list of leaves``: the scan.

``method='auto'`` runs the first backend of :data:`AUTO` that accepts
(dask arrays; then torch's own CUDA scan where torch has the op and is the
faster below a measured size; then CUDA arrays with a monoid, then host
arrays with a monoid, then vectorized calls of ``fn``); the Dask backend's per-chunk step
goes through the same table.  The laws every backend relies on are in
``scan.py``; the slow sequential fold the tests trust is ``reference``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _kinds, _validate, dispatch
from ._cpu import SUPPORTED
from .monoid import Monoid

Leaves = list[Any]


@dataclass
class ScanPlan:
    """A validated scan: what every backend receives.

    ``combine`` is ``fn`` lifted to lists of leaves; ``identity`` holds one
    element per leaf (or ``None`` where it is not needed or not known).
    """

    fn: Monoid | Callable[[Any, Any], Any]
    combine: Callable[[Leaves, Leaves], Leaves]
    leaves: Leaves
    kind: str
    axis: int
    reverse: bool
    exclusive: bool
    identity: Leaves | None = None
    needs_grad: bool = field(init=False)
    #: NumPy arrays the CPU kernels write the result into (``out=``), or None
    out: Leaves | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.needs_grad = any(getattr(x, "requires_grad", False) for x in self.leaves)

    @property
    def is_monoid(self) -> bool:
        return isinstance(self.fn, Monoid)

    @property
    def on_gpu(self) -> bool:
        return self.kind in (_kinds.TORCH_CUDA, _kinds.CUDA)

    @property
    def np_dtype(self) -> np.dtype | None:
        return _validate.np_dtype(self.leaves[0].dtype)

    def described(self) -> str:
        return _kinds.describe(self.leaves[0])


Backend = dispatch.Backend  # Backend[ScanPlan, Leaves]: refuse(plan), run(plan)


# ------------------------------------------------------------------- refusals
def _not_dask(plan: ScanPlan, name: str) -> Exception | None:
    if plan.kind == _kinds.DASK:
        return ValueError(
            f"method={name!r} cannot scan dask arrays; use method='dask' or 'auto' "
            "(or compute the arrays first)"
        )
    return None


def _kernel(plan: ScanPlan, name: str) -> Exception | None:
    """The refusals shared by the compiled backends (cpu and cuda)."""
    if not plan.is_monoid:
        return ValueError(
            f"method={name!r} needs a Monoid (a numba-compilable combine with its "
            "identity); wrap the scalar combine with propopt.Monoid, or use "
            "method='generic' for a plain callable"
        )
    if plan.needs_grad:
        return ValueError(
            f"method={name!r} is not differentiable and elems requires grad; use "
            "method='generic' (or 'auto') for torch autograd, or detach elems"
        )
    if plan.np_dtype not in SUPPORTED:
        names = sorted(d.name for d in SUPPORTED)
        return TypeError(
            f"method={name!r} has no kernel for dtype {plan.leaves[0].dtype} (monoid "
            f"{plan.fn.name!r}); the kernels take {', '.join(names)}: cast elems (e.g. to "  # type: ignore[union-attr]
            "float32) or use method='generic'"
        )
    return None


def _refuse_cpu(plan: ScanPlan) -> Exception | None:
    if err := _not_dask(plan, "cpu"):
        return err
    if plan.on_gpu:
        return ValueError(
            "method='cpu' got CUDA arrays; use method='cuda' or 'auto', or move them to the "
            "host first"
        )
    return _kernel(plan, "cpu")


def _refuse_cuda(plan: ScanPlan) -> Exception | None:
    if err := _not_dask(plan, "cuda"):
        return err
    if not plan.on_gpu:
        return ValueError(
            f"method='cuda' needs CUDA arrays (torch CUDA tensors or numba device arrays) but "
            f"elems holds {plan.described()}; move them to the GPU or use method='cpu'"
        )
    return _kernel(plan, "cuda")


#: torch's own CUDA scan for a monoid, where torch has the exact op: the
#: monoid's name -> (torch function, the dtypes it is taken for)
TORCH_OPS: dict[str, tuple[str, frozenset[str]]] = {
    "add": ("cumsum", frozenset({"float32", "float64", "int32", "int64"})),
    "mul": ("cumprod", frozenset({"float32", "float64", "int32", "int64"})),
    "logaddexp": ("logcumsumexp", frozenset({"float32", "float64"})),
}

#: ``method='auto'`` takes torch's op for scans of fewer elements than this
#: (docs/gpu.md: the crossover measured against the ``'cuda'`` kernel)
TORCH_AUTO_BELOW: dict[str, int] = {"cumsum": 1 << 62, "cumprod": 1 << 62, "logcumsumexp": 1 << 62}


def _refuse_torch(plan: ScanPlan) -> Exception | None:
    if plan.kind != _kinds.TORCH_CUDA:
        return ValueError(
            f"method='torch' runs torch's CUDA scans on torch CUDA tensors but elems holds "
            f"{plan.described()}; use method='auto'"
        )
    name = getattr(plan.fn, "name", None)
    if not plan.is_monoid or name not in TORCH_OPS:
        names = ", ".join(map(repr, TORCH_OPS))
        return ValueError(
            f"method='torch' takes the monoids torch has a scan for ({names}), not "
            f"{getattr(plan.fn, 'name', plan.fn)!r}; use method='cuda' or 'auto'"
        )
    op, dtypes = TORCH_OPS[name]
    if str(plan.leaves[0].dtype).replace("torch.", "") not in dtypes:
        return TypeError(
            f"method='torch' runs torch.{op} on {', '.join(sorted(dtypes))}, not "
            f"{plan.leaves[0].dtype}; cast elems or use method='cuda' or 'auto'"
        )
    if plan.reverse or plan.exclusive:
        return ValueError(
            f"method='torch' has no reverse or exclusive form of torch.{op}; use "
            "method='cuda' or 'auto'"
        )
    return None


def _torch_op(plan: ScanPlan) -> str:
    """The torch function for the plan's monoid (one that :func:`_refuse_torch` accepted)."""
    return TORCH_OPS[str(getattr(plan.fn, "name", ""))][0]


def _refuse_torch_auto(plan: ScanPlan) -> Exception | None:
    """'auto' takes torch's op below its measured crossover with the CUDA kernel."""
    err = _refuse_torch(plan)
    if err is None:
        op = _torch_op(plan)
        if plan.leaves[0].numel() >= TORCH_AUTO_BELOW[op]:
            return ValueError(f"the CUDA kernel is faster than torch.{op} at this size")
    return err


def _refuse_host_calls(name: str) -> Callable[[ScanPlan], Exception | None]:
    def refuse(plan: ScanPlan) -> Exception | None:
        if err := _not_dask(plan, name):
            return err
        if plan.kind == _kinds.CUDA:
            return ValueError(
                f"method={name!r} cannot run on CUDA device arrays: pass a Monoid (compiled "
                "for the GPU), or torch CUDA tensors"
            )
        return None

    return refuse


def _refuse_dask(plan: ScanPlan) -> Exception | None:
    if plan.kind != _kinds.DASK:
        return ValueError(
            f"method='dask' needs dask arrays but elems holds {plan.described()}; wrap them "
            "with dask.array.from_array or use method='auto'"
        )
    return None


def _refuse_generic_auto(plan: ScanPlan) -> Exception | None:
    """'auto' sends a monoid to the generic path only where no kernel takes its dtype."""
    err = _refuse_host_calls("generic")(plan)
    if err is None and plan.is_monoid and not plan.needs_grad and plan.np_dtype in SUPPORTED:
        return ValueError("a compiled kernel takes this monoid and dtype")
    return err


# ----------------------------------------------------------------------- runs
def _run_cpu(plan: ScanPlan) -> Leaves:
    from . import _cpu

    assert isinstance(plan.fn, Monoid)
    if plan.kind == _kinds.TORCH:
        import torch

        views = [_kinds.to_numpy_view(x) for x in plan.leaves]
        out = _cpu.scan(plan.fn, views, plan.axis, plan.reverse, plan.exclusive, out=plan.out)
        return [torch.from_numpy(o) for o in out]
    return _cpu.scan(plan.fn, plan.leaves, plan.axis, plan.reverse, plan.exclusive, out=plan.out)


def _run_cuda(plan: ScanPlan) -> Leaves:
    from . import _cuda

    assert isinstance(plan.fn, Monoid)
    return _cuda.scan(plan.fn, plan.leaves, plan.axis, plan.reverse, plan.exclusive)


def _run_torch(plan: ScanPlan) -> Leaves:
    import torch

    x = plan.leaves[0]
    op = _torch_op(plan)
    if op == "logcumsumexp":
        return [torch.logcumsumexp(x, dim=plan.axis)]
    return [getattr(torch, op)(x, dim=plan.axis, dtype=x.dtype)]


def _run_generic(plan: ScanPlan) -> Leaves:
    from . import _generic

    return _generic.scan(
        plan.combine, plan.leaves, plan.axis, plan.reverse, plan.exclusive, plan.identity
    )


def _run_reference(plan: ScanPlan) -> Leaves:
    from . import _reference

    return _reference.scan(
        plan.combine, plan.leaves, plan.axis, plan.reverse, plan.exclusive, plan.identity
    )


def _run_dask(plan: ScanPlan) -> Leaves:
    from . import _dask

    return _dask.scan(
        plan.fn,
        plan.combine,
        plan.leaves,
        plan.axis,
        plan.reverse,
        plan.exclusive,
        plan.identity,
        scan_block,
    )


def scan_block(
    fn: Any, combine: Callable[[Leaves, Leaves], Leaves], blocks: Leaves, axis: int, reverse: bool
) -> Leaves:
    """One Dask chunk's inclusive scan in memory, by the backend the table picks for it."""
    plan = ScanPlan(fn, combine, blocks, _kinds.NUMPY, axis, reverse, False)
    return run("auto", plan)


BACKENDS: dict[str, Backend] = {
    "dask": Backend(_refuse_dask, _run_dask),
    "torch": Backend(_refuse_torch, _run_torch),
    "cuda": Backend(_refuse_cuda, _run_cuda),
    "cpu": Backend(_refuse_cpu, _run_cpu),
    "generic": Backend(_refuse_host_calls("generic"), _run_generic),
    "reference": Backend(_refuse_host_calls("reference"), _run_reference),
}
"""Every backend by its ``method=`` name."""

AUTO: tuple[str, ...] = ("dask", "torch", "cuda", "cpu", "generic")
"""``method='auto'``: the first of these that accepts, in this order."""

AUTO_REFUSE: dict[str, Callable[[ScanPlan], Exception | None]] = {
    "torch": _refuse_torch_auto,
    "generic": _refuse_generic_auto,
}
"""The rows that ``'auto'`` takes less often than an explicit ``method=``."""


def choose(method: str, plan: ScanPlan) -> str:
    """The backend for ``method`` ('auto': the first in :data:`AUTO` that accepts), or its error."""
    key = None if method == "auto" else method
    name = dispatch.choose(BACKENDS, key, plan, AUTO, AUTO_REFUSE)
    if name is not None:
        return name
    # only CUDA device arrays get here: the GPU kernels are what could have run them
    err = _refuse_cuda(plan)
    if isinstance(err, ValueError) and not plan.is_monoid:
        err = ValueError(
            "a plain callable fn cannot run on CUDA device arrays; pass a Monoid, or torch "
            "CUDA tensors"
        )
    raise err if err is not None else AssertionError("no scan backend accepts this plan")


def run(method: str, plan: ScanPlan) -> Leaves:
    """Run ``plan`` on the backend :func:`choose` picks."""
    return BACKENDS[choose(method, plan)].run(plan)
