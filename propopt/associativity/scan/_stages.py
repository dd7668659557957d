"""The three stages of ``associative_scan``: normalize, plan, run.

* :func:`normalize` checks the arguments once into a :class:`ScanRequest`:
  the tree flattened, the array kind, the axis, the method and device, one
  resolved identity, the ``out=`` leaves and the law check's sample.
* :func:`plan` applies the transforms (jax and CuPy arrays through DLPack,
  half precision, masks, segments), each
  an ``enter(leaves, ...) -> (leaves, undo)``, and picks the backend: a
  :class:`Staged` scan holding the :class:`ScanPlan` the backend receives
  and the undo steps.
* :func:`run` checks the law, runs the backend, applies the undo steps in
  reverse, writes ``out=`` and rebuilds the tree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

import numpy as np

from ... import _dlpack, _jit, _kinds, _pytree, _validate, dispatch
from ..._kinds import half_name
from ...arrays import flag
from ..monoid import Combine, Monoid
from ..segmented import segmented
from . import _backends, _combine, _dask, _half, _identity, _law_check, _masked, _out, _segments
from ._autograd import differentiable, enter as grad_enter
from ._plan import ScanPlan

Leaves = list[Any]
Undo = Callable[[Leaves], Leaves]


@dataclass(frozen=True)
class ScanRequest:
    """The checked arguments of one scan (:func:`normalize`).

    ``leaves`` are the caller's arrays (masked arrays as plain ones, their
    mask in ``mask``); ``identity`` is the identity of a plain callable, one
    element per leaf, or ``None`` (a :class:`~propopt.Monoid` brings its own,
    which each stage takes in the dtype it works in).  ``sample`` is the tree
    the law check samples.
    """

    fn: Combine
    leaves: tuple[Any, ...]
    treedef: _pytree.TreeDef
    paths: tuple[str, ...]
    kind: str
    axis: int
    reverse: bool
    exclusive: bool
    method: str
    device: str
    identity: Leaves | None
    check: bool | None
    reset: Any
    mask: np.ndarray | None
    outs: Leaves | None
    sample: Any


@dataclass(frozen=True)
class Staged:
    """A planned scan (:func:`plan`): the backend, what it receives, and the undo steps."""

    request: ScanRequest
    backend: tuple[str, str]
    scan: ScanPlan
    undo: tuple[Undo, ...]


def normalize(
    fn: Combine,
    elems: Any,
    *,
    axis: int = 0,
    reverse: bool = False,
    exclusive: bool = False,
    identity: Any = None,
    method: str = "auto",
    device: str = "auto",
    check: bool | None = None,
    reset: Any = None,
    out: Any = None,
) -> ScanRequest:
    """Check the arguments of :func:`propopt.associative_scan` into a :class:`ScanRequest`."""
    how, where = dispatch.method_device(
        "associative_scan", method, device, _backends.BACKENDS, _backends.OLD_METHODS
    )
    if not (isinstance(fn, Monoid) or callable(fn)):
        raise TypeError(f"fn must be a Monoid or a callable combining two batches, got {fn!r}")
    shifted = flag("exclusive", exclusive)
    raw, treedef = _pytree.flatten(elems)
    if not raw:
        raise ValueError("elems holds no arrays; pass an array or a pytree of arrays")
    paths = tuple(_pytree.leaf_paths(treedef))
    kind = _kinds.common_kind(raw, paths, foreign=True)
    _dlpack.refuse_out(kind, out)
    leaves, mask = _plain(raw, paths, kind, reset)
    ax = _validate.check_axis(axis, leaves, paths)
    if isinstance(fn, Monoid):
        _combine.check_monoid(fn, leaves, paths)
    else:
        _identity.require(fn, shifted, identity)
    ident = _resolved_identity(fn, identity, treedef, _native(leaves, kind), ax)
    outs = None if out is None else _out.check(out, treedef, leaves, kind, paths)
    return ScanRequest(
        fn, tuple(leaves), treedef, paths, kind, ax, flag("reverse", reverse), shifted,
        how, where, ident, None if check is None else flag("check", check), reset, mask,
        outs, _pytree.unflatten(treedef, _sample(fn, ident, leaves, mask, paths, kind)),
    )  # fmt: skip


def _plain(raw: Leaves, paths: tuple[str, ...], kind: str, reset: Any) -> tuple[Leaves, Any]:
    """Plain arrays for the leaves, and the mask of masked NumPy leaves (or None)."""
    if kind == _kinds.DASK:
        _dask.check_chunks(raw, paths)
    if kind != _kinds.NUMPY:
        return list(raw), None
    _masked.refuse_masked(reset, "reset")
    return _masked.unmask(raw, paths)


def _native(leaves: Leaves, kind: str) -> Leaves:
    """The leaves as the backend gets them: jax and CuPy arrays through DLPack (no copy)."""
    return [_dlpack.to_native(x, kind) for x in leaves] if kind in _kinds.FOREIGN else leaves


def _sample(fn: Combine, ident: Leaves | None, leaves: Leaves, mask: Any,
            paths: tuple[str, ...], kind: str) -> Leaves:  # fmt: skip
    """The leaves the law check samples: as the combine sees them."""
    if mask is None:
        return _native(leaves, kind)
    return _masked.fill_identity(fn, ident, leaves, mask, paths)


def _resolved_identity(
    fn: Combine, identity: Any, treedef: _pytree.TreeDef, leaves: Leaves, ax: int
) -> Leaves | None:
    """``identity=`` per leaf for a plain callable (in the library of ``leaves``); for a
    monoid, checked against its own."""
    if identity is None:
        return None
    if not isinstance(fn, Monoid):
        return _identity.given(identity, treedef, leaves, ax)
    probe = [_element(x, ax) for x in leaves]  # host NumPy, in the dtype the kernels see
    _identity.check_own(fn, _identity.given(identity, treedef, probe, ax), probe, ax)
    return None


def _element(x: Any, ax: int) -> np.ndarray:
    """One element of leaf ``x`` as host NumPy zeros (float32 for half precision)."""
    shape = tuple(int(d) for d in x.shape)
    dtype = np.float32 if half_name(x.dtype) else _validate.np_dtype(x.dtype)
    return np.zeros(shape[:ax] + (1,) + shape[ax + 1 :], dtype=dtype)


def plan(req: ScanRequest) -> Staged:
    """Apply the transforms to the request's leaves and pick the backend."""
    leaves, undo = list(req.leaves), []
    for enter in _transforms(req):
        leaves, step = enter(leaves)
        undo.append(step)
    fn, combine = _combines(req)
    segmented = req.reset is not None  # an inclusive scan of (flag, element) pairs
    scan = ScanPlan(
        fn, combine, leaves, _work_kind(req), req.axis, req.reverse,
        req.exclusive and not segmented, None if segmented else req.identity,
    )  # fmt: skip
    key = _backends.choose(req.method, req.device, scan)
    if key == ("tiled", "cpu") and (req.outs is not None or req.kind == _kinds.JAX):
        scan = replace(scan, out=_direct_out(req, leaves, len(undo)))
    return Staged(req, key, scan, tuple(undo))


