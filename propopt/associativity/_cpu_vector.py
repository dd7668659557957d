"""The vector form of the in-block scan of ``_cpu.py``, for float ``maximum`` and ``minimum``.

The lanes (``_cpu_lanes.py``) run each combine as scalar code, and the tree
(``_cpu_tile.py``) runs ``log2`` of a tile's levels of them through scratch.
A running maximum needs neither: each vector of ``W`` elements (32 bytes,
8 float32 or 4 float64; 64 bytes on AMD's AVX-512 cores, :func:`vector_bytes`)
is scanned inside its register by ``log2 W`` shifts, each a shuffle that
brings in the identity and a combine (Hillis and Steele's scan, the
"horizontal" scan of Zhang, Wang and Ross, *Parallel Prefix Sum with
SIMD*, ADMS 2020), then combined with the carry.  The carry chain is one
combine per vector: the next carry is the carry combined with the vector's
last prefix, which does not wait for the stores.

The combine is the monoid's own, as selects: ``b`` wins where
``b > a`` (``b < a`` for ``minimum``) or ``b`` is NaN, else ``a``, with ``a``
the earlier operand.  A vector of the input that holds no NaN takes the
plain select ``b > a``, one ``vmaxps`` (``vminps``): every later operand in
its scan is then NaN-free, and for those the two agree, whatever ``a`` is.
So the results are the fold's, element for element: the first of equal
values (``-0`` and ``+0`` keep the earlier one) and the latest NaN.  The
identity (``-inf``; ``+inf``) leaves every value as it is, NaN included, so
shifting it in is exact.

Float32 ``maximum`` at 2^22 in main memory on one thread of a 2-core AMD
EPYC (``znver2``), CPU time: 0.47 ns an element against the tree's 0.95 and
a copy's 0.46-0.48 (0.76 with the NaN test in every vector); float64 0.83
against a copy's 0.88-0.91.

The vector loop is written in LLVM IR by an intrinsic, one per (operation,
direction, exclusive): numba has no vector types.  A reverse scan reads each
vector from the end and shifts the other way; an exclusive one shifts its
prefix by one more element, the carry's place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numba
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic


@functools.lru_cache(maxsize=1)
def vector_bytes() -> int:
    """Bytes of one vector on the CPU numba compiles for (``NUMBA_CPU_NAME`` and
    ``NUMBA_CPU_FEATURES`` where set, else the host's): 64 with AVX-512 on AMD
    Zen, where LLVM uses all 512 bits, else 32 (Intel's AVX-512 cores, where
    LLVM prefers 256-bit vectors, and AVX2)."""
    from llvmlite import binding as llvm
    from numba.core import config

    name = config.CPU_NAME or llvm.get_host_cpu_name()
    features = config.CPU_FEATURES or llvm.get_host_cpu_features().flatten()
    return 64 if "+avx512f" in features and name.startswith("znver") else 32


def width(itemsize: int) -> int:
    """Elements of one vector for elements of ``itemsize`` bytes."""
    return vector_bytes() // itemsize


def _vscan(op: str, rev: bool, excl: bool) -> Any:
    """The intrinsic ``vscan(x, o, base, nvec, carry) -> carry`` for one variant.

    Scans ``nvec`` vectors of ``x`` from ``carry`` into ``o``: forward, the
    vectors at ``base, base + W, ...``; reverse, those ending at ``base``
    (``base - W, base - 2W, ...``), each read from its end.  Returns the
    carry after them.  ``x`` and ``o`` are C-contiguous 1-D float arrays.
    """
    pred = ">" if op == "max" else "<"
    ident_value = float("-inf") if op == "max" else float("inf")

    @intrinsic
    def vscan(typingctx, x, o, base, nvec, carry):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
        ok = (
            isinstance(x, numba.types.Array)
            and isinstance(o, numba.types.Array)
            and x.ndim == 1
            and o.ndim == 1
            and x.layout == "C"
            and o.layout == "C"
            and x.dtype in (numba.types.float32, numba.types.float64)
            and o.dtype == x.dtype
            and isinstance(base, numba.types.Integer)
            and isinstance(nvec, numba.types.Integer)
        )
        if not ok:
            return None
        sig = x.dtype(x, o, numba.types.intp, numba.types.intp, x.dtype)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            ft = context.get_value_type(signature.args[0].dtype)
            W = width(context.get_abi_sizeof(ft))
            i32 = ir.IntType(32)
            vt = ir.VectorType(ft, W)
            xa = context.make_array(signature.args[0])(context, builder, args[0])
            oa = context.make_array(signature.args[1])(context, builder, args[1])
            ident = ir.Constant(vt, [ir.Constant(ft, ident_value)] * W)
            align = context.get_abi_sizeof(ft)

            def comb(a: ir.Value, b: ir.Value) -> ir.Value:
                # b wins where it is strictly beyond a or NaN (a is the earlier)
                beyond = builder.fcmp_ordered(pred, b, a)
                nan = builder.fcmp_unordered("uno", b, b)
                return builder.select(builder.or_(beyond, nan), b, a)

            def plain(a: ir.Value, b: ir.Value) -> ir.Value:
                # comb where b holds no NaN (a may): one vmaxps (vminps)
                return builder.select(builder.fcmp_ordered(pred, b, a), b, a)

            def shift(v: ir.Value, s: int) -> ir.Value:
                # each lane takes the lane s places before it in logical order
                # (the identity where there is none): lower lanes forward,
                # higher lanes in reverse
                if rev:
                    mask = [i + s if i + s < W else W for i in range(W)]
                else:
                    mask = [i - s if i >= s else W for i in range(W)]
                return builder.shuffle_vector(v, ident, ir.Constant(ir.VectorType(i32, W), mask))

            def splat(v: ir.Value, lane: int) -> ir.Value:
                mask = ir.Constant(ir.VectorType(i32, W), [lane] * W)
                return builder.shuffle_vector(v, v, mask)

            first = ir.Constant(ir.VectorType(i32, W), [0] * W)
            c0 = builder.insert_element(ident, args[4], ir.Constant(i32, 0))
            slot = cgutils.alloca_once_value(builder, builder.shuffle_vector(c0, c0, first))
            last = 0 if rev else W - 1
            intp = context.get_value_type(numba.types.intp)
            with cgutils.for_range(builder, args[3]) as loop:
                j = loop.index
                if rev:
                    start = builder.sub(args[2], builder.mul(builder.add(j, intp(1)), intp(W)))
                else:
                    start = builder.add(args[2], builder.mul(j, intp(W)))
                src = builder.bitcast(builder.gep(xa.data, [start]), vt.as_pointer())
                dst = builder.bitcast(builder.gep(oa.data, [start]), vt.as_pointer())
                v = builder.load(src, align=align)
                nans = builder.fcmp_unordered("uno", v, v)
                has_nan = builder.icmp_unsigned(
                    "!=", builder.bitcast(nans, ir.IntType(W)), ir.Constant(ir.IntType(W), 0)
                )
                with builder.if_else(has_nan, likely=False) as (slow, fast):
                    for path, select in ((slow, comb), (fast, plain)):
                        with path:
                            p = v
                            s = 1
                            while s < W:
                                p = select(shift(p, s), p)
                                s *= 2
                            c = builder.load(slot)
                            builder.store(select(c, shift(p, 1) if excl else p), dst, align=align)
                            builder.store(select(c, splat(p, last)), slot)
            c = builder.load(slot)
            return builder.extract_element(c, ir.Constant(i32, 0))

        return sig, codegen

    return vscan


#: The intrinsics by (operation, reverse, exclusive), named ``vscan_<op>_<r|f>_<e|i>``.
_VARIANTS: dict[str, Callable[..., Any]] = {}
for _op in ("max", "min"):
    for _rev in (False, True):
        for _excl in (False, True):
            _name = f"vscan_{_op}_{'r' if _rev else 'f'}_{'e' if _excl else 'i'}"
            _VARIANTS[_name] = _vscan(_op, _rev, _excl)
            globals()[_name] = _VARIANTS[_name]


def intrinsic_name(op: str, rev: bool, excl: bool) -> str:
    """The module-level name of the intrinsic for one variant."""
    return f"vscan_{op}_{'r' if rev else 'f'}_{'e' if excl else 'i'}"


def header_lines(op: str, rev: bool, excl: bool) -> list[str]:
    """The module lines that name the variant's intrinsic ``vscan``."""
    name = intrinsic_name(op, rev, excl)
    return [f"from propopt.associativity._cpu_vector import {name} as vscan"]


def vector_lines(op: str, rev: bool, excl: bool, w: Callable[[str], None]) -> None:
    """The vector loop of ``_block`` for arity 1 (inside it, after
    ``nt = (hi - lo) // TILE``, before its element loop), in a module whose
    ``TILE`` is :func:`width` and which holds :func:`header_lines`.

    Scans the ``nt`` whole vectors of logical ``[lo, hi)`` from the carry
    ``c0`` (the identity when ``fresh``: exact for these combines); the
    element loop scans the rest.
    """
    del op, rev, excl  # in the module's ``vscan`` (:func:`header_lines`)
    w("    if nt > 0:")
    w("        if fresh:")
    w("            c0 = e0")
    w("            fresh = False")
    w("        c0 = vscan(x0, o0, N - lo if rev else lo, nt, c0)")
