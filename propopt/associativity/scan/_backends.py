"""The scan backends behind one table: each takes a :class:`ScanPlan` and says if it accepts it.

``associative_scan`` validates its arguments once into a plan; a backend is
a pair of functions with one signature each:

* ``refuse(plan) -> Exception | None``: why this backend cannot run the plan
  (the error an explicit ``method=`` raises), or ``None``;
* ``run(plan) -> list of leaves``: the scan.

The table is keyed by ``(method, device)``: the algorithm (``'tiled'``, the
compiled kernels that scan tiles and pass their carries; ``'native'``,
torch's own cumulative op; ``'generic'``, vectorized calls of ``fn``;
``'reference'``, the sequential fold) and the place it runs on, where the
arrays are.  ``method='auto'`` runs the first backend of :data:`AUTO` on
that device that accepts (on the GPU, torch's own scan where torch has the
op and is the faster below a measured size, then the CUDA kernel; a monoid
on the host runs the CPU kernel; vectorized calls of ``fn`` otherwise); the
Dask backend's per-chunk step goes through the same table.  The laws every backend relies on are in
``scan.py``; the slow sequential fold the tests trust is ``reference``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ... import _kinds, dispatch
from .._cpu import SUPPORTED
from ..monoid import Monoid
from . import _generic, _reference
from ._arrays import take
from ._plan import ScanPlan

Leaves = list[Any]


Backend = dispatch.Backend  # Backend[ScanPlan, Leaves]: refuse(plan), run(plan)


# ------------------------------------------------------------------- refusals
def _kernel(plan: ScanPlan) -> Exception | None:
    """The refusals of the compiled kernels (``method='tiled'`` on the CPU and on CUDA)."""
    if not plan.is_monoid:
        return ValueError(
            "method='tiled' needs a Monoid (a numba-compilable combine with its identity); "
            "wrap the scalar combine with propopt.Monoid, or use method='generic' for a "
            "plain callable"
        )
    if plan.needs_grad:
        return ValueError(
            "method='tiled' differentiates float32 and float64 CPU tensors only and these "
            "elems require grad; use method='generic' (or 'auto') for torch autograd, or detach"
        )
    if plan.np_dtype not in SUPPORTED:
        names = sorted(d.name for d in SUPPORTED)
        return TypeError(
            f"method='tiled' has no kernel for dtype {plan.leaves[0].dtype} (monoid "
            f"{plan.fn.name!r}); the kernels take {', '.join(names)}: cast elems (e.g. to "  # type: ignore[union-attr]
            "float32) or use method='generic'"
        )
    return None


#: torch's own CUDA scan for a monoid, where torch has the exact op: the
#: monoid's name -> (torch function, the dtypes it is taken for)
TORCH_OPS: dict[str, tuple[str, frozenset[str]]] = {
    "add": ("cumsum", frozenset({"float32", "float64", "int32", "int64"})),
    "mul": ("cumprod", frozenset({"float32", "float64", "int32", "int64"})),
    "logaddexp": ("logcumsumexp", frozenset({"float32", "float64"})),
}

#: ``method='auto'`` takes torch's op for scans of fewer elements than this
#: (docs/gpu.md: the crossover measured against the tiled CUDA kernel)
TORCH_AUTO_BELOW: dict[str, int] = {"cumsum": 1 << 62, "cumprod": 1 << 62, "logcumsumexp": 1 << 62}


def _refuse_native(plan: ScanPlan) -> Exception | None:
    if plan.kind != _kinds.TORCH_CUDA:
        return ValueError(
            f"method='native' runs torch's CUDA scans on torch CUDA tensors but elems holds "
            f"{plan.described()}; use method='auto'"
        )
    name = getattr(plan.fn, "name", None)
    if not plan.is_monoid or name not in TORCH_OPS:
        names = ", ".join(map(repr, TORCH_OPS))
        return ValueError(
            f"method='native' takes the monoids torch has a scan for ({names}), not "
            f"{getattr(plan.fn, 'name', plan.fn)!r}; use method='tiled' or 'auto'"
        )
    op, dtypes = TORCH_OPS[name]
    if str(plan.leaves[0].dtype).replace("torch.", "") not in dtypes:
        return TypeError(
            f"method='native' runs torch.{op} on {', '.join(sorted(dtypes))}, not "
            f"{plan.leaves[0].dtype}; cast elems or use method='tiled' or 'auto'"
        )
    if plan.reverse or plan.exclusive:
        return ValueError(
            f"method='native' has no reverse or exclusive form of torch.{op}; use "
            "method='tiled' or 'auto'"
        )
    return None


def _torch_op(plan: ScanPlan) -> str:
    """The torch function for the plan's monoid (one that :func:`_refuse_native` accepted)."""
    return TORCH_OPS[str(getattr(plan.fn, "name", ""))][0]


def _refuse_native_auto(plan: ScanPlan) -> Exception | None:
    """'auto' takes torch's op below its measured crossover with the CUDA kernel."""
    err = _refuse_native(plan)
    if err is None:
        op = _torch_op(plan)
        if plan.leaves[0].numel() >= TORCH_AUTO_BELOW[op]:
            return ValueError(f"the CUDA kernel is faster than torch.{op} at this size")
    return err


