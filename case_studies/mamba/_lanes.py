"""One token of the lane kernel's state update, as explicit LLVM vector code (float32).

:func:`._cpu.forward_lanes` keeps ``W`` channels of the state side by side,
``h[n, j]``, and for every token does::

    h[n, j] = fexp(dt[j] A[n, j]) h[n, j] + du[j] B_t[n]
    y[j]    = sum_n C_t[n] h[n, j]

Written as numba loops (``n`` outer, ``j`` inner so that ``j`` vectorizes),
every one of the N inner loops per token is a short loop of ``W / 16``
vectors that LLVM wraps in runtime alias checks (it cannot prove the rows
distinct), and ``y[j]`` goes through memory N times.  Measured on one core
(Zen 5, AVX-512), L = d_model = 1024: 2.0x the time of the exps alone.
:func:`token_lanes` emits the loop the other way round, one vector of 16
channels at a time with ``dt``, ``du`` and ``y`` in registers and the N
states streamed, with no alias checks: 1.4x the exps alone.

The exp is the float32 :func:`._exp.fexp`, operation for operation (same
constants, same fused multiply-adds, same clamps), applied to a vector;
results are identical to the loop version's.  ``16`` lanes are one AVX-512
register; LLVM splits them into two on AVX2 (or four on 128-bit SIMD).
Float64 uses the numba loops (:func:`token_update`).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from . import _exp as E
from ._exp import fexp

#: Channels per LLVM vector; the lane width ``W`` must be a multiple of it.
VL = 16


def _splat(vt: ir.VectorType, value: Any) -> ir.Constant:
    return ir.Constant(vt, [ir.Constant(vt.element, value)] * VL)


def _vexp(builder: ir.IRBuilder, x: ir.Value, vt: ir.VectorType) -> ir.Value:
    """:func:`._exp.fexp` (float32) of a vector ``x``: the same steps, lane by lane."""
    mod = builder.module
    name = f"v{VL}f32"
    fma = cgutils.get_or_insert_function(mod, ir.FunctionType(vt, [vt] * 3), "llvm.fmuladd." + name)
    flo = cgutils.get_or_insert_function(mod, ir.FunctionType(vt, [vt]), "llvm.floor." + name)

    def c(v: Any) -> ir.Constant:
        return _splat(vt, float(v))

    kf = builder.call(flo, [builder.call(fma, [x, c(E._LOG2E), c(E._HALF)])])
    # ordered comparisons are false for NaN, as in fexp: k is then defined
    kf = builder.select(builder.fcmp_ordered(">", kf, c(E._KMIN)), kf, c(E._KMIN))
    kf = builder.select(builder.fcmp_ordered("<", kf, c(E._KMAX)), kf, c(E._KMAX))
    nk = builder.fneg(kf)
    r = builder.call(fma, [nk, c(E._LN2_HI), x])
    r = builder.call(fma, [nk, c(E._LN2_LO), r])
    p = builder.call(fma, [c(E._C6), r, c(E._C5)])
    for k in (E._C4, E._C3, E._C2, E._ONE, E._ONE):
        p = builder.call(fma, [p, r, c(k)])
    it = ir.VectorType(ir.IntType(32), VL)
    ki = builder.fptosi(kf, it)
    bits = builder.shl(builder.add(ki, _splat(it, int(E._BIAS))), _splat(it, int(E._SHIFT)))
    res = builder.fmul(p, builder.bitcast(bits, vt), flags=("contract",))
    return builder.select(builder.fcmp_ordered("<", x, c(E._XMIN)), c(E._ZERO), res)


def _is_f32_c(t: Any, ndim: int) -> bool:
    return (
        isinstance(t, types.Array) and t.dtype == types.float32 and t.ndim == ndim
        and t.layout == "C"
    )  # fmt: skip


def _lanes_codegen(exps_only: bool) -> Any:
    """Code of :func:`token_lanes` (or, ``exps_only``, of :func:`exp_sum_lanes`)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        arrs = [context.make_array(t)(context, builder, v) for t, v in zip(signature.args, args)]
        if exps_only:
            ph, pa, pd = (a.data for a in arrs)
        else:
            ph, pa, pd, pu, py, pB, pC = (a.data for a in arrs)
        N, W = cgutils.unpack_tuple(builder, arrs[0].shape, 2)
        vt = ir.VectorType(ir.FloatType(), VL)
        vp = vt.as_pointer()
        i64 = ir.IntType(64)
        i32 = ir.IntType(32)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt] * 3),
                                             f"llvm.fmuladd.v{VL}f32")  # fmt: skip
        yacc = cgutils.alloca_once(builder, vt)

        def vptr(ptr: ir.Value, idx: ir.Value) -> ir.Value:
            return builder.bitcast(builder.gep(ptr, [idx]), vp)

        def bcast(ptr: ir.Value, idx: ir.Value) -> ir.Value:
            s = builder.load(builder.gep(ptr, [idx]))
            v = builder.insert_element(ir.Constant(vt, ir.Undefined), s, ir.Constant(i32, 0))
            return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined), _splat(
                ir.VectorType(i32, VL), 0))  # fmt: skip

        nv = builder.udiv(W, ir.Constant(i64, VL))
        with cgutils.for_range(builder, nv) as lv:
            j = builder.mul(lv.index, ir.Constant(i64, VL))
            d = builder.load(vptr(pd, j), align=4)
            if not exps_only:
                u = builder.load(vptr(pu, j), align=4)
                builder.store(_splat(vt, 0.0), yacc)
            with cgutils.for_range(builder, N) as ln:
                off = builder.add(builder.mul(ln.index, W), j)
                a = builder.load(vptr(pa, off), align=4)
                e = _vexp(builder, builder.fmul(d, a, flags=("contract",)), vt)
                hq = vptr(ph, off)
                if exps_only:
                    builder.store(builder.fadd(builder.load(hq, align=4), e), hq, align=4)
                else:
                    ub = builder.fmul(u, bcast(pB, ln.index), flags=("contract",))
                    hn = builder.call(fma, [e, builder.load(hq, align=4), ub])
                    builder.store(hn, hq, align=4)
                    y = builder.call(fma, [hn, bcast(pC, ln.index), builder.load(yacc)])
                    builder.store(y, yacc)
            if not exps_only:
                builder.store(builder.load(yacc), vptr(py, j), align=4)
        return context.get_dummy_value()

    return codegen


