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
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from . import _exp as E
from ._compute import FASTMATH
from ._exp import fexp

#: Channels per LLVM vector; the lane width ``W`` must be a multiple of it.
VL = 16


def _splat(vt: ir.VectorType, value: Any) -> ir.Constant:
    return ir.Constant(vt, [ir.Constant(vt.element, value)] * VL)


def _vptr(builder: ir.IRBuilder, ptr: ir.Value, idx: ir.Value, vp: ir.PointerType) -> ir.Value:
    """``ptr + idx`` as a pointer to a vector of ``VL`` lanes."""
    return builder.bitcast(builder.gep(ptr, [idx]), vp)


def _bcast(builder: ir.IRBuilder, ptr: ir.Value, idx: ir.Value, vt: ir.VectorType) -> ir.Value:
    """``ptr[idx]`` in every lane of a ``vt`` vector."""
    i32 = ir.IntType(32)
    v = builder.insert_element(
        ir.Constant(vt, ir.Undefined), builder.load(builder.gep(ptr, [idx])), ir.Constant(i32, 0)
    )
    return builder.shuffle_vector(
        v, ir.Constant(vt, ir.Undefined), _splat(ir.VectorType(i32, VL), 0)
    )


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
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt] * 3),
                                             f"llvm.fmuladd.v{VL}f32")  # fmt: skip
        yacc = cgutils.alloca_once(builder, vt)

        def vptr(ptr: ir.Value, idx: ir.Value) -> ir.Value:
            return _vptr(builder, ptr, idx, vp)

        def bcast(ptr: ir.Value, idx: ir.Value) -> ir.Value:
            return _bcast(builder, ptr, idx, vt)

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


@overload(
    exp_sum_update,
    inline="always",
    jit_options={"fastmath": {"contract", "reassoc", "nsz", "arcp"}},
)
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


@overload(
    token_update, inline="always", jit_options={"fastmath": {"contract", "reassoc", "nsz", "arcp"}}
)
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