def _refuse_host_calls(name: str) -> Callable[[ScanPlan], Exception | None]:
    def refuse(plan: ScanPlan) -> Exception | None:
        if plan.kind == _kinds.CUDA:
            return ValueError(
                f"method={name!r} cannot run on CUDA device arrays: pass a Monoid (compiled "
                "for the GPU), or torch CUDA tensors"
            )
        return None

    return refuse


def _refuse_generic_auto(plan: ScanPlan) -> Exception | None:
    """'auto' sends a monoid to the generic path only where no kernel takes its dtype."""
    err = _refuse_host_calls("generic")(plan)
    if err is None and plan.is_monoid and not plan.needs_grad and plan.np_dtype in SUPPORTED:
        return ValueError("a compiled kernel takes this monoid and dtype")
    return err


# ----------------------------------------------------------------------- runs
def _nonempty(run: Callable[[ScanPlan], Leaves]) -> Callable[[ScanPlan], Leaves]:
    """``run``, or for a scan of no elements empty copies of the leaves (no kernel runs)."""

    def run_or_empty(plan: ScanPlan) -> Leaves:
        if plan.length > 0:
            return run(plan)
        empty = [take(x, 0, 0, None, plan.axis) for x in plan.leaves]
        return [x.copy() if hasattr(x, "copy") else x.clone() for x in empty]

    return run_or_empty


def _run_cpu(plan: ScanPlan) -> Leaves:
    from .. import _cpu, _cpu_logsum

    assert isinstance(plan.fn, Monoid)
    leaves = plan.leaves
    if plan.kind == _kinds.TORCH:
        leaves = [_kinds.to_numpy_view(x) for x in plan.leaves]
    args = (plan.fn, leaves, plan.axis, plan.reverse, plan.exclusive)
    if _cpu_logsum.serves(*args):  # logaddexp's own kernel
        given = None if plan.out is None else plan.out[0]
        out = [_cpu_logsum.scan(leaves[0], given, plan.reverse, plan.exclusive)]
    else:
        out = _cpu.scan(*args, out=plan.out)
    if plan.kind == _kinds.TORCH:
        import torch

        return [torch.from_numpy(o) for o in out]
    return out


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


def _run_dask(plan: ScanPlan) -> Leaves:
    from . import _dask

    return _dask.scan(plan, scan_block)


def scan_block(
    fn: Any, combine: Callable[[Leaves, Leaves], Leaves], blocks: Leaves, axis: int, reverse: bool
) -> Leaves:
    """One Dask chunk's inclusive scan in memory, by the backend the table picks for it."""
    plan = ScanPlan(fn, combine, blocks, _kinds.NUMPY, axis, reverse, False)
    return run("auto", "auto", plan)


Key = tuple[str, str]  # (method, device)

BACKENDS: dict[Key, Backend] = {
    ("tiled", "dask"): Backend(dispatch.takes_any, _run_dask),
    ("native", "cuda"): Backend(_refuse_native, _nonempty(_run_torch)),
    ("tiled", "cuda"): Backend(_kernel, _nonempty(_run_cuda)),
    ("tiled", "cpu"): Backend(_kernel, _nonempty(_run_cpu)),
    ("generic", "cpu"): Backend(dispatch.takes_any, _nonempty(_generic.scan)),
    ("generic", "cuda"): Backend(_refuse_host_calls("generic"), _nonempty(_generic.scan)),
    ("reference", "cpu"): Backend(dispatch.takes_any, _nonempty(_reference.scan)),
    ("reference", "cuda"): Backend(_refuse_host_calls("reference"), _nonempty(_reference.scan)),
}
"""Every backend by its ``(method, device)``."""

AUTO: tuple[Key, ...] = (
    ("tiled", "dask"),
    ("native", "cuda"),
    ("tiled", "cuda"),
    ("tiled", "cpu"),
    ("generic", "cpu"),
    ("generic", "cuda"),
)
"""``method='auto'``: the first of these on the arrays' device that accepts, in this order."""

AUTO_REFUSE: dict[Key, Callable[[ScanPlan], Exception | None]] = {
    ("native", "cuda"): _refuse_native_auto,
    ("generic", "cpu"): _refuse_generic_auto,
    ("generic", "cuda"): _refuse_generic_auto,
}
"""The rows that ``'auto'`` takes less often than an explicit ``method=``."""

#: the retired ``method=`` spellings that named a place, and what they now are
OLD_METHODS: dict[str, Key] = {
    "cpu": ("tiled", "cpu"),
    "cuda": ("tiled", "cuda"),
    "dask": ("tiled", "dask"),
    "torch": ("native", "cuda"),
}


def choose(method: str, device: str, plan: ScanPlan) -> Key:
    """The backend for ``(method, device)`` ('auto': the first in :data:`AUTO` that accepts)."""
    key = dispatch.choose_on(
        BACKENDS, method, device, plan, _kinds.PLACES[plan.kind], AUTO, AUTO_REFUSE, "elems"
    )
    if key is not None:
        return key
    # only CUDA device arrays get here: the GPU kernels are what could have run them
    err = _kernel(plan)
    if isinstance(err, ValueError) and not plan.is_monoid:
        err = ValueError(
            "a plain callable fn cannot run on CUDA device arrays; pass a Monoid, or torch "
            "CUDA tensors"
        )
    raise err if err is not None else AssertionError("no scan backend accepts this plan")


def run(method: str, device: str, plan: ScanPlan) -> Leaves:
    """Run ``plan`` on the backend :func:`choose` picks."""
    return BACKENDS[choose(method, device, plan)].run(plan)
