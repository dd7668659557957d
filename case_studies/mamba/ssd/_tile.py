"""The SSD scan's intra-chunk product for a tile of rows, as explicit LLVM vector code.

:func:`._cpu.finish` computes, for each (row, chunk, head) and a tile
of ``R <= 6`` consecutive output rows ``r``::

    acc_r  = sum_{j in [jlo, jhi)} Lm[lr0 + r, lc0 + j] v[vo + j] x_j
    y_r    = s_r y_r + u_r acc_r        (s_r y_r read as 0 where s_r = 0)

with ``x_j`` the head's ``P`` channels of token ``j`` (row ``xo + j xs`` of a
flat array) and ``y_r`` the output row ``yo + r ys``.  :func:`tile` keeps the
``R x 4`` accumulator vectors of 16 channels in registers for a block of
64 channels (then 16 at a time), and per token ``j`` loads four vectors of
``x``, scales them by ``v_j`` and adds ``R`` broadcast coefficients times
them: 4 loads and ``R`` broadcasts feed ``4 R`` fused multiply-adds.  The
same loops written in numba (``y`` rows updated in memory per token, the
loop wrapped in alias checks) ran at 13 GFLOP/s on one core; this at
70-80 GFLOP/s (float32, P = 64, one core of the 2-core development machine).

float64, or ``P`` not a multiple of 16, takes the numba loops (:func:`tile_loops`),
the same operations in another order of summation.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from .._compute import FASTMATH
from .._exp import fexp
from .._lanes import VL, _bcast, _is_f32_c, _vexp, _vptr

#: Largest tile height: 6 rows x 4 vectors = 24 accumulators, with the 4
#: vectors of ``x`` and a broadcast, within AVX-512's 32 registers.
ROWS = 6


def _codegen(R: int) -> Any:
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        st = signature.args
        Lm = context.make_array(st[0])(context, builder, args[0])
        va, xa, ua, ya, sa = (context.make_array(st[k])(context, builder, args[k])
                              for k in (5, 7, 10, 11, 14))  # fmt: skip
        lr0, lc0, jlo, jhi, vo, xo, xs, yo, ys, P = (
            context.cast(builder, args[k], st[k], types.int64)
            for k in (1, 2, 3, 4, 6, 8, 9, 12, 13, 15)
        )
        ldm = cgutils.unpack_tuple(builder, Lm.shape, 2)[1]
        f32 = ir.FloatType()
        vt = ir.VectorType(f32, VL)
        vp = vt.as_pointer()
        i64 = ir.IntType(64)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt] * 3),
                                             f"llvm.fmuladd.v{VL}f32")  # fmt: skip

        def const(v: int) -> ir.Constant:
            return ir.Constant(i64, v)

        zero = ir.Constant(vt, [ir.Constant(f32, 0.0)] * VL)
        mrow = [builder.mul(builder.add(lr0, const(r)), ldm) for r in range(R)]
        mrow = [builder.add(m, lc0) for m in mrow]

        def block(cb: ir.Value, CV: int) -> None:
            """Columns ``cb .. cb + 16 CV`` of the tile's rows."""
            acc = [[cgutils.alloca_once(builder, vt) for _ in range(CV)] for _ in range(R)]
            for r in range(R):
                for k in range(CV):
                    builder.store(zero, acc[r][k])
            with cgutils.for_range(builder, builder.sub(jhi, jlo)) as lj:
                j = builder.add(jlo, lj.index)
                base = builder.add(builder.add(xo, builder.mul(j, xs)), cb)
                vj = _bcast(builder, va.data, builder.add(vo, j), vt)
                xv = [
                    builder.fmul(builder.load(_vptr(builder, xa.data,
                                                    builder.add(base, const(VL * k)), vp),
                                              align=4), vj, flags=("contract",))
                    for k in range(CV)
                ]  # fmt: skip
                for r in range(R):
                    m = _bcast(builder, Lm.data, builder.add(mrow[r], j), vt)
                    for k in range(CV):
                        builder.store(builder.call(fma, [m, xv[k], builder.load(acc[r][k])]),
                                      acc[r][k])  # fmt: skip
            for r in range(R):
                s = _bcast(builder, sa.data, const(r), vt)
                s_zero = builder.fcmp_ordered("==", s, zero)
                u = _bcast(builder, ua.data, const(r), vt)
                row = builder.add(builder.add(yo, builder.mul(const(r), ys)), cb)
                for k in range(CV):
                    p = _vptr(builder, ya.data, builder.add(row, const(VL * k)), vp)
                    sy = builder.fmul(s, builder.load(p, align=4), flags=("contract",))
                    sy = builder.select(s_zero, zero, sy)  # s = 0 drops y, an inf included
                    out = builder.call(fma, [u, builder.load(acc[r][k]), sy])
                    builder.store(out, p, align=4)

        n4 = builder.udiv(P, const(4 * VL))
        with cgutils.for_range(builder, n4) as lb:
            block(builder.mul(lb.index, const(4 * VL)), 4)
        done = builder.mul(n4, const(4 * VL))
        n1 = builder.udiv(builder.sub(P, done), const(VL))
        with cgutils.for_range(builder, n1) as lb:
            block(builder.add(done, builder.mul(lb.index, const(VL))), 1)
        return context.get_dummy_value()

    return codegen