@intrinsic
def token_lanes(typingctx, h, at, dr, ur, yr, Brow, Crow):  # type: ignore[no-untyped-def]
    """One token for ``W`` channels (float32, C-contiguous, ``W`` a multiple of :data:`VL`)::

        h[n, j] = fexp(dr[j] at[n, j]) h[n, j] + ur[j] Brow[n]
        yr[j]   = sum_n h[n, j] Crow[n]

    ``h``, ``at``: (N, W); ``dr``, ``ur``, ``yr``: (W,); ``Brow``, ``Crow``: (N,).
    """
    shapes = ((h, 2), (at, 2), (dr, 1), (ur, 1), (yr, 1), (Brow, 1), (Crow, 1))
    if not all(_is_f32_c(t, nd) for t, nd in shapes):
        return None
    return types.void(h, at, dr, ur, yr, Brow, Crow), _lanes_codegen(False)


@intrinsic
def exp_sum_lanes(typingctx, acc, at, dr):  # type: ignore[no-untyped-def]
    """``acc[n, j] += fexp(dr[j] at[n, j])`` (float32, C-contiguous, shapes as
    :func:`token_lanes`): the exps of one token of the forward and nothing else, in
    the same code (the floor of :mod:`.floor`)."""
    if not all(_is_f32_c(t, nd) for t, nd in ((acc, 2), (at, 2), (dr, 1))):
        return None
    return types.void(acc, at, dr), _lanes_codegen(True)


