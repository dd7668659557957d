"""Monoids: an associative combine that numba can compile, plus its identity.

A :class:`Monoid` of arity ``k`` combines elements made of ``k`` scalars::

    combine(a_1, ..., a_k, b_1, ..., b_k) -> (c_1, ..., c_k)

and must satisfy, for all elements ``a``, ``b``, ``c`` of the dtypes it
accepts (up to floating-point rounding)::

    combine(a, combine(b, c)) == combine(combine(a, b), c)    # associativity
    combine(e, a) == combine(a, e) == a                        # identity e

Only associativity licenses regrouping; commutativity is *not* assumed, so
``combine(a, b)`` always receives the earlier element as ``a``.  A combine
that breaks the law gives results that depend on how the work was split
(thread count, chunk size, backend); :func:`propopt.audit.check_associative`
finds such violations, and ``associative_scan(..., check=True)`` runs it.

The scalar ``combine`` is compiled with ``numba.njit`` for the CPU kernels
and with ``numba.cuda.jit(device=True)`` for the CUDA kernels, so it must use
only what both targets support (arithmetic, comparisons, ``math``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _pytree, vmath

IdentityLike = Any  # scalar, tuple of scalars, or callable(dtype) -> tuple

#: The dtype kinds a Monoid may name: signed and unsigned integers, floats, complex.
KINDS = "iufc"


def _xp_call(name: str, x: Any, *args: Any) -> Any:
    """Call ``np.<name>`` or ``torch.<name>`` depending on the array type."""
    if type(x).__module__.split(".", 1)[0] == "torch":
        import torch

        return getattr(torch, name)(x, *args)
    return getattr(np, name)(x, *args)


class Monoid:
    """An associative combine over elements of ``arity`` scalars, with identity.

    Parameters
    ----------
    combine : callable
        Scalar function ``(a_1..a_k, b_1..b_k) -> (c_1..c_k)`` (or a single
        scalar when ``k == 1``); plain Python that numba can compile, or a
        ``numba.njit`` dispatcher.  ``a`` is the earlier element.
    identity : scalar, tuple, or callable
        The identity element, as ``k`` scalars, or a function of the dtype
        returning them (e.g. ``-inf`` for floats and the minimum for ints).
    name : str, optional
        Shown in errors and reports.
    kinds : str
        NumPy dtype kinds the combine is meaningful for: ``'i'`` signed and
        ``'u'`` unsigned integers, ``'f'`` floats, ``'c'`` complex.  With
        ``'f'``, float16 and bfloat16 elements are also taken: scans
        combine them in float32 and round the result to the input dtype.
    commutative : bool
        Informational; kernels never rely on it.
    array_combine : callable, optional
        The same combine on arrays: ``(a_leaves, b_leaves) -> c_leaves`` with
        NumPy or torch arrays, used by the generic and dask paths (and by
        torch autograd).  When omitted, the scalar combine is mapped over
        NumPy arrays by a compiled loop.
    flush_subnormals : bool
        Flush-to-zero semantics for a multiplicative combine: every
        floating-point component of every combined value whose magnitude is
        below the dtype's smallest normal (``np.finfo(dtype).tiny``, about
        1.2e-38 for float32 and 2.2e-308 for float64) becomes a zero of the
        same sign; NaN and inf pass unchanged, integers are never touched.
        The built-in :data:`mul`, :data:`linear_recurrence` and
        :data:`matmul2x2` flush.  Running products of factors below one
        underflow, and on x86 cores every operation on a subnormal costs
        about 100 times a normal one; a product of factors above one half
        can even stay at the smallest subnormal for ever (``1.4e-45 * 0.9``
        rounds back to ``1.4e-45``).  Flushing keeps such scans at full speed.
        Pass ``True`` for a combine of your own that multiplies (an affine or
        matrix product); the default ``False`` leaves every value as the
        combine computes it.

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import Monoid, associative_scan
    >>> def affine(a1, b1, a2, b2):          # x -> a*x + b, composed in order
    ...     return a1 * a2, a2 * b1 + b2
    >>> m = Monoid(affine, identity=(1.0, 0.0), name="affine")
    >>> a, h = associative_scan(m, (np.full(3, 0.5), np.ones(3)))
    >>> h.tolist()
    [1.0, 1.5, 1.75]
    """

    def __init__(
        self,
        combine: Callable[..., Any],
        identity: IdentityLike,
        *,
        name: str | None = None,
        kinds: str = "iufc",
        commutative: bool = False,
        array_combine: Callable[[Sequence[Any], Sequence[Any]], Sequence[Any]] | None = None,
        flush_subnormals: bool = False,
    ) -> None:
        py = getattr(combine, "py_func", combine)
        if not callable(py):
            raise TypeError(f"combine must be callable, got {combine!r}")
        self.scalar: Callable[..., Any] = py
        self.name = name or getattr(py, "__name__", "monoid")
        self._identity = identity
        if not isinstance(kinds, str) or not kinds or set(kinds) - set(KINDS):
            raise ValueError(
                f"kinds={kinds!r} names no dtype kind a Monoid takes; pass letters of "
                f"{KINDS!r} (i signed and u unsigned integers, f floats, c complex), e.g. 'f'"
            )
        self.kinds = kinds
        self.commutative = commutative
        self._array_combine = array_combine
        self.arity = len(self.identity(np.dtype(np.float64 if "f" in kinds else np.int64)))
        argcount = getattr(getattr(py, "__code__", None), "co_argcount", 2 * self.arity)
        if argcount != 2 * self.arity:
            raise ValueError(
                f"combine {self.name!r} takes {argcount} arguments but the identity has "
                f"{self.arity} components; a combine of arity k takes 2k scalars "
                "(a_1..a_k, b_1..b_k)"
            )
        if not isinstance(flush_subnormals, (bool, np.bool_)):
            raise TypeError(f"flush_subnormals must be True or False, got {flush_subnormals!r}")
        #: The components flushed to zero below the smallest normal (see ``flush_subnormals``).
        self.flush: tuple[int, ...] = tuple(range(self.arity)) if flush_subnormals else ()
        self._check_returns()

    def _check_returns(self) -> None:
        """Refuse a combine that returns the wrong number of values (probed in Python)."""
        dtype = np.dtype(np.float64 if "f" in self.kinds else np.int64)
        e = self.identity(dtype)
        try:
            with np.errstate(all="ignore"):
                out = self.scalar(*e, *e)
        except Exception:  # numba-only code: the compiled kernels will tell
            return
        got = len(out) if isinstance(out, (tuple, list)) else 1
        if got != self.arity or (self.arity > 1 and not isinstance(out, (tuple, list))):
            raise TypeError(
                f"combine {self.name!r} returned {got} value(s) but the identity has "
                f"{self.arity} component(s); return a tuple (c_1, ..., c_k) with one value "
                "per component"
            )

    def __repr__(self) -> str:
        return f"Monoid({self.name!r}, arity={self.arity})"

    # -- the algebra ------------------------------------------------------
    def identity(self, dtype: Any) -> tuple[Any, ...]:
        """The identity as a tuple of ``arity`` scalars of ``dtype``."""
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"dtype={dtype!r} is not a NumPy dtype") from exc
        ident = self._identity(dt) if callable(self._identity) else self._identity
        if not isinstance(ident, tuple):
            ident = (ident,)
        return ident

    def accepts(self, dtype: Any) -> bool:
        """Whether this monoid is meaningful for ``dtype``."""
        return np.dtype(dtype).kind in self.kinds

    def combine_leaves(self, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
        """Combine two elements given as lists of ``arity`` arrays."""
        if self._array_combine is not None:
            return flush_leaves(list(self._array_combine(a, b)), self.flush)
        from ._cpu import elementwise

        return elementwise(self, a, b)  # the compiled combine flushes as the kernels do

    def __call__(self, a: Any, b: Any) -> Any:
        """Combine two batches of elements (pytrees of ``arity`` arrays)."""
        la, td = _pytree.flatten(a)
        lb, _ = _pytree.flatten(b)
        return _pytree.unflatten(td, self.combine_leaves(la, lb))


def flush_leaves(leaves: list[Any], which: Sequence[int]) -> list[Any]:
    """Leaves ``which`` of a combined value with flush-to-zero applied (NumPy or torch).

    A floating-point value below the dtype's smallest normal in magnitude
    becomes a zero of its sign; complex values flush their real and imaginary
    parts apart, as the kernels do.
    """
    for i in which:
        x = leaves[i]
        if type(x).__module__.split(".", 1)[0] == "torch":
            import torch

            if x.dtype.is_floating_point:
                tiny = torch.finfo(x.dtype).tiny
                leaves[i] = torch.where(x.abs() < tiny, x * 0, x)
            elif x.dtype.is_complex:
                re, im = flush_leaves([x.real, x.imag], (0, 1))
                leaves[i] = torch.complex(re, im)
            continue
        x = np.asarray(x)
        if x.dtype.kind == "f":
            tiny = np.finfo(x.dtype).tiny
            with np.errstate(invalid="ignore"):
                small = np.abs(x) < tiny
            if small.any():
                leaves[i] = np.where(small, np.copysign(x.dtype.type(0), x), x)
        elif x.dtype.kind == "c":
            out = np.empty_like(x)
            out.real, out.imag = flush_leaves([x.real, x.imag], (0, 1))
            leaves[i] = out
    return leaves


Combine = Monoid | Callable[[Any, Any], Any]
"""What the scan and the law checks take as ``fn``: a :class:`Monoid`, or a plain
vectorized ``combine(x, y)`` over elements (pytrees of arrays)."""


def monoid(
    identity: IdentityLike,
    *,
    name: str | None = None,
    kinds: str = "iufc",
    commutative: bool = False,
) -> Callable[[Callable[..., Any]], Monoid]:
    """Decorator form of :class:`Monoid`.

    Examples
    --------
    >>> from propopt import monoid
    >>> @monoid(identity=(1.0, 0.0))
    ... def affine(a1, b1, a2, b2):
    ...     return a1 * a2, a2 * b1 + b2
    >>> affine.arity
    2
    """

    def wrap(fn: Callable[..., Any]) -> Monoid:
        return Monoid(fn, identity, name=name, kinds=kinds, commutative=commutative)

    return wrap


# ---------------------------------------------------------------- built-ins
# Scalar combines live at module level so that generated kernels can import
# them by name (and numba can cache the kernels on disk).


def _add(a: Any, b: Any) -> Any:
    return a + b


def _mul(a: Any, b: Any) -> Any:
    return a * b


def _max(a: Any, b: Any) -> Any:
    # NaN-propagating, like np.maximum: a NaN on either side wins.  Both
    # tests are made (``|``, not ``or``), so that the kernels select, not branch.
    return b if (b > a) | (b != b) else a


def _min(a: Any, b: Any) -> Any:
    return b if (b < a) | (b != b) else a


def _logaddexp(a: Any, b: Any) -> Any:
    # log(exp(a) + exp(b)) = max + log1p(exp(-|a - b|)), without overflow:
    # propopt.vmath's softplus, which vectorizes in float32 kernels (float64
    # keeps libm's exp and log1p, faster there than its polynomials in the
    # scalar lanes).  Equal arguments (the identity -inf, and +inf) are taken
    # first; NaN propagates through the difference.  The CPU's inclusive
    # scans of float32 and float64 along the last axis run _cpu_logsum.py.
    if a == b:  # before the difference: inf - inf would warn where NumPy scalars run it
        return a + math.log(2.0)
    m = a if a > b else b
    return m + vmath.fsoftplus(-abs(a - b))


def _linear_recurrence(a1: Any, b1: Any, a2: Any, b2: Any) -> tuple[Any, Any]:
    # Element (a, b) is the map h -> a*h + b; combining applies a first.
    return a1 * a2, a2 * b1 + b2


def _matmul2x2(
    a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, g: Any, h: Any
) -> tuple[Any, Any, Any, Any]:
    # [[a, b], [c, d]] @ [[e, f], [g, h]]: the earlier matrix on the left.
    return a * e + b * g, a * f + b * h, c * e + d * g, c * f + d * h


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype) -> Any:
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _arr_linrec(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    return [a[0] * b[0], b[0] * a[1] + b[1]]


def _arr_matmul(x: Sequence[Any], y: Sequence[Any]) -> list[Any]:
    a, b, c, d = x
    e, f, g, h = y
    return [a * e + b * g, a * f + b * h, c * e + d * g, c * f + d * h]


add = Monoid(_add, 0, name="add", commutative=True, array_combine=lambda a, b: [a[0] + b[0]])
"""Addition; identity 0.  ``associative_scan(add, x)`` is a cumulative sum."""

mul = Monoid(
    _mul,
    1,
    name="mul",
    commutative=True,
    array_combine=lambda a, b: [a[0] * b[0]],
    flush_subnormals=True,
)
"""Multiplication; identity 1.  A cumulative product, flushed to zero below the
smallest normal (see :class:`Monoid`'s ``flush_subnormals``)."""

maximum = Monoid(
    _max,
    lambda dt: (_lowest(dt),),
    name="max",
    kinds="iuf",
    commutative=True,
    array_combine=lambda a, b: [_xp_call("maximum", a[0], b[0])],
)
"""NaN-propagating maximum (like ``np.maximum``); identity -inf or the integer minimum."""

minimum = Monoid(
    _min,
    lambda dt: (_highest(dt),),
    name="min",
    kinds="iuf",
    commutative=True,
    array_combine=lambda a, b: [_xp_call("minimum", a[0], b[0])],
)
"""NaN-propagating minimum (like ``np.minimum``); identity +inf or the integer maximum."""

logaddexp = Monoid(
    _logaddexp,
    -np.inf,
    name="logaddexp",
    kinds="f",
    commutative=True,
    array_combine=lambda a, b: [_xp_call("logaddexp", a[0], b[0])],
)
"""``log(exp(a) + exp(b))``, computed stably; identity -inf.  A running log-sum-exp."""

linear_recurrence = Monoid(
    _linear_recurrence,
    (1, 0),
    name="linear_recurrence",
    array_combine=_arr_linrec,
    flush_subnormals=True,
)
"""First-order linear recurrence ``h_t = a_t * h_{t-1} + b_t``, elementwise.

Elements are pairs ``(a, b)`` standing for the map ``h -> a*h + b``;
``(a1, b1) . (a2, b2) = (a1*a2, a2*b1 + b2)`` applies the earlier map first.
The second output of an inclusive scan is ``h_t`` with ``h_{-1} = 0``.
Identity ``(1, 0)``.  Not commutative.  Both components are flushed to zero
below the smallest normal (see :class:`Monoid`'s ``flush_subnormals``): the
running product of the ``a`` underflows on long inputs, and subnormal
arithmetic is about 100 times slower on x86 cores.
"""

matmul2x2 = Monoid(
    _matmul2x2, (1, 0, 0, 1), name="matmul2x2", array_combine=_arr_matmul, flush_subnormals=True
)
"""Product of 2x2 matrices, given as four arrays ``(a, b, c, d)`` for ``[[a, b], [c, d]]``.

The inclusive scan gives ``M_0 @ M_1 @ ... @ M_t`` (the earlier matrix on the
left); with ``reverse=True`` it gives ``M_{n-1} @ ... @ M_t``, following
``jax.lax.associative_scan``.  Identity: the unit matrix.  Not commutative.
"""

BUILTINS: dict[str, Monoid] = {
    str(m.name): m for m in (add, mul, maximum, minimum, logaddexp, linear_recurrence, matmul2x2)
}
