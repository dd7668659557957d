"""Torch autograd through the compiled scan kernels, for every monoid.

A transform of ``associative_scan``: :func:`enter` takes the monoid, the
torch leaves (some requiring grad) and the scan flags and returns detached
leaves for the compiled CPU kernels and ``undo(result) -> result``, which
attaches the gradient through a ``torch.autograd.Function`` whose forward
hands back the outputs already computed and whose backward computes the
inputs' gradients.

The law it relies on: for the inclusive scan ``y_t = y_{t-1} . x_t`` of
elements of ``k`` scalars, with ``J_t`` and ``K_t`` the ``k x k``
Jacobians of the combine in its left and right argument at
``(y_{t-1}, x_t)``, the chain rule gives the reverse linear recurrence::

    g_t = dL/dy_t + J_{t+1}^T g_{t+1}        dL/dx_t = K_t^T g_t   (t > 0)
    dL/dx_0 = g_0                            (y_0 = x_0)

itself an associative scan, which runs on the same compiled kernels: ``k``
independent scans of :data:`~propopt.linear_recurrence` where every
``J_t`` is diagonal, else one scan of affine maps of ``k x k`` matrices.
The Jacobians come from torch autograd applied once to the combine's array
form on whole tensors (the monoid's ``array_combine``, or the scalar
combine itself called on tensors), and ``K_t^T g_t`` is one vector-Jacobian
product of the same graph.  ``reverse=True`` runs in scan order (the kernels
take the direction), ``exclusive=True`` reads ``y_{t-1}`` from the
exclusive output itself, and a segmented scan (``reset=``) is the
segmented monoid, whose left Jacobian is zero at each segment start.
:data:`~propopt.add`, :data:`~propopt.mul` and
:data:`~propopt.linear_recurrence` have their Jacobians written out.

Memory: the backward holds ``O(n k)`` arrays for diagonal Jacobians (the
combine's graph, ``k`` coefficients, ``k`` gradients) and ``O(n k^2)`` for
full ones (the ``k x k`` matrices and their scan).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np

from ... import jit
from ..._memory import mapped_empty
from ...threads import get_num_threads, torch_threads
from .. import _cpu
from ..monoid import Monoid, add, flush_leaves, linear_recurrence, mul
from ..segmented import Segmented, _ArrayCombine
from . import _grad_traced
from ._arrays import take
from ._grad_kernels import diagonal

Leaves = list[Any]

#: dtypes whose gradients run on the compiled kernels (half precision is widened to
#: float32 before this transform); others take method='generic'
DTYPES = ("torch.float32", "torch.float64", "torch.float16", "torch.bfloat16")


class _State:
    """What the backward needs besides the saved tensors."""

    def __init__(self, fn: Monoid, axis: int, reverse: bool, exclusive: bool) -> None:
        self.fn, self.axis, self.reverse, self.exclusive = fn, axis, reverse, exclusive
        self.outs: Leaves | None = None


def differentiable(fn: Any, leaves: Sequence[Any], method: str, device: str) -> bool:
    """Whether :func:`enter` takes this scan: a monoid on CPU float tensors needing grad.

    Only for ``method`` 'auto' and 'tiled' on the CPU: 'generic' and
    'reference' stay differentiable by torch through their own operations.
    """
    return (
        method in ("auto", "tiled")
        and device in ("auto", "cpu")
        and isinstance(fn, Monoid)
        and all(type(x).__module__.split(".", 1)[0] == "torch" for x in leaves)
        and all(not x.is_cuda and str(x.dtype) in DTYPES for x in leaves)
        and any(x.requires_grad for x in leaves)
    )


def enter(
    leaves: Leaves, *, fn: Monoid, axis: int, reverse: bool, exclusive: bool
) -> tuple[Leaves, Callable[[Leaves], Leaves]]:
    """Detached ``leaves`` for the kernels, and ``undo`` that attaches the gradient.

    Parameters
    ----------
    leaves : list of torch.Tensor
        The CPU tensors, float32 or float64, of which some require grad.
    fn : Monoid
        The combine the kernels scan (the segmented monoid for ``reset=``).
    axis, reverse, exclusive
        The scan's (``exclusive`` as the kernels run it).

    Returns
    -------
    (detached leaves, undo)
        ``undo(outputs)`` returns the outputs attached to the autograd
        graph of ``leaves``.

    Raises
    ------
    TypeError
        When the combine does not run on torch tensors (a ``math`` call, an
        ``if`` on an element), so that torch cannot differentiate it.
    """
    _probe(fn, leaves[0])
    state = _State(fn, axis, reverse, exclusive)

    def undo(outs: Leaves) -> Leaves:
        state.outs = list(outs)
        return list(_function().apply(state, *leaves))

    return [x.detach() for x in leaves], undo


@functools.cache
def _function() -> Any:
    import torch
    from torch.autograd.function import once_differentiable

    class ScanGrad(torch.autograd.Function):
        """The scan's outputs, computed already; the backward of :mod:`._autograd`."""

        @staticmethod
        def forward(ctx: Any, state: _State, *leaves: Any) -> Any:
            ctx.set_materialize_grads(False)
            outs, state.outs = state.outs, None
            assert outs is not None
            ctx.state = state
            ctx.save_for_backward(*leaves, *outs)
            return tuple(outs)

        @staticmethod
        @once_differentiable
        def backward(ctx: Any, *gys: Any) -> Any:
            saved = ctx.saved_tensors
            k = len(gys)
            xs = [x.detach() for x in saved[:k]]
            needs = list(ctx.needs_input_grad[1:])
            return (None, *backward(ctx.state, xs, list(saved[k:]), list(gys), needs))

    return ScanGrad


