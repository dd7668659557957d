"""``pairwise_sum``: sums over the pairs of a point set, each unordered pair once.

Symmetry licenses computing half.  For a pair function with

.. math:: f(x_j, x_i) = \\pm f(x_i, x_j)

(``+``: symmetric, e.g. a potential ``-1/r``; ``-``: antisymmetric, e.g.
the force direction ``(x_j - x_i)/r^3``, Newton's third law), the sums

.. math:: out_i = \\sum_{j \\ne i} w_j f(x_i, x_j)

need ``f`` once per unordered pair ``{i, j}``: its value ``v`` is credited
to ``i`` as ``w_j v`` and to ``j`` as ``\\pm w_i v``.  That is ``n(n-1)/2``
kernel calls instead of ``n(n-1)``.

Measured on the 2-core development machine (N = 20,000, the Plummer gravity
kernel, float64, 2 threads, same numba, kernel and compile flags both ways,
both vectorized): the halved sum 0.066 s, the full double loop 0.10 s, a ratio
of about 1.5x, near the ceiling the kernel's cost allows (see
docs/symmetry.md).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from .. import _jit, _kinds, dispatch, threads
from ..arrays import frozen, per_point, points
from . import _cpu, _reference
from ._plan import PairPlan

SYMMETRIES: tuple[str, ...] = ("symmetric", "antisymmetric")
METHODS: tuple[str, ...] = ("auto", "halved", "full", "untiled", "reference")
"""The algorithms: each unordered pair once, the tiled full loop, the full loop, the Python loop."""
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
"""Where they run: numba threads, or numba.cuda."""

TILE = 256
"""Default tile (points per block) on the CPU.  A block pair touches
``2 * TILE`` points and ``TILE * k`` credit accumulators: 16-24 KiB for 3-D
points and ``k <= 4``, inside a 32 KiB L1.  At N = 20,000 on the development
machine 256 and 512 ran within 5% of each other and 128 10-15% slower
(each target's vector sums are reduced once per tile)."""

Symmetry = Literal["symmetric", "antisymmetric"]


def _check_method(method: Any, device: Any = "auto") -> tuple[str, str]:
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of {', '.join(map(repr, METHODS))}")
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is not one of {', '.join(map(repr, DEVICES))}")
    return str(method), str(device)


def _halved_cpu(p: PairPlan) -> np.ndarray:
    mod = _cpu.kernels(p.kernel, p.form)
    XT = np.ascontiguousarray(p.X.T)  # (d, n): a tile's sources are d contiguous runs
    nthreads = _jit.region_threads()
    acc = np.zeros((nthreads, p.X.shape[0], p.k))
    mod.halved(XT, p.w, *p.args, p.tile or TILE, nthreads, acc)
    return acc[0] if nthreads == 1 else acc.sum(axis=0)


def _full_cpu(untiled: bool) -> Callable[[PairPlan], np.ndarray]:
    def run(p: PairPlan) -> np.ndarray:
        mod = _cpu.kernels(p.kernel, p.form)
        XT = np.ascontiguousarray(p.X.T)
        TT = XT if p.T is None else np.ascontiguousarray(p.T.T)
        out = np.zeros((TT.shape[1], p.k))
        tile = p.tile or TILE
        # untiled: target blocks of BLOCK, each streaming every source (one source tile)
        ttile, stile = (_cpu.BLOCK, max(XT.shape[1], 1)) if untiled else (tile, tile)
        mod.full(TT, XT, p.w, *p.args, ttile, stile, p.T is None, out)
        return out

    return run


def _cuda_run(p: PairPlan) -> np.ndarray:
    from . import _cuda

    return _cuda.pair_sum(p)


Backend = dispatch.Backend  # Backend[PairPlan, ndarray]: one way to run a pair sum


def _refuse_targets(p: PairPlan) -> Exception | None:
    if p.T is not None:
        return ValueError(
            "method='halved' needs the pairs of one point set; with targets= each (target, "
            "source) pair is visited once anyway: use method='full' or 'auto'"
        )
    return None


def _refuse_one_set_on_cuda(p: PairPlan) -> Exception | None:
    if p.T is None:
        return ValueError(
            "device='cuda' halves the pairs of one point set: use method='halved' or 'auto'"
        )
    return None


BACKENDS: dict[tuple[str, str], Backend] = {
    ("halved", "cpu"): Backend(_refuse_targets, _halved_cpu),
    ("full", "cpu"): Backend(dispatch.takes_any, _full_cpu(untiled=False)),
    ("untiled", "cpu"): Backend(dispatch.takes_any, _full_cpu(untiled=True)),
    ("reference", "cpu"): Backend(dispatch.takes_any, _reference.pair_sum),
    # each unordered pair once, in shared-memory tiles
    ("halved", "cuda"): Backend(_refuse_targets, _cuda_run),
    # separate targets: each (target, source) pair once
    ("full", "cuda"): Backend(_refuse_one_set_on_cuda, _cuda_run),
}
"""Every (algorithm, device) that runs, by key."""

AUTO: tuple[tuple[str, str], ...] = tuple(
    (m, d) for d in ("cpu", "cuda") for m in ("halved", "full")
)
"""``method='auto'``: the first of these on the device that accepts (halved, then full)."""


def choose(method: str, device: str, plan: PairPlan, here: str = "cpu") -> tuple[str, str]:
    """The backend for ``(method, device)`` ('auto': the first of :data:`AUTO` that accepts);
    ``device='auto'`` is ``here``, where the points are (another device gets a copy)."""
    got = dispatch.choose_on(BACKENDS, method, device, plan, here, AUTO, moves=True)
    if got is None:
        raise AssertionError("no pair-sum backend accepts this plan")
    return got


def weights_of(weights: Any, n: int, name: str = "weights") -> np.ndarray:
    """``(n,)`` float64 finite weights (ones for ``None``)."""
    return per_point(name, weights, n, 1.0, "weights", nonnegative=False)


def signs_of(symmetry: Any, k: int) -> tuple[float, ...]:
    """``+1.0`` / ``-1.0`` per output component from a string or a sequence of strings."""
    parts = [symmetry] * k if isinstance(symmetry, str) else list(symmetry)
    for s in parts:
        if s not in SYMMETRIES:
            raise ValueError(
                f"symmetry={s!r} is not one of {', '.join(map(repr, SYMMETRIES))} (or a "
                "sequence of them, one per output component)"
            )
    if len(parts) != k:
        raise ValueError(
            f"symmetry has {len(parts)} entries but the kernel returns {k} value(s); give one "
            "string for all components or one per component"
        )
    return tuple(1.0 if s == "symmetric" else -1.0 for s in parts)


def _shape_of(kernel: Any, X: np.ndarray, args: tuple[Any, ...]) -> tuple[int, bool]:
    """Number of outputs ``k`` and whether the kernel returns a bare scalar."""
    f = getattr(kernel, "py_func", kernel)
    x0 = X[0] if X.shape[0] else np.zeros(X.shape[1], X.dtype)
    probes = [(X[0], X[1])] if X.shape[0] >= 2 else []
    probes.append((x0, x0 + 1))  # distinct points, for a kernel singular at r = 0
    for k, (a, b) in enumerate(probes):
        try:
            with np.errstate(all="ignore"):
                v = f(a, b, *args)
            break
        except Exception as e:
            if k + 1 < len(probes):
                continue
            raise TypeError(
                f"calling kernel(xi, xj{''.join(', arg' for _ in args)}) on two points failed "
                f"({type(e).__name__}: {e}); the kernel takes two 1-D rows and the extra args"
            ) from e
    if isinstance(v, numbers.Real):
        return 1, True
    if isinstance(v, tuple) and v and all(isinstance(x, numbers.Real) for x in v):
        return len(v), False
    raise TypeError(
        f"kernel returned {type(v).__name__} {v!r}: it must return a float or a tuple of "
        "floats (fixed length) so that numba can compile it"
    )


def _check_args(args: Any) -> tuple[Any, ...]:
    if not isinstance(args, tuple):
        raise TypeError(f"args={args!r}: must be a tuple of numbers passed after xi, xj")
    for a in args:
        if not isinstance(a, (numbers.Number, np.number)) or isinstance(a, bool):
            raise TypeError(f"args contains {a!r}: only numbers can be passed to the kernel")
    return args


def _check_tile(tile: Any) -> int:
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or tile < 1:
        raise ValueError(f"tile={tile!r}: must be an int >= 1 (points per block)")
    return int(tile)


@threads.parallel
def pairwise_sum(
    kernel: Callable[..., Any],
    X: Any,
    weights: Any = None,
    *,
    symmetry: Symmetry | Sequence[Symmetry] = "symmetric",
    args: tuple[Any, ...] = (),
    targets: Any = None,
    method: str = "auto",
    device: str = "auto",
    tile: int | None = None,
) -> np.ndarray:
    """Sum a pair kernel over all pairs, visiting each unordered pair once.

    Computes, for every point ``i``,

    .. math:: out_i = \\sum_{j \\ne i} w_j \\, f(x_i, x_j)

    relying on ``f(x_j, x_i) = +f(x_i, x_j)`` (``"symmetric"``) or
    ``-f(x_i, x_j)`` (``"antisymmetric"``): each pair ``i < j`` is evaluated
    once and credited to both ends.  A kernel that breaks the stated law gives
    wrong sums (audit it first with :func:`propopt.audit.check_symmetric`).

    Parameters
    ----------
    kernel : callable
        ``kernel(xi, xj, *args)`` on two 1-D rows of ``X`` (length ``d``),
        returning a float or a fixed-length tuple of ``k`` floats.  Written in
        the numba subset (``math`` functions, arithmetic, ``if``): it is
        compiled with ``numba.njit`` for the CPU and ``cuda.jit(device=True)``
        for CUDA.  It is keyed by what it computes (its code, captured
        values and the globals it reads; docs/associativity.md), so it is
        compiled once per machine and cached on disk, whether it is a
        module-level function, a closure or a lambda.  An ``@njit`` function
        is accepted too (its Python function is used).
    X : array (n, d)
        Points (float32 or float64; integers are cast to float64).  Extra
        per-point attributes (charges, radii) may ride along as columns.
    weights : array (n,) or scalar, optional
        ``w_j``; 1 by default.  For gravity, the masses.
    symmetry : {'symmetric', 'antisymmetric'} or sequence of them
        The law of ``f``, for all components or one per component (gravity:
        three antisymmetric acceleration components and a symmetric potential).
    args : tuple of numbers
        Extra scalar arguments passed to every kernel call (a softening, say).
    targets : array (m, d), optional
        Evaluate at separate target points instead: ``out_t = sum_j w_j
        f(t, x_j)`` over *all* sources.  No halving is possible there (a
        (target, source) pair is not an unordered pair of one set, and only
        the target is credited), so ``symmetry`` is not used and the full
        tiled loop runs.
    method : {'auto', 'halved', 'full', 'untiled', 'reference'}
        The algorithm.  ``'halved'``: each unordered pair once (per-thread
        accumulators on the CPU).  ``'full'``: the tiled full double loop,
        ``f`` twice per pair (the baseline of the halving; the only one with
        ``targets``).  ``'untiled'``: the full loop without tiles.
        ``'reference'``: the plain-Python float64 double loop.  ``'auto'``:
        ``'full'`` with ``targets``, else ``'halved'``.
    device : {'auto', 'cpu', 'cuda'}
        Where it runs: numba threads, or numba.cuda with shared-memory tiles
        (``'halved'`` and ``'full'``; numpy in, numpy out).  ``'auto'``:
        ``'cuda'`` for CUDA arrays, else ``'cpu'``.
    tile : int, optional
        Points per block (CPU default :data:`TILE`, CUDA default 128 threads).

    Returns
    -------
    ndarray (n, k), or (n,) for a kernel returning a float
        In the dtype of ``X`` (float32 or float64); sums are accumulated in
        float64 on every path.  An empty ``X`` (or ``targets``) gives an
        empty result and no sources give zeros.

    Notes
    -----
    ``n(n-1)/2`` kernel calls (``'halved'``) instead of ``n(n-1)``; memory
    ``threads * n * k`` float64 accumulators.  The threads' partial sums are
    added in a fixed order, so results depend on the thread count only
    through rounding (tests compare 1 and 2 threads with the double loop).

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import pairwise_sum
    >>> def inverse_distance(xi, xj):
    ...     return 1.0 / ((xi[0] - xj[0]) ** 2 + (xi[1] - xj[1]) ** 2) ** 0.5
    >>> X = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]])
    >>> pairwise_sum(inverse_distance, X).round(3).tolist()  # 1/5 + 1/1, 1/5 + 1/sqrt(18), ...
    [1.2, 0.436, 1.236]
    """
    if not callable(kernel):
        raise TypeError(f"kernel={kernel!r} is not callable: pass kernel(xi, xj, *args)")
    method, device = _check_method(method, device)
    on_gpu = _kinds.array_kind(X) in (_kinds.CUDA, _kinds.TORCH_CUDA)
    if on_gpu:
        X = _host(X)
    X = points("X", X)
    n, d = X.shape
    T = None
    if targets is not None:
        on_gpu = on_gpu or _kinds.array_kind(targets) in (_kinds.CUDA, _kinds.TORCH_CUDA)
        T = points("targets", _host(targets), d)
        T = T.astype(np.result_type(T.dtype, X.dtype), copy=False)
        X = X.astype(T.dtype, copy=False)
    w = frozen(weights_of(_host(weights), n))  # read-only or not, one compiled driver
    args = _check_args(args)
    k, scalar = _shape_of(kernel, X, args)
    signs = signs_of(symmetry, k)
    plan = PairPlan(kernel, X, w, args, k, scalar, signs, T, None)
    key = choose(method, device, plan, "cuda" if on_gpu else "cpu")
    if tile is not None:
        plan.tile = _check_tile(tile)
    m = n if T is None else T.shape[0]
    out: np.ndarray
    if m == 0 or n == 0:
        out = np.zeros((m, k))
    else:
        with _jit.user_code(
            f"kernel={getattr(kernel, '__name__', kernel)!r}",
            "it must return a float, or a tuple of floats of one length, on every branch, "
            "using only what numba supports (math, arithmetic, if)",
        ):
            out = BACKENDS[key].run(plan)
    out = out.astype(X.dtype, copy=False)
    return out[:, 0] if scalar else out


def _host(x: Any) -> Any:
    """A NumPy copy of a CUDA array (torch CUDA tensors and numba device arrays)."""
    kind = _kinds.array_kind(x)
    if kind == _kinds.TORCH_CUDA:
        return x.detach().cpu().numpy()
    if kind == _kinds.CUDA:
        if hasattr(x, "copy_to_host"):
            return x.copy_to_host()
        from numba import cuda

        return cuda.as_cuda_array(x).copy_to_host()
    return x
