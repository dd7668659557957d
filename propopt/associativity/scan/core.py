"""``associative_scan``: all prefix combinations of a sequence, in parallel.

The law it relies on is associativity of the combine ``fn``::

    fn(a, fn(b, c)) == fn(fn(a, b), c)

which licenses regrouping the sequential fold ``((e0 . e1) . e2) . ...`` into
pieces that are reduced independently and then stitched together by their
carries (three phases: local reductions, a scan of the totals, a fix-up).
Commutativity is never assumed.
"""

from __future__ import annotations

from typing import Any

from ... import dispatch
from ...typing import Device, ScanMethod
from ..monoid import Combine
from . import _backends, _stages

METHODS: tuple[str, ...] = ("auto", *dict.fromkeys(m for m, _ in _backends.BACKENDS))
DEVICES: tuple[str, ...] = ("auto", *dispatch.DEVICES)


def associative_scan(
    fn: Combine,
    elems: Any,
    *,
    axis: int = 0,
    reverse: bool = False,
    exclusive: bool = False,
    identity: Any = None,
    method: ScanMethod = "auto",
    device: Device = "auto",
    check: bool | None = None,
    reset: Any = None,
    out: Any = None,
) -> Any:
    """Scan ``elems`` with an associative combine, in parallel.

    For a sequence ``e_0 .. e_{n-1}`` along ``axis`` the inclusive scan is
    ``out_i = e_0 . e_1 . ... . e_i`` where ``a . b = fn(a, b)``; with
    ``reverse=True`` it is ``out_i = e_{n-1} . ... . e_{i+1} . e_i`` (the
    accumulated suffix on the left), exactly as ``jax.lax.associative_scan``.
    ``exclusive=True`` leaves ``e_i`` out: ``out_0`` is the identity.

    Parameters
    ----------
    fn : Monoid or callable
        A :class:`~propopt.Monoid` (compiled kernels on CPU threads and CUDA,
        e.g. :data:`propopt.add`, :data:`propopt.linear_recurrence`) or a plain
        function ``fn(a, b)`` that combines two batches of elements
        elementwise: ``a`` and ``b`` have the structure of ``elems`` and
        equal shapes, ``a`` holding the earlier elements.  It must satisfy
        ``fn(a, fn(b, c)) == fn(fn(a, b), c)``; if it does not, the result
        depends on the backend and the split of the work (``check=True``
        tests the law on samples first).
    elems : array or pytree of arrays
        NumPy arrays, torch tensors (CPU or CUDA), jax arrays, CuPy or other
        CUDA device arrays, or dask arrays, alone or in a tuple, list, dict or
        namedtuple, all of the same length along ``axis``.  jax and CuPy
        arrays go in through DLPack without a copy (as NumPy views on the
        CPU, torch tensors on a GPU) and the result comes back in their
        library and on their device.  For a monoid of arity ``k`` there are ``k``
        leaves of one shape and dtype.
    axis : int
        The axis to scan along; negative values count from the end.
    reverse : bool
        Scan from the end towards the start.
    exclusive : bool
        Shift by one: ``out_0`` is the identity and ``e_i`` is not included
        in ``out_i``.
    identity : scalar or pytree, optional
        The identity element ``e`` (``fn(e, x) == x``): ``out_0`` of an
        exclusive scan, and the value of every segment start with ``reset=``.
        Required with ``exclusive=True`` for a plain ``fn``: a pytree like
        ``elems`` of scalars or arrays that broadcast to one element.  A
        :class:`~propopt.Monoid` brings its own, so every backend gives the
        same answer: ``identity=`` with a monoid must equal it (a different
        value raises ``ValueError``; to start the scan from a value, put it
        in front of ``elems``).
    method : {'auto', 'tiled', 'native', 'generic', 'reference'}
        The algorithm.  ``'tiled'``: propopt's compiled kernels, which scan
        tiles and pass their carries along (numba threads on the host, one
        CUDA kernel with decoupled look-back on the GPU, the chunks and their
        carries for Dask); it needs a :class:`~propopt.Monoid`.  On CPU
        float tensors that require grad its backward runs on the kernels
        too (docs/associativity.md, "Gradients").
        ``'native'``: torch's own ``cumsum``, ``cumprod`` or
        ``logcumsumexp`` of a torch CUDA tensor.  ``'generic'``: vectorized
        calls of ``fn`` (differentiable by torch).  ``'reference'``: the
        sequential fold that the tests trust.  ``'auto'``: for a monoid,
        ``'native'`` on the GPU where torch has the op and is the faster
        (docs/gpu.md), else ``'tiled'``, unless a torch tensor that requires
        grad is on the GPU or neither float32 nor float64 (nor half, widened);
        ``'generic'`` otherwise; dask arrays always run ``'tiled'``.
        The spellings ``'cpu'``, ``'cuda'``, ``'dask'`` (now ``'tiled'`` on
        that device) and ``'torch'`` (now ``'native'``) still work, with a
        ``DeprecationWarning``.
    device : {'auto', 'cpu', 'cuda', 'dask'}
        Where it runs: where the arrays are (``'auto'``).  A scan never moves
        arrays between devices, so any other value must name that place.
    check : bool or None
        ``True``: run :func:`propopt.audit.check_associative` on elements
        sampled from ``elems`` first, and raise
        :class:`propopt.audit.AssociativityError` on a violation beyond
        rounding.  ``None`` (default): the same check, on 32 sampled
        triples, the first time each plain callable is used; its cost is
        four calls of ``fn`` on that many elements, about 0.1 ms for NumPy
        ops.  The callables that passed are remembered for the life of the
        process (weakly, and by code object for closure-free functions, so
        that a lambda written in a loop is checked once).  A
        :class:`~propopt.Monoid` is trusted, and dask arrays are not sampled
        (that would compute them before the scan is built).  ``False``: no
        check.
    reset : bool array, optional
        Segment starts: a segmented scan restarts at every ``True``, so that
        ``out_i`` combines only the elements from the last start at or before
        ``i`` (in index order, for ``reverse=True`` too: a reverse scan runs
        from each segment's end to its start); with ``exclusive=True``,
        ``out_i`` is the identity at each start.  Shape ``(n,)`` along
        ``axis``, or one that broadcasts to the elements with length ``n`` on
        ``axis`` (a segmentation per row).  It scans the monoid transformer
        :func:`propopt.associativity.segmented` over ``(flag, element)``
        pairs, so every combine and backend takes it; see docs/associativity.md.
    out : array or pytree of arrays, optional
        Where to write the result, as ``np.cumsum(x, out=...)``: the
        structure of ``elems``, each leaf an array of the same type (NumPy
        array, or torch tensor on the same device), shape and dtype as the
        result leaf, and writable.  It is returned.  The CPU kernels write
        straight into C-contiguous NumPy arrays and CPU tensors, so a scan
        repeated into one buffer allocates nothing and faults in no new pages
        (a fresh 64 MiB result is mapped and faulted in on every call); other
        paths compute the result and copy it in.  ``out`` may be ``elems``
        itself (an in-place scan).  Not for dask arrays, which are lazy, nor
        jax arrays, which are immutable.

    Returns
    -------
    Same structure, array types, dtypes and device as ``elems``; ``out``
    when given.  A masked
    array (``np.ma``) gives a masked array: as in ``np.cumsum``, a masked
    element counts as the identity and its output is masked.  Other ndarray
    subclasses (``np.matrix``...) are scanned, and returned, as plain ndarrays.

    Notes
    -----
    Work is ``O(n)`` combines for every method.  Rounding, integer overflow,
    NaN and inf, the flush of subnormals by the multiplicative monoids, half
    precision and segmented scans are described in docs/associativity.md
    ("The scan's contract").

    Examples
    --------
    >>> import numpy as np
    >>> from propopt import associative_scan, add, linear_recurrence
    >>> associative_scan(add, np.arange(1, 6)).tolist()
    [1, 3, 6, 10, 15]
    >>> associative_scan(add, np.arange(1, 6), exclusive=True, reverse=True).tolist()
    [14, 12, 9, 5, 0]
    >>> a, h = associative_scan(linear_recurrence, (np.full(4, 0.5), np.ones(4)))
    >>> h.tolist()                                    # h_t = 0.5 * h_{t-1} + 1
    [1.0, 1.5, 1.75, 1.875]
    >>> associative_scan(lambda x, y: x + y, np.ones(3)).tolist()
    [1.0, 2.0, 3.0]
    >>> starts = np.array([True, False, False, True, False])
    >>> associative_scan(add, np.arange(1, 6), reset=starts).tolist()
    [1, 3, 6, 4, 9]

    References
    ----------
    G. E. Blelloch, "Prefix sums and their applications", CMU-CS-90-190, 1990.
    D. Merrill and M. Garland, "Single-pass parallel prefix scan with
    decoupled look-back", NVIDIA NVR-2016-002, 2016.
    """
    request = _stages.normalize(
        fn, elems, axis=axis, reverse=reverse, exclusive=exclusive, identity=identity,
        method=method, device=device, check=check, reset=reset, out=out,
    )  # fmt: skip
    return _stages.run(_stages.plan(request))