# ------------------------------------------------------------------ the backward
class _Order:
    """Positions in scan order along ``axis``: the first, the rest, and their predecessors.

    The arrays here are NumPy views of the tensors: NumPy's single-threaded
    copies and products do not wait on torch's thread pool, which on a busy
    machine is slower by an order of magnitude.
    """

    def __init__(self, n: int, axis: int, reverse: bool) -> None:
        self.n, self.axis, self.reverse = n, axis, reverse
        self.first = (n - 1, n) if reverse else (0, 1)
        self.rest = (0, n - 1) if reverse else (1, n)  # every position but the first
        self.prev = (1, n) if reverse else (0, n - 1)  # the position before each of rest
        self.last = (0, 1) if reverse else (n - 1, n)  # the last in scan order

    def at(self, x: Any, where: tuple[int, int]) -> Any:
        return take(x, where[0], where[1], None, self.axis)

    def placed(self, parts: Sequence[tuple[Any, tuple[int, int]]], like: np.ndarray) -> Any:
        """A fresh array of ``like``'s shape holding each part at its place (None: zero)."""
        out = mapped_empty(like.shape, like.dtype)
        for part, where in parts:
            view = self.at(out, where)
            if part is None:
                view[...] = 0
            elif not (isinstance(part, np.ndarray) and np.shares_memory(part, view)):
                view[...] = part
        return out

    def moved(self, x: Any, like: np.ndarray) -> Any:
        """``x`` (given at ``rest``) placed at ``prev``, zero at the last position."""
        return self.placed([(None, self.last), (x, self.prev)], like)

    def joined(self, first: Any, rest: Any, like: np.ndarray) -> Any:
        """One array of ``like``'s shape from its first position and the rest (None: zero)."""
        return self.placed([(first, self.first), (rest, self.rest)], like)


def _reverse_recurrence(coef: np.ndarray, gs: list[Any], order: _Order) -> list[np.ndarray]:
    """``h_t = g_t + coef_t h_{t+1}`` for each ``g`` in scan order (``t+1``: the next).

    One scan of the kernels for all of them: :data:`~propopt.linear_recurrence`
    for one, the shared-coefficient monoid for more (one pass over ``coef``).
    """
    m = len(gs)
    fn = linear_recurrence if m == 1 else _shared(m)
    out = _cpu.scan(fn, [coef, *gs], order.axis, not order.reverse, False)
    return out[1:]


@functools.cache
def _shared(m: int) -> Monoid:
    """Recurrences of ``m`` values under one coefficient: ``(c, v_1..v_m)``, applied in order.

    ``(c1, u) . (c2, w) = (c1 c2, c2 u + w)``, flushed below the smallest
    normal as :data:`~propopt.linear_recurrence` is (a gradient that decays
    along the scan would otherwise run on subnormals).
    """
    u, w = [f"u{i}" for i in range(m)], [f"w{i}" for i in range(m)]
    src = (
        f"def shared{m}(c, {', '.join(u)}, d, {', '.join(w)}):\n"
        f"    return (c * d, {', '.join(f'd * {x} + {y}' for x, y in zip(u, w))})\n"
    )
    mod = jit.load_module(src, f"grad_shared_{m}")
    return Monoid(getattr(mod, f"shared{m}"), (1.0,) + (0.0,) * m, name=f"shared{m}",
                  kinds="f", flush_subnormals=True)  # fmt: skip


def _np(x: Any) -> Any:
    return None if x is None else x.detach().numpy()