def _make(R: int) -> Any:
    @intrinsic
    def tile_r(typingctx, Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P):  # type: ignore[no-untyped-def]
        ints = (lr0, lc0, jlo, jhi, vo, xo, xs, yo, ys, P)
        if not (_is_f32_c(Lm, 2) and all(_is_f32_c(t, 1) for t in (v, x, u, y, s))
                and all(isinstance(t, types.Integer) for t in ints)):  # fmt: skip
            return None
        sig = types.void(Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P)
        return sig, _codegen(R)

    return tile_r


_tile1, _tile2, _tile3, _tile4, _tile5, _tile6 = (_make(R) for R in range(1, ROWS + 1))


@njit(cache=True, fastmath=FASTMATH)
def tile_loops(R, Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P):  # type: ignore[no-untyped-def]
    """:func:`tile` in numba loops (any dtype, any ``P``)."""
    for r in range(R):
        yr = yo + r * ys
        ur = u[r]
        sr = s[r]
        for p in range(P):
            y[yr + p] = sr * y[yr + p] if sr != 0 else 0.0  # s = 0 drops y, an inf included
        for j in range(jlo, jhi):
            m = ur * Lm[lr0 + r, lc0 + j] * v[vo + j]
            xr = xo + j * xs
            for p in range(P):
                y[yr + p] += m * x[xr + p]


def tile(R: int, Lm: Any, lr0: int, lc0: int, jlo: int, jhi: int, v: Any, vo: int, x: Any,
         xo: int, xs: int, u: Any, y: Any, yo: int, ys: int, s: Any, P: int) -> None:  # fmt: skip
    """``y_r = s_r y_r + u_r sum_j Lm[lr0 + r, lc0 + j] v[vo + j] x_j``, ``r < R`` (see above)."""
    tile_loops(R, Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P)


@overload(tile, inline="always", jit_options={"fastmath": FASTMATH})
def _tile_impl(R, Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P):  # type: ignore[no-untyped-def]
    if _is_f32_c(Lm, 2) and all(_is_f32_c(t, 1) for t in (v, x, u, y, s)):

        def vec(R, Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P):  # type: ignore[no-untyped-def]
            if P % VL:
                tile_loops(R, Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P)
            elif R == 6:
                _tile6(Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P)
            elif R == 5:
                _tile5(Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P)
            elif R == 4:
                _tile4(Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P)
            elif R == 3:
                _tile3(Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P)
            elif R == 2:
                _tile2(Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P)
            else:
                _tile1(Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P)

        return vec

    def loops(R, Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P):  # type: ignore[no-untyped-def]
        tile_loops(R, Lm, lr0, lc0, jlo, jhi, v, vo, x, xo, xs, u, y, yo, ys, s, P)

    return loops


