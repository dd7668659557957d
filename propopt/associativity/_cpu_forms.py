"""Which in-block form a CPU scan runs (``_cpu.py``), and the sizes of its tiles.

Three forms scan a tile inside one thread: the interleaved scalar lanes
(``_cpu_lanes.py``), the tree whose levels vectorize (``_cpu_tile.py``) and,
for float ``maximum`` and ``minimum``, the scan inside each vector register
(``_cpu_vector.py``).  The choice is made per monoid and dtype, from what
the combine does (:func:`tree_for`, :func:`vector_op`).
"""

from __future__ import annotations

import dis
import types
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ._cpu_lanes import lanes_for


class MonoidLike(Protocol):
    """What the kernels take from a :class:`propopt.Monoid` (whose module imports this one)."""

    name: Any
    arity: int
    flush: tuple[int, ...]

    def scalar(self, *args: Any) -> Any: ...

    def identity(self, dtype: Any) -> tuple[Any, ...]: ...


#: Elements per lane of the lane form of the in-block scan (``_cpu_lanes.py``):
#: a compile-time constant, so that every lane is addressed from one base
#: pointer.  Not a power of two: with 512 float32 lanes every other lane sat a
#: multiple of 4 KiB from another, and on an AVX-512 Xeon one thread's lane
#: pass ran at the sequential loop's speed (docs/associativity.md).
LANE = 1040

#: The lane form prefetches its next tile for elements of at most this many
#: bytes (``_cpu_lanes.lane_lines`` gives the figures).
PREFETCH_ITEMSIZE = 4

#: Bytes of input in one in-block tile (``_cpu_tile.py``), at most 2048
#: elements: its levels are kept in scratch of the same size, which with the
#: tile's input and output stays in the L1 and L2 caches.  Float32 linear
#: recurrence at 2^22 on one thread: 9.2 ms with 512-element tiles, 9.0 ms
#: with 2048, each run beside the sequential loop's 7.6 ms.
TILE_BYTES = 16384


def uses_tree(arity: int, itemsize: int) -> bool:
    """Whether the in-block scan can be the tree of ``_cpu_tile.py`` (else the lanes of
    ``_cpu_lanes.py``): for elements of at most 4 bytes and arity at most 2."""
    return arity <= 2 and itemsize <= 4


def selects(monoid: MonoidLike) -> bool:
    """Whether the combine compares its arguments (``max``, ``min``): a select per element.

    The lanes run each combine as scalar code, the tree as whole vectors: float32
    ``maximum`` at 2^22 (two threads, a 2-core AMD EPYC, ``znver2``) took 3.0-3.4 ms
    as the tree against 3.8-4.0 ms as lanes (a copy of ``x``: 1.8 ms); int32's
    ``maximum``, with no NaN to test, kept the lanes' pace better (2.4-2.6 ms
    against 2.7-2.8 ms as the tree).
    """
    fn = getattr(monoid.scalar, "py_func", monoid.scalar)
    code = getattr(fn, "__code__", None)
    return code is not None and any(i.opname == "COMPARE_OP" for i in dis.get_instructions(code))


def calls(monoid: MonoidLike) -> bool:
    """Whether the combine calls a function or reads a global (``math.exp``, a helper).

    The tree pays where the combine is dear: float32 ``logaddexp`` at 2^22
    ran 13.6 ms as the tree against 31.7 ms as lanes (two threads; one
    thread 20.8 against 49.9 ms).  Where it is a few arithmetic operations
    the lanes keep pace with memory on fewer instructions: ``add`` at 2^24
    14.2-14.5 ms as lanes against 15.1-15.6 ms as the tree, float32
    ``linear_recurrence`` at 2^22 5.0-5.1 against 5.3-5.7 ms (one thread
    18.0-18.7 against 20.8-21.3 ms and 7.95 against 8.3-8.5 ms), measured
    side by side on a 2-core AMD EPYC (znver2).
    """
    fn = getattr(monoid.scalar, "py_func", monoid.scalar)
    code = getattr(fn, "__code__", None)
    return code is None or bool(code.co_names)