def exp_sum_update(acc: Any, at: Any, dr: Any) -> None:
    """:func:`exp_sum_lanes` where it applies (float32, contiguous), else numba loops."""
    N, W = acc.shape
    for n in range(N):
        for j in range(W):
            acc[n, j] += fexp(dr[j] * at[n, j])


@overload(exp_sum_update, jit_options={"fastmath": {"contract", "reassoc", "nsz", "arcp"}})
def _exp_sum_update_impl(acc, at, dr):  # type: ignore[no-untyped-def]
    if all(_is_f32_c(t, nd) for t, nd in ((acc, 2), (at, 2), (dr, 1))):

        def vec(acc, at, dr):  # type: ignore[no-untyped-def]
            exp_sum_lanes(acc, at, dr)

        return vec

    def loops(acc, at, dr):  # type: ignore[no-untyped-def]
        N, W = acc.shape
        for n in range(N):
            a = at[n]
            s = acc[n]
            for j in range(W):
                s[j] += fexp(dr[j] * a[j])

    return loops


def token_update(h: Any, at: Any, dr: Any, ur: Any, yr: Any, Brow: Any, Crow: Any) -> None:
    """:func:`token_lanes` where it applies (float32, contiguous), else the same loops in numba."""
    N, W = h.shape
    for j in range(W):
        yr[j] = 0.0
    for n in range(N):
        for j in range(W):
            hn = fexp(dr[j] * at[n, j]) * h[n, j] + ur[j] * Brow[n]
            h[n, j] = hn
            yr[j] += hn * Crow[n]


@overload(token_update, jit_options={"fastmath": {"contract", "reassoc", "nsz", "arcp"}})
def _token_update_impl(h, at, dr, ur, yr, Brow, Crow):  # type: ignore[no-untyped-def]
    shapes = ((h, 2), (at, 2), (dr, 1), (ur, 1), (yr, 1), (Brow, 1), (Crow, 1))
    if all(_is_f32_c(t, nd) for t, nd in shapes):

        def vec(h, at, dr, ur, yr, Brow, Crow):  # type: ignore[no-untyped-def]
            token_lanes(h, at, dr, ur, yr, Brow, Crow)

        return vec

    def loops(h, at, dr, ur, yr, Brow, Crow):  # type: ignore[no-untyped-def]
        N, W = h.shape
        for j in range(W):
            yr[j] = 0.0
        for n in range(N):
            Bn = Brow[n]
            Cn = Crow[n]
            hr = h[n]
            ar = at[n]
            for j in range(W):
                hn = fexp(dr[j] * ar[j]) * hr[j] + ur[j] * Bn
                hr[j] = hn
                yr[j] += hn * Cn

    return loops