def _work_kind(req: ScanRequest) -> str:
    """The kind of the arrays the backend gets (a foreign kind's, after DLPack)."""
    return _kinds.FOREIGN.get(req.kind, req.kind)


def _direct_out(req: ScanRequest, leaves: Leaves, steps: int) -> Leaves | None:
    """Where the CPU kernels write: ``out=``, or for jax, buffers jax takes without a copy."""
    if req.kind == _kinds.JAX:
        only = steps == 1  # the DLPack step alone: the kernels' output is the result
        return [_dlpack.aligned_empty(tuple(x.shape), x.dtype) for x in leaves] if only else None
    return _out.direct(req.outs, leaves) if req.outs is not None and steps == 0 else None


def _transforms(req: ScanRequest) -> list[Callable[[Leaves], tuple[Leaves, Undo]]]:
    """The transforms the request needs, in the order they enter (undone in reverse)."""
    steps: list[Callable[[Leaves], tuple[Leaves, Undo]]] = []
    kind = _work_kind(req)
    if req.kind in _kinds.FOREIGN:
        steps.append(partial(_dlpack.enter, kind=req.kind))
    if isinstance(req.fn, Monoid) and half_name(req.leaves[0].dtype) is not None:
        steps.append(partial(_half.enter, kind=kind, what=f"monoid {req.fn.name!r}"))
    if req.mask is not None:
        steps.append(partial(_masked.enter, mask=req.mask, fn=req.fn, identity=req.identity,
                             paths=req.paths))  # fmt: skip
    if req.reset is not None:
        steps.append(partial(
            _segments.enter, fn=req.fn, reset=req.reset, kind=kind, axis=req.axis,
            reverse=req.reverse, exclusive=req.exclusive, identity=req.identity,
        ))  # fmt: skip
    if differentiable(req.fn, req.leaves, req.method, req.device):
        # last: the kernels scan detached leaves; its undo attaches the gradient first
        seg = req.reset is not None
        mono = cast(Monoid, req.fn)  # differentiable() takes monoids only
        steps.append(partial(grad_enter, fn=segmented(mono) if seg else mono,
                             axis=req.axis, reverse=req.reverse,
                             exclusive=req.exclusive and not seg))  # fmt: skip
    return steps


def _combines(req: ScanRequest) -> tuple[Any, Callable[[Leaves, Leaves], Leaves]]:
    """The combine the backend scans: ``fn`` and its lifting to leaf lists (segmented)."""
    fn = req.fn
    combine = fn.combine_leaves if isinstance(fn, Monoid) else _combine.lift(fn, req.treedef)
    return _segments.wrap(fn, combine) if req.reset is not None else (fn, combine)


def run(staged: Staged) -> Any:
    """Check the law, run the backend, undo the transforms, write ``out=``, rebuild the tree."""
    req, scan = staged.request, staged.scan
    if scan.length > 0:
        monoid, dask = isinstance(req.fn, Monoid), req.kind == _kinds.DASK
        _law_check.before_scan(req.fn, req.sample, req.axis, req.check, monoid=monoid, dask=dask)
    with _jit.user_code(
        f"combine {_validate.name_of(scan.fn)!r}",
        "a Monoid's combine takes 2k scalars and returns k of them, using only what numba "
        "supports (math, arithmetic, if)",
    ):
        res = _backends.BACKENDS[staged.backend].run(scan)
    for step in reversed(staged.undo):
        res = step(res)
    return _pytree.unflatten(req.treedef, res if req.outs is None else _out.write(req.outs, res))