def backward(state: _State, xs: Leaves, ys: Leaves, gys: list[Any], needs: list[bool]) -> Leaves:
    """The inputs' gradients (None where not needed) from the outputs' ``gys`` (None: zero)."""
    import torch

    fn, axis = state.fn, state.axis
    n = xs[0].shape[axis]
    if n == 0 or all(g is None for g in gys):
        return [torch.zeros_like(x) if need else None for x, need in zip(xs, needs)]
    order = _Order(n, axis, state.reverse)
    X, Y, G = [_np(x) for x in xs], [_np(y) for y in ys], [_np(g) for g in gys]
    if fn is not add:  # a combine of arithmetic: its Jacobians derived once, one fused pass
        traced = _grad_traced.backward(fn, X, Y, G, needs, axis, state.reverse, state.exclusive)
        if traced is not None:
            return _tensors(xs, traced, needs)
    if fn is mul or fn is linear_recurrence:  # one fused pass where the layout allows
        fused = diagonal(X, Y, G, needs, axis, state.reverse, state.exclusive)
        if fused is not None:
            return _tensors(xs, fused, needs)
    if state.exclusive:  # out_t = z_{t-1}: the inclusive z_t gets out_{t+1}'s gradient
        gz = [None if g is None else order.moved(order.at(g, order.rest), X[0]) for g in G]
        prev = [order.at(y, order.rest) for y in Y]  # z_{t-1} at each t of rest
    else:
        gz = G
        prev = [order.at(y, order.prev) for y in Y]
    rest = [order.at(x, order.rest) for x in X]
    grads: list[Any]
    if n == 1:
        grads = gz
    elif fn is add:
        grads = list(_cpu.scan(add, [gz[0]], axis, not order.reverse, False))  # type: ignore[list-item]
    elif fn is mul or fn is linear_recurrence:
        grads = _linear(fn, X, rest, prev, gz, needs, order)
    else:
        grads = _general(fn, X, rest, prev, gz, needs, order)
    return _tensors(xs, grads, needs)


def _tensors(xs: Leaves, grads: Leaves, needs: list[bool]) -> Leaves:
    """Torch gradients: None where not needed, zeros where ``grads`` holds None."""
    import torch

    return [
        None if not need else torch.zeros_like(x) if g is None else torch.from_numpy(g)
        for x, g, need in zip(xs, grads, needs)
    ]


def _linear(
    fn: Monoid, xs: Leaves, rest: Leaves, prev: Leaves, gz: list[Any], needs: list[bool],
    order: _Order,
) -> Leaves:  # fmt: skip
    """mul and linear_recurrence: ``J_t = a_t`` on every component, ``K_t`` from ``y_{t-1}``."""
    coef = order.moved(rest[0], xs[0])
    live = [i for i, v in enumerate(gz) if v is not None]
    g: list[Any] = [None] * len(gz)
    for i, h in zip(live, _reverse_recurrence(coef, [gz[i] for i in live], order)):
        g[i] = h
    if fn is mul:  # K_t = y_{t-1}
        r = np.multiply(prev[0], order.at(g[0], order.rest))
        return [order.joined(order.at(g[0], order.first), r, xs[0])]
    # K_t^T g = (a_{t-1} g_a + h_{t-1} g_h, g_h) with (a_{t-1}, h_{t-1}) = y_{t-1}
    ga, gh = g
    grad_a = None
    if needs[0]:
        out = mapped_empty(xs[0].shape, xs[0].dtype)
        r = order.at(out, order.rest)
        terms = [(p, order.at(v, order.rest)) for p, v in zip(prev, g) if v is not None]
        np.multiply(*terms[0], out=r)
        if len(terms) == 2:
            r += terms[1][0] * terms[1][1]
        grad_a = order.joined(None if ga is None else order.at(ga, order.first), r, out)
    return [grad_a, gh]


# --------------------------------------------------------- the general route
def array_form(fn: Monoid) -> Callable[[Leaves, Leaves], Leaves]:
    """The combine on lists of torch tensors: the array_combine, else the scalar one."""
    if isinstance(fn, Segmented):
        return _ArrayCombine(array_form(fn.inner))
    arr = getattr(fn, "_array_combine", None)
    if arr is None:

        def arr(a: Sequence[Any], b: Sequence[Any]) -> Leaves:
            r = fn.scalar(*a, *b)
            return list(r) if isinstance(r, (tuple, list)) else [r]

    def form(a: Sequence[Any], b: Sequence[Any]) -> Leaves:
        return flush_leaves(list(arr(a, b)), fn.flush)

    return form