def may_raise(monoid: MonoidLike) -> bool:
    """Whether the combine, or a function it calls, holds a ``raise`` (or an ``assert``).

    numba passes on no exception raised in a thread of its pool (the scan
    returned, wrong from that block on), so such a combine is scanned on the
    calling thread.  A division by zero does not raise in the kernels
    (``_jit.KERNEL_HELPER``).  Helpers are found among the globals and
    closure cells the combine reads, a few calls deep; one that cannot be
    read (no Python code) counts as raising.
    """
    fn = getattr(monoid.scalar, "py_func", monoid.scalar)
    return _raises(fn, 0, set())


def _raises(fn: Any, depth: int, seen: set[int]) -> bool:
    code = getattr(fn, "__code__", None)
    if code is None or depth > 4:
        return True
    if id(code) in seen:
        return False
    seen.add(id(code))
    if _has_raise(code):
        return True
    glb = getattr(fn, "__globals__", {})
    read = [glb[n] for n in code.co_names if n in glb]
    read += [c.cell_contents for c in getattr(fn, "__closure__", None) or () if _full(c)]
    for value in read:
        inner = getattr(value, "py_func", value)
        if isinstance(inner, types.ModuleType) or not callable(inner):
            continue  # a module (its functions are numba's or compiled), a constant
        if isinstance(inner, type) or str(getattr(inner, "__module__", "")).startswith(
            ("propopt.", "numpy", "math", "cmath", "builtins")
        ):
            continue  # a type (np.float32), a function of propopt, NumPy or math
        if _raises(inner, depth + 1, seen):
            return True
    return False


_RAISES = frozenset(dis.opmap[n] for n in ("RAISE_VARARGS", "RERAISE"))


def _has_raise(code: types.CodeType) -> bool:
    """Whether ``code``, or code nested in it, holds a raise opcode (a scan of its bytes)."""
    if not _RAISES.isdisjoint(code.co_code[0::2]):
        return True
    return any(isinstance(c, types.CodeType) and _has_raise(c) for c in code.co_consts)


def _full(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


def tree_for(monoid: MonoidLike, itemsize: int, keep: Sequence[int] = (), kind: str = "f") -> bool:
    """Whether the scan of ``monoid`` writing the components ``keep`` (all when empty)
    runs the tree: a dear combine (:func:`calls`) or a float combine that compares
    (:func:`selects`).  ``kind``: the dtype's kind.  A scan that leaves outputs out runs
    the lanes too, the others kept a tile at a time (``_cpu_lanes.lane_lines``)."""
    del keep
    dear = calls(monoid) or (kind in "fc" and selects(monoid))
    return uses_tree(monoid.arity, itemsize) and dear


def vector_op(monoid: MonoidLike, dtype: np.dtype, keep: Sequence[int] = ()) -> str:
    """``"max"`` or ``"min"`` where the in-block scan is the vector form of
    ``_cpu_vector.py`` (the built-in float :data:`~propopt.maximum` and
    :data:`~propopt.minimum`), else ``""``."""
    if dtype.kind != "f" or len(keep) not in (0, monoid.arity):
        return ""
    fn = getattr(monoid.scalar, "py_func", monoid.scalar)
    if getattr(fn, "__module__", None) != f"{__package__}.monoid":  # (monoid.py imports this one)
        return ""
    return {"_max": "max", "_min": "min"}.get(getattr(fn, "__qualname__", ""), "")


def tile_elements(arity: int, itemsize: int, tree: bool | None = None) -> int:
    """Elements of one in-block tile: a power of two near ``TILE_BYTES`` for the tree,
    ``LANE`` per lane for the lanes (``tree``: by :func:`uses_tree` when None)."""
    if tree is None:
        tree = uses_tree(arity, itemsize)
    if not tree:
        return LANE * lanes_for(arity)
    return max(256, min(2048, 1 << (TILE_BYTES // (arity * itemsize)).bit_length() - 1))
