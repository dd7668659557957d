"""The CPU's own flush to zero, for the kernels of monoids that flush (``Monoid.flush``).

A monoid such as :data:`propopt.linear_recurrence` flushes every result
below the smallest normal to a zero of its sign.  Done in code, that is an
``abs``, a compare, a ``copysign`` and a select per component per combine:
in the lane form, where each combine runs as scalar code, it was the
largest part of the float32 recurrence's time on one thread (2.0 ns an
element with it against 1.45 without, on a 2-core AMD EPYC, ``znver2``).

On x86-64 the SSE control register (MXCSR) has a flush-to-zero bit (FTZ,
bit 15) that gives the same result from the arithmetic itself: a result
that would be subnormal becomes a zero of its sign.  The denormals-are-zero
bit (DAZ) is left clear, so a subnormal *input* still counts at its value,
as in the code form.  The two differ only at the boundary: the CPU tests
tininess after rounding to the format's precision with an unbounded
exponent, the code after rounding to the subnormal itself, so an exact
result within half a subnormal step below the smallest normal becomes zero
with the bit and the smallest normal in code; and with the bit the products
inside one combine (``a2 * b1`` of the recurrence, where no FMA fuses it)
flush too.  Both are changes below the smallest normal, the size of the
flush itself.

:func:`ftz_enter` sets the bit on the calling thread and returns the
register as it was; :func:`ftz_leave` puts it back.  The generated kernels
(``_cpu_source.py``) call them at the entry and exit of each per-thread function,
so that the bit is never left set in the user's threads.  Other machines
keep the flush in code (:data:`HARDWARE`).
"""

from __future__ import annotations

import platform

import numba
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

#: Whether the kernels flush with the CPU's bit (x86-64) rather than in code.
HARDWARE = platform.machine().lower() in ("x86_64", "amd64")

#: MXCSR's flush-to-zero bit.
FTZ_BIT = 0x8000


def _mxcsr(builder: ir.IRBuilder, name: str, slot: ir.Value) -> None:
    """Call ``llvm.x86.sse.<name>`` (``stmxcsr`` or ``ldmxcsr``) on the 32-bit ``slot``."""
    i8p = ir.IntType(8).as_pointer()
    fnty = ir.FunctionType(ir.VoidType(), [i8p])
    fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.x86.sse.{name}")
    builder.call(fn, [builder.bitcast(slot, i8p)])


@intrinsic
def ftz_enter(typingctx):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Set the calling thread's flush-to-zero bit; return the MXCSR it replaced."""

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        i32 = ir.IntType(32)
        slot = cgutils.alloca_once(builder, i32)
        _mxcsr(builder, "stmxcsr", slot)
        old = builder.load(slot)
        builder.store(builder.or_(old, ir.Constant(i32, FTZ_BIT)), slot)
        _mxcsr(builder, "ldmxcsr", slot)
        return old

    return numba.types.uint32(), codegen


@intrinsic
def ftz_leave(typingctx, old):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Put back the MXCSR ``old`` that :func:`ftz_enter` returned."""
    if old != numba.types.uint32:
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        slot = cgutils.alloca_once(builder, ir.IntType(32))
        builder.store(args[0], slot)
        _mxcsr(builder, "ldmxcsr", slot)
        return context.get_dummy_value()

    return numba.types.void(numba.types.uint32), codegen