_probed: weakref.WeakKeyDictionary[Monoid, bool] = weakref.WeakKeyDictionary()


def _probe(fn: Monoid, like: Any) -> None:
    """Raise the one-line error when ``fn``'s array form cannot run on torch tensors."""
    import torch

    if _probed.get(fn):
        return
    k = fn.arity
    a = [torch.tensor([0.5, 0.25], dtype=like.dtype, requires_grad=True) for _ in range(k)]
    b = [torch.tensor([0.75, 0.125], dtype=like.dtype, requires_grad=True) for _ in range(k)]
    try:
        out = array_form(fn)(a, b)
        ok = len(out) == k and all(isinstance(o, torch.Tensor) for o in out)
        why = "it returned no torch tensors"
    except Exception as exc:  # any failure means: not differentiable by torch
        ok, why = False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if not ok:
        raise TypeError(
            f"combine {fn.name!r} cannot run on torch tensors, so torch autograd cannot "
            f"differentiate the scan ({why}); give the Monoid an array_combine written with "
            "torch operations (torch.exp, torch.where), or detach elems"
        )
    _probed[fn] = True


def _general(
    fn: Monoid, xs: Leaves, rest: Leaves, prev: Leaves, gz: list[Any], needs: list[bool],
    order: _Order,
) -> Leaves:  # fmt: skip
    """Any monoid: the Jacobians by torch autograd on the combine's graph."""
    import torch

    k = fn.arity
    with torch.enable_grad(), torch_threads(get_num_threads()):
        a = [torch.from_numpy(p).requires_grad_() for p in prev]
        b = [torch.from_numpy(r).requires_grad_(need) for r, need in zip(rest, needs)]
        c = array_form(fn)(a, b)
        live = [i for i in range(k) if gz[i] is not None]  # the components with a gradient
        rows: dict[int, list[Any]] = {}
        while True:  # rows j of J for j in live; a row reaching a component adds it
            for j in live:
                if j not in rows:
                    rows[j] = _row(c[j], a)
            reached = {i for j in live for i in range(k) if i not in live and _nonzero(rows[j][i])}
            if not reached:
                break
            live = sorted(set(live) | reached)
        diagonal = all(not _nonzero(rows[j][i]) for j in live for i in live if i != j)
        if diagonal:
            g = _diagonal_recurrences(rows, live, gz, xs, order)
        else:
            g = _matrix_recurrence(rows, live, gz, xs, order)
        wanted = [i for i in range(k) if needs[i]]
        outs = [c[j] for j in live if c[j].requires_grad]
        vjp: list[Any] = [None] * len(wanted)
        if outs and wanted:
            gouts = [torch.from_numpy(order.at(g[j], order.rest))
                     for j in live if c[j].requires_grad]  # fmt: skip
            vjp = list(torch.autograd.grad(outs, [b[i] for i in wanted], gouts,
                                           allow_unused=True))  # fmt: skip
    grads: Leaves = [None] * k
    for i, v in zip(wanted, vjp):
        v = _np(v)
        if i in g and _same(v, order.at(g[i], order.rest)):  # K_t = I: g itself
            grads[i] = g[i]
            continue
        first = order.at(g[i], order.first) if i in g else None
        grads[i] = order.joined(first, v, xs[i])
    return grads


def _same(x: Any, y: np.ndarray) -> bool:
    """Whether NumPy array ``x`` is the very view ``y`` (same memory, layout and values)."""
    return (
        isinstance(x, np.ndarray)
        and x.shape == y.shape
        and x.strides == y.strides
        and x.__array_interface__["data"][0] == y.__array_interface__["data"][0]
    )


def _diagonal_recurrences(
    rows: dict[int, list[Any]], live: list[int], gz: list[Any], xs: Leaves, order: _Order
) -> dict[int, Any]:
    """``g_t = gz_t + J_{t+1} g_{t+1}`` per component; equal coefficients share one scan."""
    import torch

    groups: list[list[int]] = []  # components whose J_jj are equal (affine maps: all)
    for j in live:
        d = rows[j][j]
        for grp in groups:
            e = rows[grp[0]][grp[0]]
            if len(grp) < SHARED_UP_TO and (d is e or (d is not None and e is not None
                                                       and torch.equal(d, e))):  # fmt: skip
                grp.append(j)
                break
        else:
            groups.append([j])
    g: dict[int, Any] = {}
    for grp in groups:
        coef = order.moved(_np(rows[grp[0]][grp[0]]), xs[grp[0]])
        vs = [_or_zeros(gz[j], xs[j]) for j in grp]
        g.update(zip(grp, _reverse_recurrence(coef, vs, order)))
    return g


