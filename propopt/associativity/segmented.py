"""Segmented scans: a monoid transformer over (flag, value) pairs.

A segmented scan restarts at every element flagged as the start of a
segment.  It is itself an associative scan, of the *segmented* monoid over
pairs ``(f, a)`` of a flag and an element of the monoid ``.``::

    (f1, a) * (f2, b) = (f1 | f2, b if f2 else a . b)        identity (0, e)

which is associative whenever ``.`` is (Blelloch 1990, section 1.5):
``((f1, a) * (f2, b)) * (f3, c)`` and ``(f1, a) * ((f2, b) * (f3, c))`` both
equal ``(f1 | f2 | f3, c)`` if ``f3``, ``(f1 | f2, b . c)`` if ``f2`` but
not ``f3``, and ``(f1, a . b . c)`` otherwise.  The identity law follows
from ``e``'s.  :func:`segmented` builds this monoid from any combine, and
``associative_scan(fn, elems, reset=...)`` scans with it.

Why a transformer and not a ``reset`` argument inside every backend: the
transformed monoid is an ordinary monoid of arity ``k + 1``, so every
backend takes it unchanged -- the CPU and CUDA kernels compile it like any
other (no new kernel code, one more specialization per monoid and dtype),
the generic path and torch autograd see a plain vectorized ``fn``, and the
Dask backend carries the flag across chunk boundaries in its carries, so a
segment that spans chunks is stitched correctly and one that starts inside
a chunk cuts the carry off.  A backend-by-backend ``reset`` would have
needed a third kernel variant in each of the CPU and CUDA code generators
and its own carry logic in Dask.  The flag costs one extra array of the
element dtype (monoids) or one boolean per step (plain callables), and the
kernels evaluate ``a . b`` everywhere and select, which keeps their loops
branch-free.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _jit
from .monoid import Combine, Monoid, _xp_call

Leaves = list[Any]


class Segmented(Monoid):
    """The segmented monoid of ``inner``: elements ``(flag, *inner_element)``.

    The flag is stored in the element dtype (nonzero marks a segment start),
    so that the compiled kernels see ``inner.arity + 1`` arrays of one dtype.
    """

    inner: Monoid

    def __init__(self, inner: Monoid) -> None:
        self.inner = inner
        k = inner.arity

        def ident(dtype: np.dtype) -> tuple[Any, ...]:
            return (dtype.type(0), *inner.identity(dtype))

        super().__init__(
            _scalar_combine(inner),
            ident,
            name=f"segmented({inner.name})",
            kinds=inner.kinds,
            array_combine=_ArrayCombine(inner.combine_leaves),
        )
        assert self.arity == k + 1
        # the inner components flush as the inner monoid's do; the flag never does
        self.flush = tuple(i + 1 for i in inner.flush)


_cache: weakref.WeakKeyDictionary[Monoid, Segmented] = weakref.WeakKeyDictionary()


def segmented(fn: Combine) -> Any:
    """The segmented version of a combine: a scan of it restarts at each flagged element.

    .. math:: (f_1, a) \\ast (f_2, b) = (f_1 \\lor f_2,\\; b \\text{ if } f_2
              \\text{ else } a \\cdot b), \\qquad e_\\ast = (0, e)

    is associative whenever ``a . b = fn(a, b)`` is, and its inclusive scan
    over ``(flag_i, x_i)`` is, at each ``i``, ``x_s . ... . x_i`` where
    ``s <= i`` is the last flagged index (or 0).
    :func:`~propopt.associative_scan` uses it for ``reset=``; it is public so
    that its laws can be audited (:func:`propopt.audit.check_associative`,
    :func:`propopt.audit.check_identity`) and so that it can be combined
    further.

    Parameters
    ----------
    fn : Monoid or callable
        A :class:`~propopt.Monoid` of arity ``k`` gives a :class:`Monoid` of
        arity ``k + 1`` whose first array is the flag (nonzero: a segment
        starts here), in the element dtype; it runs on every backend,
        compiled kernels included.  A plain ``fn(a, b)`` on pytrees gives a
        function on pairs ``(flag, a)`` with ``flag`` a boolean array that
        broadcasts against the leaves.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import add, associative_scan
    >>> from propopt.associativity import segmented
    >>> flag = np.array([0, 0, 1, 0, 1.0])
    >>> f, s = associative_scan(segmented(add), (flag, np.arange(1.0, 6.0)))
    >>> s.tolist()
    [1.0, 3.0, 3.0, 7.0, 5.0]
    """
    if isinstance(fn, Monoid):
        seg = _cache.get(fn)
        if seg is None:
            seg = _cache[fn] = Segmented(fn)
        return seg
    if not callable(fn):
        raise TypeError(f"fn must be a Monoid or a callable combining two batches, got {fn!r}")
    return _SegmentedCallable(fn)


class _ArrayCombine:
    """The segmented combine on lists of arrays (NumPy or torch), the flag first."""

    def __init__(self, inner: Callable[..., Sequence[Any]]) -> None:
        self.inner = inner

    def __call__(self, a: Sequence[Any], b: Sequence[Any]) -> Leaves:
        fa, fb = a[0], b[0]
        keep = fb if _is_bool(fb) else fb != 0
        # where b starts a segment, a . b is discarded: computing it from b alone
        # keeps a NaN or inf of the earlier segment out of its value and out of
        # autograd's products (0 * nan), so nothing crosses a start either way
        safe = [_xp_call("where", keep, y, x) for x, y in zip(a[1:], b[1:])]
        inner = self.inner(safe, list(b[1:]))
        flag = _xp_call("where", keep, fb, fa)
        return [flag] + [_xp_call("where", keep, y, c) for y, c in zip(b[1:], inner)]


class _SegmentedCallable:
    """``segmented(fn)`` for a plain callable: ``fn`` on pairs ``(flag, tree)``."""

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def __call__(self, a: Any, b: Any) -> Any:
        from .. import _pytree

        (fa, ta), (fb, tb) = a, b
        keep = fb if _is_bool(fb) else fb != 0
        lb, td = _pytree.flatten(tb)
        la, _ = _pytree.flatten(ta)
        safe = [_xp_call("where", keep, y, x) for x, y in zip(la, lb)]  # see _ArrayCombine
        res = self.fn(_pytree.unflatten(td, safe), tb)
        lr, _ = _pytree.flatten(res)
        vals = [_xp_call("where", keep, y, c) for y, c in zip(lb, lr)]
        return (_xp_call("where", keep, fb, fa), _pytree.unflatten(td, vals))


def _is_bool(x: Any) -> bool:
    return str(getattr(x, "dtype", "")).endswith("bool")


# ------------------------------------------------------- the scalar combine
def _scalar_combine(inner: Monoid) -> Callable[..., Any]:
    """A scalar combine of arity ``k + 1`` calling ``inner``'s, compiled by the kernels."""
    k = inner.arity
    A = [f"a{i}" for i in range(k)]
    B = [f"b{i}" for i in range(k)]
    R = ["r"] if k == 1 else [f"r[{i}]" for i in range(k)]
    spliced = _jit.splice(inner.scalar, "_inner", _jit.KERNEL_HELPER)
    lines = [
        spliced.source,
        "import numba",
        f"_ic = {_jit.KERNEL_HELPER}(_inner)",
        "",
        f"def segmented_combine(f, {', '.join(A)}, g, {', '.join(B)}):",
        "    # (f, a) * (g, b) = (f | g, b if g else a . b); a . b is computed everywhere",
        "    # and selected, so that kernels stay branch-free",
        f"    r = _ic({', '.join(A + B)})",
        "    keep = g != 0",
        "    return (g if keep else f), "
        + ", ".join(f"({b} if keep else {r})" for b, r in zip(B, R)),
    ]
    mod = _jit.load_spliced(spliced, "\n".join(lines) + "\n", f"segmented_{k}")
    return mod.segmented_combine  # type: ignore[no-any-return]