def _transpose_regs(builder: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The transpose of ``VL`` vectors of ``VL`` lanes (element ``[c][i]`` -> ``[i][c]``)."""
    i32 = ir.IntType(32)
    half = VL // 2
    lo = ir.Constant(ir.VectorType(i32, VL), [x for i in range(half) for x in (i, VL + i)])
    hi = ir.Constant(ir.VectorType(i32, VL), [x for i in range(half, VL) for x in (i, VL + i)])
    for _ in range(VL.bit_length() - 1):  # log2(VL) rounds of the perfect shuffle
        new = []
        for i in range(half):
            new.append(builder.shuffle_vector(rows[i], rows[i + half], lo))
            new.append(builder.shuffle_vector(rows[i], rows[i + half], hi))
        rows = new
    return rows


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
        rows = _transpose_regs(builder, rows)
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


@overload(transpose_block, inline="always")
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


@intrinsic
def token_io(typingctx, h, at, dsrc, usrc, osrc, zsrc, r, c, bias, Dv, e0, Brow, Crow,
             scale_b, finish, has_z):  # type: ignore[no-untyped-def]  # fmt: skip
    """One token for ``W`` channels, reading and writing rows in place (float32, C order).

    With ``j < W``, ``dt = dsrc[r, c + j] + bias[e0 + j]``, ``uj = usrc[r, c + j]`` and
    ``du = dt uj`` (``scale_b``) or ``uj``, the update of :func:`token_lanes`; then
    ``osrc[r, c + j]`` is ``y`` or, with ``finish``, ``y + Dv[e0 + j] uj``, times
    ``silu(zsrc[r, c + j])`` when ``has_z`` -- the operations of the numba loops
    of ``forward_lanes``, without their tile buffers.
    """
    arrays2 = (h, at, dsrc, usrc, osrc, zsrc)
    if not all(_is_f32_c(t, 2) for t in arrays2) or not all(
        _is_f32_c(t, 1) for t in (bias, Dv, Brow, Crow)
    ) or not all(isinstance(t, types.Integer) for t in (r, c, e0)) or not all(
        isinstance(t, types.Boolean) for t in (scale_b, finish, has_z)
    ):  # fmt: skip
        return None
    sig = types.void(h, at, dsrc, usrc, osrc, zsrc, r, c, bias, Dv, e0, Brow, Crow, scale_b,
                     finish, has_z)  # fmt: skip

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        st = signature.args
        arr = {i: context.make_array(st[i])(context, builder, args[i])
               for i in (0, 1, 2, 3, 4, 5, 8, 9, 11, 12)}  # fmt: skip
        rv, cv, ev = (context.cast(builder, args[i], st[i], types.int64) for i in (6, 7, 10))
        sb, fin, hz = args[13], args[14], args[15]
        N, W = cgutils.unpack_tuple(builder, arr[0].shape, 2)
        f32 = ir.FloatType()
        vt = ir.VectorType(f32, VL)
        vp = vt.as_pointer()
        i64 = ir.IntType(64)
        i8p = ir.IntType(8).as_pointer()
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt] * 3),
                                             f"llvm.fmuladd.v{VL}f32")  # fmt: skip
        yacc = cgutils.alloca_once(builder, vt)
        ph, pa, pB, pC = (arr[i].data for i in (0, 1, 11, 12))

        def row(i: int) -> ir.Value:  # &src[r, c] as float*
            s0 = cgutils.unpack_tuple(builder, arr[i].strides, 2)[0]
            p = builder.gep(builder.bitcast(arr[i].data, i8p), [builder.mul(rv, s0)])
            return builder.gep(builder.bitcast(p, f32.as_pointer()), [cv])

        pd, pu, po, pz = (row(i) for i in (2, 3, 4, 5))
        pbias = builder.gep(arr[8].data, [ev])
        pD = builder.gep(arr[9].data, [ev])

        def vptr(ptr: ir.Value, idx: ir.Value) -> ir.Value:
            return _vptr(builder, ptr, idx, vp)

        def bcast(ptr: ir.Value, idx: ir.Value) -> ir.Value:
            return _bcast(builder, ptr, idx, vt)

        def add(a: ir.Value, b: ir.Value) -> ir.Value:
            return builder.fadd(a, b, flags=("contract",))

        def mul(a: ir.Value, b: ir.Value) -> ir.Value:
            return builder.fmul(a, b, flags=("contract",))

        nv = builder.udiv(W, ir.Constant(i64, VL))
        with cgutils.for_range(builder, nv) as lv:
            j = builder.mul(lv.index, ir.Constant(i64, VL))
            d = add(builder.load(vptr(pd, j), align=4), builder.load(vptr(pbias, j), align=4))
            uj = builder.load(vptr(pu, j), align=4)
            du = builder.select(sb, mul(d, uj), uj)
            builder.store(_splat(vt, 0.0), yacc)
            with cgutils.for_range(builder, N) as ln:
                off = builder.add(builder.mul(ln.index, W), j)
                a = builder.load(vptr(pa, off), align=4)
                e = _vexp(builder, mul(d, a), vt)
                hq = vptr(ph, off)
                ub = mul(du, bcast(pB, ln.index))
                hn = builder.call(fma, [e, builder.load(hq, align=4), ub])
                builder.store(hn, hq, align=4)
                y = builder.call(fma, [hn, bcast(pC, ln.index), builder.load(yacc)])
                builder.store(y, yacc)
            y = builder.load(yacc)
            with builder.if_then(fin):
                o = add(y, mul(builder.load(vptr(pD, j), align=4), uj))
                builder.store(o, yacc)
                with builder.if_then(hz):
                    zt = builder.load(vptr(pz, j), align=4)
                    one = _splat(vt, 1.0)
                    sg = builder.fdiv(zt, add(one, _vexp(builder, builder.fneg(zt), vt)),
                                      flags=("contract", "arcp"))  # fmt: skip
                    builder.store(mul(o, sg), yacc)
            builder.store(builder.load(yacc), vptr(po, j), align=4)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, fastmath=FASTMATH)
def _token_io_loops(h, at, dsrc, usrc, osrc, zsrc, r, c, bias, Dv, e0, Brow, Crow, scale_b,
                    finish, has_z):  # type: ignore[no-untyped-def]  # fmt: skip
    # a function of its own, called (not inlined) from the overload below:
    # numba's SSA check warns about the branches when they are inlined
    N, W = h.shape
    for j in range(W):
        dt = dsrc[r, c + j] + bias[e0 + j]
        uj = usrc[r, c + j]
        du = dt * uj if scale_b else uj
        y = 0.0
        for n in range(N):
            hn = fexp(dt * at[n, j]) * h[n, j] + du * Brow[n]
            h[n, j] = hn
            y += hn * Crow[n]
        o = y + Dv[e0 + j] * uj if finish else y
        if finish and has_z:
            zt = zsrc[r, c + j]
            o = o * (zt / (1.0 + fexp(-zt)))
        osrc[r, c + j] = o


@njit(cache=True, fastmath=FASTMATH)
def _finish_loops(yb, k0, j0, u2, z2, o2, d0, t0, Dv, has_z):  # type: ignore[no-untyped-def]
    for c in range(VL):
        ch = d0 + j0 + c
        for i in range(VL):
            o = yb[k0 + i, j0 + c] + Dv[ch] * u2[ch, t0 + k0 + i]
            if has_z:
                zt = z2[ch, t0 + k0 + i]
                o = o * (zt / (1.0 + fexp(-zt)))
            o2[ch, t0 + k0 + i] = o


def token_io_update(h: Any, at: Any, dsrc: Any, usrc: Any, osrc: Any, zsrc: Any, r: int,
                    c: int, bias: Any, Dv: Any, e0: int, Brow: Any, Crow: Any, scale_b: bool,
                    finish: bool, has_z: bool) -> None:  # fmt: skip
    """:func:`token_io` in float32, else the same in numba loops (one channel at a time)."""
    _token_io_loops(h, at, dsrc, usrc, osrc, zsrc, r, c, bias, Dv, e0, Brow, Crow, scale_b,
                    finish, has_z)  # fmt: skip


@overload(
    token_io_update,
    inline="always",
    jit_options={"fastmath": {"contract", "reassoc", "nsz", "arcp"}},
)
def _token_io_update_impl(h, at, dsrc, usrc, osrc, zsrc, r, c, bias, Dv, e0, Brow, Crow,
                          scale_b, finish, has_z):  # type: ignore[no-untyped-def]  # fmt: skip
    if all(_is_f32_c(t, 2) for t in (h, at, dsrc, usrc, osrc, zsrc)) and all(
        _is_f32_c(t, 1) for t in (bias, Dv, Brow, Crow)
    ):

        def vec(h, at, dsrc, usrc, osrc, zsrc, r, c, bias, Dv, e0, Brow, Crow, scale_b,
                finish, has_z):  # type: ignore[no-untyped-def]  # fmt: skip
            token_io(h, at, dsrc, usrc, osrc, zsrc, r, c, bias, Dv, e0, Brow, Crow, scale_b,
                     finish, has_z)  # fmt: skip

        return vec

    def loops(h, at, dsrc, usrc, osrc, zsrc, r, c, bias, Dv, e0, Brow, Crow, scale_b,
              finish, has_z):  # type: ignore[no-untyped-def]  # fmt: skip
        _token_io_loops(h, at, dsrc, usrc, osrc, zsrc, r, c, bias, Dv, e0, Brow, Crow, scale_b,
                        finish, has_z)  # fmt: skip

    return loops


@intrinsic
def finish_block(typingctx, yb, k0, j0, u2, z2, o2, d0, t0, Dv, has_z):  # type: ignore[no-untyped-def]
    """Outputs of a 16 x 16 block in the channel-major layout, from token-major ``y``::

        o2[d0 + j0 + c, t0 + k0 + i] = (yb[k0 + i, j0 + c] + Dv[d0 + j0 + c]
                                         * u2[d0 + j0 + c, t0 + k0 + i]) (* silu(z2[...]))

    for ``i, c < 16`` (float32, C order): ``yb`` transposed in registers, then the
    numba loops' operations on rows of 16 tokens.
    """
    if not all(_is_f32_c(t, 2) for t in (yb, u2, z2, o2)) or not _is_f32_c(Dv, 1) or not all(
        isinstance(t, types.Integer) for t in (k0, j0, d0, t0)
    ) or not isinstance(has_z, types.Boolean):  # fmt: skip
        return None
    sig = types.void(yb, k0, j0, u2, z2, o2, d0, t0, Dv, has_z)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        st = signature.args
        arr = {i: context.make_array(st[i])(context, builder, args[i]) for i in (0, 3, 4, 5, 8)}
        k0v, j0v, d0v, t0v = (context.cast(builder, args[i], st[i], types.int64)
                              for i in (1, 2, 6, 7))  # fmt: skip
        hz = args[9]
        f32 = ir.FloatType()
        vt = ir.VectorType(f32, VL)
        vp = vt.as_pointer()
        i64 = ir.IntType(64)
        i32 = ir.IntType(32)
        i8p = ir.IntType(8).as_pointer()

        def at(i: int, r: ir.Value, c: ir.Value) -> ir.Value:  # &arr[r, c] as <VL x float>*
            s0 = cgutils.unpack_tuple(builder, arr[i].strides, 2)[0]
            p = builder.gep(builder.bitcast(arr[i].data, i8p), [builder.mul(r, s0)])
            return builder.bitcast(builder.gep(builder.bitcast(p, f32.as_pointer()), [c]), vp)

        def add(a: ir.Value, b: ir.Value) -> ir.Value:
            return builder.fadd(a, b, flags=("contract",))

        def mul(a: ir.Value, b: ir.Value) -> ir.Value:
            return builder.fmul(a, b, flags=("contract",))

        rows = [builder.load(at(0, builder.add(k0v, ir.Constant(i64, i)), j0v), align=4)
                for i in range(VL)]  # fmt: skip
        cols = _transpose_regs(builder, rows)  # cols[c][i] = yb[k0 + i, j0 + c]
        tk = builder.add(t0v, k0v)
        one = _splat(vt, 1.0)
        oacc = cgutils.alloca_once(builder, vt)
        for c in range(VL):
            ch = builder.add(builder.add(d0v, j0v), ir.Constant(i64, c))
            dsk = builder.load(builder.gep(arr[8].data, [ch]))
            dv = builder.insert_element(ir.Constant(vt, ir.Undefined), dsk, ir.Constant(i32, 0))
            dv = builder.shuffle_vector(dv, ir.Constant(vt, ir.Undefined),
                                        _splat(ir.VectorType(i32, VL), 0))  # fmt: skip
            uv = builder.load(at(3, ch, tk), align=4)
            o = add(cols[c], mul(dv, uv))
            builder.store(o, oacc)
            with builder.if_then(hz):
                zt = builder.load(at(4, ch, tk), align=4)
                sg = builder.fdiv(zt, add(one, _vexp(builder, builder.fneg(zt), vt)),
                                  flags=("contract", "arcp"))  # fmt: skip
                builder.store(mul(o, sg), oacc)
            builder.store(builder.load(oacc), at(5, ch, tk), align=4)
        return context.get_dummy_value()

    return sig, codegen


def finish_update(yb: Any, k0: int, j0: int, u2: Any, z2: Any, o2: Any, d0: int, t0: int,
                  Dv: Any, has_z: bool) -> None:  # fmt: skip
    """:func:`finish_block` in float32, else the same element by element."""
    for c in range(VL):
        ch = d0 + j0 + c
        for i in range(VL):
            o = yb[k0 + i, j0 + c] + Dv[ch] * u2[ch, t0 + k0 + i]
            if has_z:
                zt = z2[ch, t0 + k0 + i]
                o = o * (zt / (1.0 + fexp(-zt)))
            o2[ch, t0 + k0 + i] = o


@overload(
    finish_update, inline="always", jit_options={"fastmath": {"contract", "reassoc", "nsz", "arcp"}}
)
def _finish_update_impl(yb, k0, j0, u2, z2, o2, d0, t0, Dv, has_z):  # type: ignore[no-untyped-def]
    if all(_is_f32_c(t, 2) for t in (yb, u2, z2, o2)) and _is_f32_c(Dv, 1):

        def vec(yb, k0, j0, u2, z2, o2, d0, t0, Dv, has_z):  # type: ignore[no-untyped-def]
            finish_block(yb, k0, j0, u2, z2, o2, d0, t0, Dv, has_z)

        return vec

    def loops(yb, k0, j0, u2, z2, o2, d0, t0, Dv, has_z):  # type: ignore[no-untyped-def]
        _finish_loops(yb, k0, j0, u2, z2, o2, d0, t0, Dv, has_z)

    return loops