#: at most this many recurrences share one scan (its combine's arguments stay
#: under the 30 that numba inlines, see SCAN_MATRICES_UP_TO)
SHARED_UP_TO = 13


def _row(ci: Any, a: Leaves) -> list[Any]:
    """``d c_i / d a_j`` for every j (None: no dependence), elementwise."""
    import torch

    if not ci.requires_grad:
        return [None] * len(a)
    ones = torch.ones((), dtype=ci.dtype).expand(ci.shape)
    got = torch.autograd.grad(ci, a, ones, retain_graph=True, allow_unused=True)
    return list(got)


def _nonzero(d: Any) -> bool:
    return d is not None and bool(d.count_nonzero() > 0)


def _or_zeros(g: Any, like: np.ndarray) -> Any:
    return g if g is not None else np.zeros(like.shape, like.dtype)


def _matrix_recurrence(
    rows: dict[int, list[Any]], live: list[int], gz: list[Any], xs: Leaves, order: _Order
) -> dict[int, Any]:
    """``g_t = gz_t + J_{t+1}^T g_{t+1}`` for full Jacobians: one scan of affine maps."""
    m = len(live)
    like = xs[live[0]]
    # element (M, v): the map h -> M h + v, with M = J^T restricted to live
    mats = [order.moved(_np(rows[live[c]][live[r]]), like) for r in range(m) for c in range(m)]
    vs = [_or_zeros(gz[j], like) for j in live]
    arrays = [*mats, *vs]
    if m <= SCAN_MATRICES_UP_TO:
        out = _cpu.scan(_affine(m), arrays, order.axis, not order.reverse, False)
        return {j: out[m * m + i] for i, j in enumerate(live)}
    shape = arrays[0].shape
    n, ax = shape[order.axis], order.axis
    p, q = int(np.prod(shape[:ax])), int(np.prod(shape[ax + 1 :]))
    mat = np.stack(arrays[: m * m]).reshape(m, m, p, n, q)
    vec = np.stack(arrays[m * m :]).reshape(m, p, n, q)
    _matrix_loop(mat, vec, order.reverse)
    return {j: vec[i].reshape(shape) for i, j in enumerate(live)}


#: the matrix recurrence scans affine maps of m-vectors on the compiled kernels
#: up to this m; above it the combine takes more than 30 arguments, which
#: CPython passes as one tuple (CALL_FUNCTION_EX) and numba does not compile
#: inline, so a sequential loop runs it (O(n m^2), one thread)
SCAN_MATRICES_UP_TO = 3


@numba.njit(cache=True, nogil=True)
def _matrix_loop(mat: np.ndarray, vec: np.ndarray, reverse: bool) -> None:  # pragma: no cover
    """``v_t += M_t v_{t+1}`` in place, from the last position in scan order to the first."""
    m, _, p, n, q = mat.shape
    tmp = np.empty(m, vec.dtype)
    for r in range(p):
        for c in range(q):
            for s in range(1, n):
                t = s if reverse else n - 1 - s
                nxt = t - 1 if reverse else t + 1
                for i in range(m):
                    acc = vec[i, r, t, c]
                    for j in range(m):
                        acc += mat[i, j, r, t, c] * vec[j, r, nxt, c]
                    tmp[i] = acc
                for i in range(m):
                    vec[i, r, t, c] = tmp[i]


@functools.cache
def _affine(m: int) -> Monoid:
    """The monoid of affine maps ``h -> M h + v`` of ``m``-vectors, applied in order.

    Elements are ``m*m + m`` scalars (``M`` row-major, then ``v``); the earlier
    map is applied first: ``(M1, v1) . (M2, v2) = (M2 M1, M2 v1 + v2)``.
    """
    p = [f"p{r}{c}" for r in range(m) for c in range(m)] + [f"u{r}" for r in range(m)]
    q = [f"q{r}{c}" for r in range(m) for c in range(m)] + [f"w{r}" for r in range(m)]
    prod = [" + ".join(f"q{r}{j} * p{j}{c}" for j in range(m)) for r in range(m) for c in range(m)]
    vec = [" + ".join(f"q{r}{j} * u{j}" for j in range(m)) + f" + w{r}" for r in range(m)]
    src = f"def affine{m}({', '.join(p + q)}):\n    return ({', '.join(prod + vec)},)\n"
    mod = jit.load_module(src, f"grad_affine_{m}")
    ident = tuple(float(r == c) for r in range(m) for c in range(m)) + (0.0,) * m
    return Monoid(getattr(mod, f"affine{m}"), ident, name=f"affine{m}", kinds="f")