@intrinsic
def transpose16(typingctx, src, r0, c0, dst, k0, j0):  # type: ignore[no-untyped-def]
    """``dst[k0 + i, j0 + c] = src[r0 + c, c0 + i]`` for ``i, c < 16`` (float32, 2-D, C order).

    16 vector loads, four rounds of interleaving shuffles (the perfect
    shuffle: row ``2i`` takes the low halves of rows ``i`` and ``i + 8``
    interleaved, row ``2i + 1`` the high halves), 16 vector stores.
    """
    if not all(
        isinstance(t, types.Array) and t.dtype == types.float32 and t.ndim == 2
        and t.layout == "C" for t in (src, dst)
    ) or not all(isinstance(t, types.Integer) for t in (r0, c0, k0, j0)):  # fmt: skip
        return None
    sig = types.void(src, r0, c0, dst, k0, j0)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        sa = context.make_array(signature.args[0])(context, builder, args[0])
        da = context.make_array(signature.args[3])(context, builder, args[3])
        i64 = ir.IntType(64)
        i32 = ir.IntType(32)
        i8p = ir.IntType(8).as_pointer()
        vt = ir.VectorType(ir.FloatType(), VL)
        vp = vt.as_pointer()
        r0v, c0v, k0v, j0v = (context.cast(builder, args[i], signature.args[i], types.int64)
                              for i in (1, 2, 4, 5))  # fmt: skip
        s0, s1 = cgutils.unpack_tuple(builder, sa.strides, 2)
        d0, d1 = cgutils.unpack_tuple(builder, da.strides, 2)

        def row_ptr(arr: Any, st0: ir.Value, st1: ir.Value, r: ir.Value, c: ir.Value) -> ir.Value:
            off = builder.add(builder.mul(r, st0), builder.mul(c, st1))
            return builder.bitcast(builder.gep(builder.bitcast(arr.data, i8p), [off]), vp)

        rows = [
            builder.load(row_ptr(sa, s0, s1, builder.add(r0v, ir.Constant(i64, c)), c0v), align=4)
            for c in range(VL)
        ]
        half = VL // 2
        lo = ir.Constant(ir.VectorType(i32, VL), [x for i in range(half) for x in (i, VL + i)])
        hi = ir.Constant(ir.VectorType(i32, VL),
                         [x for i in range(half, VL) for x in (i, VL + i)])  # fmt: skip
        for _ in range(VL.bit_length() - 1):  # log2(VL) rounds of the perfect shuffle
            new = []
            for i in range(half):
                new.append(builder.shuffle_vector(rows[i], rows[i + half], lo))
                new.append(builder.shuffle_vector(rows[i], rows[i + half], hi))
            rows = new
        for i in range(VL):
            builder.store(rows[i], row_ptr(da, d0, d1, builder.add(k0v, ir.Constant(i64, i)), j0v),
                          align=4)  # fmt: skip
        return context.get_dummy_value()

    return sig, codegen


def transpose_block(src: Any, r0: int, c0: int, dst: Any, k0: int, j0: int) -> None:
    """``dst[k0 + i, j0 + c] = src[r0 + c, c0 + i]`` for ``i, c < VL``: :func:`transpose16`
    in float32, else element by element."""
    for c in range(VL):
        for i in range(VL):
            dst[k0 + i, j0 + c] = src[r0 + c, c0 + i]


@overload(transpose_block)
def _transpose_block_impl(src, r0, c0, dst, k0, j0):  # type: ignore[no-untyped-def]
    if all(_is_f32_c(t, 2) for t in (src, dst)):

        def vec(src, r0, c0, dst, k0, j0):  # type: ignore[no-untyped-def]
            transpose16(src, r0, c0, dst, k0, j0)

        return vec

    def loops(src, r0, c0, dst, k0, j0):  # type: ignore[no-untyped-def]
        for c in range(VL):
            for i in range(VL):
                dst[k0 + i, j0 + c] = src[r0 + c, c0 + i]

    return loops


def _prefetcher(write: int) -> Any:
    @intrinsic
    def prefetch(typingctx, arr, r, c):  # type: ignore[no-untyped-def]
        if not (isinstance(arr, types.Array) and arr.ndim == 2) or not all(
            isinstance(t, types.Integer) for t in (r, c)
        ):
            return None
        sig = types.void(arr, r, c)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            a = context.make_array(signature.args[0])(context, builder, args[0])
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            rv, cv = (context.cast(builder, args[i], signature.args[i], types.int64)
                      for i in (1, 2))  # fmt: skip
            s0, s1 = cgutils.unpack_tuple(builder, a.strides, 2)
            off = builder.add(builder.mul(rv, s0), builder.mul(cv, s1))
            ptr = builder.gep(builder.bitcast(a.data, i8p), [off])
            name = "llvm.prefetch.p0" if ptr.type.is_opaque else "llvm.prefetch.p0i8"
            fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, name)
            # read or write, keep in all levels, data cache
            builder.call(fn, [ptr, ir.Constant(i32, write), ir.Constant(i32, 3),
                              ir.Constant(i32, 1)])  # fmt: skip
            return context.get_dummy_value()

        return sig, codegen

    return prefetch


#: ``prefetch(arr, r, c)``: ask for the cache line of ``arr[r, c]`` (2-D, any dtype)
#: ahead of its use, to read it; no effect on results.
prefetch = _prefetcher(0)
#: The same, for a line about to be written.
prefetch_w = _prefetcher(1)