@intrinsic
def _epilogue_vec(typingctx, y, yo, x, xo, Dv, do, z, P, has_d, has_z):  # type: ignore[no-untyped-def]
    ints = (yo, xo, do, P)
    if not (all(_is_f32_c(t, 1) for t in (y, x, Dv, z))
            and all(isinstance(t, types.Integer) for t in ints)
            and all(isinstance(t, types.Boolean) for t in (has_d, has_z))):  # fmt: skip
        return None
    sig = types.float32(y, yo, x, xo, Dv, do, z, P, has_d, has_z)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        st = signature.args
        ya, xa, da, za = (
            context.make_array(st[k])(context, builder, args[k]) for k in (0, 2, 4, 6)
        )
        yo_, xo_, do_, P_ = (context.cast(builder, args[k], st[k], types.int64)
                             for k in (1, 3, 5, 7))  # fmt: skip
        hd, hz = args[8], args[9]
        f32 = ir.FloatType()
        vt = ir.VectorType(f32, VL)
        vp = vt.as_pointer()
        i64 = ir.IntType(64)
        zero = ir.Constant(vt, [ir.Constant(f32, 0.0)] * VL)
        one = ir.Constant(vt, [ir.Constant(f32, 1.0)] * VL)
        nan_acc = cgutils.alloca_once(builder, vt)
        out_v = cgutils.alloca_once(builder, vt)
        builder.store(zero, nan_acc)

        def at(arr: Any, off: ir.Value, j: ir.Value) -> ir.Value:
            return _vptr(builder, arr.data, builder.add(off, j), vp)

        def mul(a: ir.Value, b: ir.Value) -> ir.Value:
            return builder.fmul(a, b, flags=("contract",))

        with cgutils.for_range(builder, builder.udiv(P_, ir.Constant(i64, VL))) as lv:
            j = builder.mul(lv.index, ir.Constant(i64, VL))
            py = at(ya, yo_, j)
            builder.store(builder.load(py, align=4), out_v)
            with builder.if_then(hd):
                o = builder.load(out_v)
                dx = mul(
                    builder.load(at(da, do_, j), align=4), builder.load(at(xa, xo_, j), align=4)
                )
                builder.store(builder.fadd(o, dx, flags=("contract",)), out_v)
            with builder.if_then(hz):
                zt = builder.load(at(za, yo_, j), align=4)
                sg = builder.fdiv(zt, builder.fadd(one, _vexp(builder, builder.fneg(zt), vt),
                                                   flags=("contract",)),
                                  flags=("contract", "arcp"))  # fmt: skip
                builder.store(mul(builder.load(out_v), sg), out_v)
            o = builder.load(out_v)
            builder.store(o, py, align=4)
            # 0 * o is nan exactly for an inf or nan o
            builder.store(builder.fadd(builder.load(nan_acc), builder.fmul(o, zero)), nan_acc)
        acc = builder.load(nan_acc)
        total = builder.extract_element(acc, ir.Constant(ir.IntType(32), 0))
        for k in range(1, VL):
            total = builder.fadd(
                total, builder.extract_element(acc, ir.Constant(ir.IntType(32), k))
            )
        return total

    return sig, codegen


@njit(cache=True, fastmath=FASTMATH)
def epilogue_loops(y, yo, x, xo, Dv, do, z, P, has_d, has_z):  # type: ignore[no-untyped-def]
    """:func:`epilogue` in numba loops (any dtype, any ``P``)."""
    acc = 0.0
    for p in range(P):
        o = y[yo + p]
        if has_d:
            o += Dv[do + p] * x[xo + p]
        if has_z:
            zp = z[yo + p]
            o = o * (zp / (1.0 + fexp(-zp)))
        y[yo + p] = o
        acc += o * 0.0
    return acc


def epilogue(y: Any, yo: int, x: Any, xo: int, Dv: Any, do: int, z: Any, P: int, has_d: bool,
             has_z: bool) -> float:  # fmt: skip
    """One output row: ``y = (y + Dv x) silu(z)`` (each term if asked), in place.

    Rows start at ``y[yo]``, ``x[xo]``, ``Dv[do]``, ``z[yo]`` (flat arrays).
    Returns the sum of ``0 * y`` over the row: nan exactly when it holds an
    inf or nan.
    """
    return epilogue_loops(y, yo, x, xo, Dv, do, z, P, has_d, has_z)


@overload(epilogue, inline="always", jit_options={"fastmath": FASTMATH})
def _epilogue_impl(y, yo, x, xo, Dv, do, z, P, has_d, has_z):  # type: ignore[no-untyped-def]
    if all(_is_f32_c(t, 1) for t in (y, x, Dv, z)):

        def vec(y, yo, x, xo, Dv, do, z, P, has_d, has_z):  # type: ignore[no-untyped-def]
            if P % VL:
                return epilogue_loops(y, yo, x, xo, Dv, do, z, P, has_d, has_z)
            return _epilogue_vec(y, yo, x, xo, Dv, do, z, P, has_d, has_z)

        return vec

    def loops(y, yo, x, xo, Dv, do, z, P, has_d, has_z):  # type: ignore[no-untyped-def]
        return epilogue_loops(y, yo, x, xo, Dv, do, z, P, has_d, has_z)

    return loops
