"""``exp``, ``log``, ``log1p`` and ``softplus`` that vectorize inside numba kernels.

numba 0.68 from PyPI has no SVML, so ``math.exp`` and ``math.log1p`` inside
an ``@njit`` loop are scalar libm calls (about 0.2 G/s per core), and a loop
that calls one is not vectorized at all.  The functions here are plain
arithmetic, bit casts and selects, which LLVM vectorizes for the host (AVX2
and FMA; AVX-512 where present).  Call them from numba code as ``math.exp``
would be called; from Python they are the libm functions.

:func:`fexp`, float32::

    exp(x) = 2^k * exp(r),  k = round(x log2(e)),  r = x - k ln 2

with ``k`` rounded by adding ``1.5 * 2^23 + 127``, whose sum holds
``k + 127`` in its low bits, so that ``2^k`` is those bits shifted left by
23 (no conversion, no clamp: out of range, two selects give 0 or inf);
``ln 2`` split in two (Cody-Waite) so that ``r`` is exact; ``exp(r)`` on
``|r| <= ln(2)/2`` by a degree-6 polynomial (6 FMAs, Horner's rule).
At most 1.5 ulp wherever the result is a normal float32 (tests/test_vmath.py,
against mpmath).  NaN stays NaN, ``-inf`` gives 0, ``+inf`` gives ``inf``;
results below the smallest normal (``x < -87.34``) flush to 0 (absolute
error < 1.2e-38), as on GPUs; above ``x = 88.376`` the result is ``inf``
(``exp`` itself overflows at 88.72).  In a loop on one core of a 2-core
AMD EPYC (``znver2``, AVX2), in cache: 0.44 ns an element with ``one``
(below), 0.55 without (0.66 with the earlier ``floor`` and clamps).

:func:`fexp`, float64: the same reduction with a degree-13 polynomial (the
Taylor series, whose first omitted term is below 5e-18 of the sum) and
``2^k`` applied as two factors, so that the result is right down to the
smallest subnormal and up to the overflow at ``x = 709.78``.  At most 2 ulp.
:func:`fexp_flush` flushes results below the smallest normal to 0, as the
float32 ``fexp`` does, and in float64 takes the float32 method (one scale
factor, no clamp, no conversion): 2 ulp, a third cheaper in a loop.

:func:`flog1p`: ``1 + x = 2^e * m`` with ``m`` in ``[sqrt(1/2), sqrt(2))``
read from the bits of ``u = fl(1 + x)`` (integer adds and a mask: the bits
of ``sqrt(1/2)`` subtracted, the exponent field taken as ``e``, and ``e``
read as a float from the bits of ``2^23 + e + 127``, or ``2^52 + e +
1023``: no select, and no integer conversion, which AVX2 lacks for 64-bit
integers), ``log(m) = 2 atanh(s)`` with ``s = (m - 1) / (m + 1)``
(``|s| <= 0.172``) as an odd series (degree 9 in float32, whose first
omitted term is below 2e-9 of the sum; in float64 degree 15, fitted),
plus ``(x - (u - 1)) / u`` for the rounding of ``u``.
``|x|`` below ``2^-25`` (``2^-54``) returns ``x``, so ``-0``, ``+0`` and
subnormals pass exactly; ``x = -1`` gives ``-inf``, ``x < -1`` NaN, ``+inf``
``inf``, NaN NaN.  At most 2.5 ulp (float32) and 2.5 ulp (float64) on the
test's samples; 2.86 ulp in float32 over 200 000 uniform in [-0.9, 3]
against float64 (as before the shorter series and the bit-trick reduction).

:func:`flog`: the same with ``u = x`` and no rounding term; a subnormal
``x`` is scaled by ``2^24`` (``2^53``) first.  ``+-0`` gives ``-inf``,
``x < 0`` NaN, ``+inf`` ``inf``.  At most 2.5 ulp (float32) and 2 ulp (float64),
subnormal arguments included, on the test's samples; 2.71 ulp in float32
over 200 000 uniform in [0.5, 2] against float64 (as before).
:func:`flog_normal` is the same without the edge cases, for positive normal
finite arguments only (a third cheaper in a loop).  float64 ``fexp``'s
exponent passes through int32: AVX2 converts int32 vectors, not int64 ones.

:func:`fsoftplus`, float32: ``max(x, 0) + log1p(exp(-|x|))``, or ``x`` above
20 (mamba_ssm's threshold); at most 3.2 ulp wherever the result is a normal
float32.  In float64 it is the libm expression: ``flog1p(fexp(x))`` (at
most 3 ulp) was called rather than inlined and ran slower in the scalar
loops that call it (the generic kernels' exclusive float64 ``logaddexp``
scan at 2^20: 85 ms against 54 ms with libm, on one thread of a 2-core AMD
EPYC).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

__all__ = ["fexp", "fexp_flush", "flog", "flog1p", "flog_normal", "fsoftplus"]

_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693359375)  # exact in 9 bits: k * _LN2_HI is exact
_LN2_LO = np.float32(-2.12194440e-4)
# exp(r) on |r| <= ln(2)/2: degree-6 polynomial fitted for least maximum
# relative error (Lawson iterations on Chebyshev nodes), 1.9e-9 before
# rounding the coefficients to float32.
_F_C = tuple(
    np.float32(v)
    for v in (
        1.0,
        1.0,
        0.49999991059303284,
        0.16666419804096222,
        0.04166822507977486,
        0.008374815806746483,
        0.0013836845755577087,
    )
)
_ONE = np.float32(1.0)
_C2, _C3, _C4, _C5, _C6 = _F_C[2:]
# the floor-and-clamp form's (k = floor(x log2(e) + 1/2), clamped to [-127, 128]),
# which the Mamba case study's _lanes.py repeats on LLVM vectors
_HALF = np.float32(0.5)
_KMIN = np.float32(-127.0)
_KMAX = np.float32(128.0)  # 2^128 has the bits of +inf
_BIAS = np.int32(127)
_SHIFTER = np.float32(1.5 * 2**23 + 127)  # round(x) + 127 in the low bits of x + _SHIFTER
_XMIN = np.float32(-87.33654)  # log of the smallest normal float32
_XMAX = np.float32(88.5)  # from 88.3763, k = 128: 2^k has the bits of +inf
_INF = np.float32(np.inf)
_ZERO = np.float32(0.0)
_SHIFT = np.int32(23)


@intrinsic
def _bits_to_f32(typingctx, x):  # type: ignore[no-untyped-def]
    """Reinterpret the low 32 bits of an integer as a float32 (no conversion)."""
    sig = types.float32(x)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        v = args[0]
        if v.type.width != 32:
            v = builder.trunc(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())

    return sig, codegen


@intrinsic
def _bits_to_f64(typingctx, x):  # type: ignore[no-untyped-def]
    """Reinterpret a 64-bit integer as a float64 (no conversion)."""
    sig = types.float64(x)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        v = args[0]
        if v.type.width != 64:
            v = builder.sext(v, ir.IntType(64))
        return builder.bitcast(v, ir.DoubleType())

    return sig, codegen


@intrinsic
def _f32_bits(typingctx, x):  # type: ignore[no-untyped-def]
    """The bits of a float32 as an int32."""
    sig = types.int32(types.float32)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


@intrinsic
def _f64_bits(typingctx, x):  # type: ignore[no-untyped-def]
    """The bits of a float64 as an int64."""
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


@intrinsic
def _floor_f32(typingctx, x):  # type: ignore[no-untyped-def]
    """``llvm.floor.f32``: vectorizes to ``vroundps`` (``math.floor`` returns an int)."""
    sig = types.float32(types.float32)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fn = builder.module.declare_intrinsic("llvm.floor", [ir.FloatType()])
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _floor_f64(typingctx, x):  # type: ignore[no-untyped-def]
    """``llvm.floor.f64``: vectorizes to ``vroundpd``."""
    sig = types.float64(types.float64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fn = builder.module.declare_intrinsic("llvm.floor", [ir.DoubleType()])
        return builder.call(fn, args)

    return sig, codegen


def fexp(x: float, one: float = 1.0) -> float:
    """``exp(x)``; in numba code, vectorizable (see the module docstring).

    ``one``, 1 of ``x``'s dtype passed as a run-time value (a kernel's
    argument), keeps the constants in registers in a loop: they are scaled
    by it, once, outside the loop.  Without it LLVM reloads each from
    memory in each iteration (an AVX2 broadcast, which no arithmetic
    instruction takes as its operand): float32 ``exp`` in a loop costs a
    fifth more.  The result is the same.
    """
    return math.exp(x)


def _scaled(c: tuple[float, ...], one: float) -> tuple[float, ...]:
    """``c``, each element times ``one``."""
    return tuple(v * one for v in c)


@overload(_scaled, jit_options={"fastmath": {"contract"}})
def _scaled_impl(c, one):  # type: ignore[no-untyped-def]
    n = len(c)
    ns: dict[str, object] = {}
    body = ", ".join(f"c[{i}] * one" for i in range(n))
    exec(f"def impl(c, one):\n    return ({body},)", ns)
    return ns["impl"]


# float64 exp: Cody-Waite ln 2 (the high part has 32 bits, k * hi exact for |k| < 2^20)
_D_LOG2E = 1.4426950408889634
_D_LN2_HI = 0.6931471803691238
_D_LN2_LO = 1.9082149292705877e-10
_D_C = tuple(1.0 / math.factorial(i) for i in range(14))
_D_XMAX = 709.782712893384  # log of the largest float64
_D_XMIN = -745.1332191019412  # below: rounds to 0


def _exp_shifted(x, shift, log2e, ln2hi, ln2lo, c):  # type: ignore[no-untyped-def]
    """``(p, t)``: ``exp(x) = p * 2^k`` with ``k`` in the low bits of ``t``."""
    raise NotImplementedError  # numba only


@overload(_exp_shifted, jit_options={"fastmath": {"contract"}})
def _exp_shifted_impl(x, shift, log2e, ln2hi, ln2lo, c):  # type: ignore[no-untyped-def]
    def impl(x, shift, log2e, ln2hi, ln2lo, c):  # type: ignore[no-untyped-def]
        # k = round(x log2(e)) by the addition of 1.5 2^m (m the mantissa's
        # width): the sum's low bits hold k + bias, and t - shift is k exactly
        t = x * log2e + shift
        kf = t - shift
        r = x - kf * ln2hi
        r = r - kf * ln2lo
        return _horner(r, c), t

    return impl


@overload(fexp, jit_options={"fastmath": {"contract"}})
def _fexp_impl(x, one=1.0):  # type: ignore[no-untyped-def]
    if isinstance(x, types.Float) and x.bitwidth == 32:
        k = (_SHIFTER, _LOG2E, _LN2_HI, _LN2_LO, _XMIN, _XMAX, _INF) + _F_C
        one_ = _ONE

        def impl32(x, one=one_):  # type: ignore[no-untyped-def]
            ks = _scaled(k, np.float32(one))
            # above 88.5, x as 88.5 (one vminps; NaN fails the test and stays):
            # k = 128 there, and 2^k has the bits of +inf
            xc = ks[5] if x > ks[5] else x
            p, t = _exp_shifted(xc, ks[0], ks[1], ks[2], ks[3], ks[7:])
            # 2^k from the bits of t: (k + 127) << 23, the rest shifted out.
            # A NaN x gives a NaN p; below _XMIN the select gives 0.
            res = p * _bits_to_f32(_f32_bits(t) << _SHIFT)
            return _ZERO if x < ks[4] else res  # also exp(-inf) = 0

        return impl32
    if isinstance(x, types.Float) and x.bitwidth == 64:
        c = _D_C

        def impl64(x, one=1.0):  # type: ignore[no-untyped-def]
            xc = -746.0 if x < -746.0 else x  # NaN fails both tests and stays
            xc = 710.0 if xc > 710.0 else xc
            kf = _floor_f64(xc * _D_LOG2E + 0.5)
            r = (xc - kf * _D_LN2_HI) - kf * _D_LN2_LO
            p = _poly(r, c)  # Estrin's scheme (see _estrin)
            # through int32: AVX2 converts float64 to int32 in vectors, not to int64
            k = np.int32(kf)
            k1 = k >> np.int32(1)  # 2^k = 2^k1 * 2^(k - k1), each factor a normal float64
            s1 = _bits_to_f64(np.int64(k1 + np.int32(1023)) << 52)
            s2 = _bits_to_f64(np.int64(k - k1 + np.int32(1023)) << 52)
            res = (p * s1) * s2
            res = 0.0 if x < _D_XMIN else res
            return np.inf if x > _D_XMAX else res

        return impl64

    def impl_other(x, one=1.0):  # type: ignore[no-untyped-def]
        return math.exp(x)

    return impl_other


def fexp_flush(x: float, one: float = 1.0) -> float:
    """``exp(x)`` with results below the smallest normal flushed to 0; in numba
    code, vectorizable.  float32: :func:`fexp` (which flushes them too).
    float64: one scale factor instead of two, no clamps and no integer
    conversion (the float32 method; a fitted polynomial of degree 11), a
    third cheaper in a loop than :func:`fexp`; ``inf`` from ``x = 709.4361`` (``k`` reaches 1024;
    ``exp`` itself overflows at 709.78).
    ``one``: as :func:`fexp`'s."""
    r = math.exp(x) if not x >= 709.4361393 else math.inf
    return r if r >= 2.2250738585072014e-308 else 0.0


_D_SHIFTER = 1.5 * 2.0**52 + 1023  # round(x) + 1023 in the low bits of x + _D_SHIFTER
_D_XMIN_N = -708.3964185322641  # log of the smallest normal float64
_D_XMAX_N = 709.5  # k = 1024 from 709.4361: 2^k has the bits of +inf
# exp(r) on |r| <= ln(2)/2: degree 11 interpolated at 12 Chebyshev nodes in
# 200-bit arithmetic (mpmath), relative error 1.6e-17 with these float64
# coefficients (the Taylor series needs degree 13)
_D_C_FLUSH = (
    1.0,
    1.0,
    0.5000000000000019,
    0.1666666666666668,
    0.04166666666648795,
    0.008333333333319589,
    0.0013888888952352863,
    0.00019841269890076403,
    2.4801485441561313e-05,
    2.755724088722987e-06,
    2.763265472252779e-07,
    2.5110049204818658e-08,
)


@overload(fexp_flush, jit_options={"fastmath": {"contract"}})
def _fexp_flush_impl(x, one=1.0):  # type: ignore[no-untyped-def]
    if isinstance(x, types.Float) and x.bitwidth == 32:

        def impl32(x, one=_ONE):  # type: ignore[no-untyped-def]
            return fexp(x, one)

        return impl32
    if isinstance(x, types.Float) and x.bitwidth == 64:
        k = (_D_SHIFTER, _D_LOG2E, _D_LN2_HI, _D_LN2_LO, _D_XMIN_N, _D_XMAX_N) + _D_C_FLUSH

        def impl64(x, one=1.0):  # type: ignore[no-untyped-def]
            ks = _scaled(k, np.float64(one))
            xc = ks[5] if x > ks[5] else x  # k = 1024 there: 2^k has the bits of inf
            t = xc * ks[1] + ks[0]
            kf = t - ks[0]
            r = (xc - kf * ks[2]) - kf * ks[3]
            p = _poly(r, ks[6:])  # Estrin's scheme
            res = p * _bits_to_f64(_f64_bits(t) << 52)
            return 0.0 if x < ks[4] else res  # also exp(-inf) = 0; NaN passes

        return impl64
    return None


def flog1p(x: float) -> float:
    """``log(1 + x)``; in numba code, vectorizable (see the module docstring)."""
    return math.log1p(x)


def _poly(t: float, a: tuple[float, ...]) -> float:
    """``a[0] + a[1] t + a[2] t^2 + ...``."""
    return sum(c * t**i for i, c in enumerate(a))


def _estrin(a: Sequence[str], t: str) -> list[str]:
    """Lines that leave ``a[0] + a[1] t + ...`` in ``p0`` by Estrin's scheme: pairs
    ``a[2i] + a[2i+1] t``, then pairs of those with ``t^2``, and so on, so that
    the chain of dependent FMAs is about ``log2`` of the degree long instead of
    the degree (a degree-13 Horner chain held float64 ``fexp`` to its latency)."""
    lines: list[str] = []
    terms, power, level = list(a), t, 0
    while len(terms) > 1:
        nxt = []
        for i in range(0, len(terms) - 1, 2):
            name = f"p{i // 2}_{level}"
            lines.append(f"    {name} = {terms[i + 1]} * {power} + {terms[i]}")
            nxt.append(name)
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
        if len(terms) > 1:
            lines.append(f"    {power}{power} = {power} * {power}")
            power = f"{power}{power}"
        level += 1
    lines.append(f"    p0 = {terms[0]}")
    return lines


@overload(_poly, jit_options={"fastmath": {"contract"}})
def _poly_impl(t, a):  # type: ignore[no-untyped-def]
    # unrolled by a generated body: a loop over a tuple index would stay a loop
    lines = ["def impl(t, a):"] + _estrin([f"a[{i}]" for i in range(len(a))], "t")
    lines += ["    return p0"]
    ns: dict[str, object] = {}
    exec("\n".join(lines), ns)
    return ns["impl"]


def _horner(t: float, a: tuple[float, ...]) -> float:
    """``a[0] + a[1] t + ...`` by Horner's rule (float32 ``exp``: more accurate than
    Estrin's scheme, 1.5 ulp against 1.7, and a loop hides its latency)."""
    return sum(c * t**i for i, c in enumerate(a))


@overload(_horner, jit_options={"fastmath": {"contract"}})
def _horner_impl(t, a):  # type: ignore[no-untyped-def]
    body = f"a[{len(a) - 1}]"
    for i in range(len(a) - 2, -1, -1):
        body = f"({body}) * t + a[{i}]"
    ns: dict[str, object] = {}
    exec(f"def impl(t, a):\n    return {body}", ns)
    return ns["impl"]


def _odd_series(s2: float, q: tuple[float, ...]) -> float:
    """``1 + q[0] s2 + q[1] s2^2 + ...``."""
    return 1.0 + s2 * _poly(s2, q)


@overload(_odd_series, jit_options={"fastmath": {"contract"}})
def _odd_series_impl(s2, q):  # type: ignore[no-untyped-def]
    one = np.dtype(str(s2)).type(1.0)

    def impl(s2, q):  # type: ignore[no-untyped-def]
        return s2 * _poly(s2, q) + one

    return impl


# float64: atanh(s) / s = 1 + z Q(z), z = s^2 <= 0.02944, with Q of degree 6
# interpolated at 7 Chebyshev nodes in 200-bit arithmetic (mpmath): relative
# error below 5e-18 (the Taylor series needs 10 terms for 1e-16)
_D_LOG_Q = (
    0.3333333333333335,
    0.19999999999949752,
    0.14285714312987743,
    0.1111110556739754,
    0.09091444562630861,
    0.07665860800278021,
    0.07308224842521703,
)


def _log_series(bits: int) -> tuple[float, ...]:
    """``Q``'s coefficients in ``atanh(s) / s = 1 + s^2 Q(s^2)``: float32 the
    Taylor series' 1/3, 1/5, 1/7, 1/9; float64 :data:`_D_LOG_Q`."""
    return tuple(1.0 / (2 * i + 1) for i in range(1, 5)) if bits == 32 else _D_LOG_Q


def flog(x: float) -> float:
    """``log(x)``; in numba code, vectorizable (see the module docstring)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.log(np.float64(x)))


def _log_builder(x, plus_one: bool | None):  # type: ignore[no-untyped-def]
    """The numba implementation of :func:`flog1p` (``plus_one``), :func:`flog`, or
    (``None``) of :func:`flog_normal`."""
    if not isinstance(x, types.Float) or x.bitwidth not in (32, 64):
        return None
    f32 = x.bitwidth == 32
    ft = np.float32 if f32 else np.float64
    it = np.int32 if f32 else np.int64
    q = tuple(ft(v) for v in _log_series(x.bitwidth))
    ut = np.uint32 if f32 else np.uint64
    mant = 23 if f32 else 52
    bias = 127 if f32 else 1023
    onebits = it(bias << mant)
    himask = it(-(1 << mant))  # the sign and exponent bits
    # u / 2^e lands in [sqrt(1/2), sqrt(2)) where e counts from sqrt(1/2)'s bits
    off = it(int(np.array(math.sqrt(0.5), ft).view(it)))
    shift = ut(mant)
    magic = ut(int(np.array(2.0**mant, ft).view(it)))  # 2^mant + q has q in its low bits
    magic_f = ft(2.0**mant + bias)
    one, two = ft(1.0), ft(2.0)
    small = ft(2.0**-25 if f32 else 2.0**-54)
    ln2hi = ft(0.693359375) if f32 else ft(_D_LN2_HI)
    ln2lo = ft(-2.12194440e-4) if f32 else ft(_D_LN2_LO)
    inf, nan, zero = ft(np.inf), ft(np.nan), ft(0.0)
    tiny = ft(np.finfo(ft).tiny)
    up = ft(2.0 ** (mant + 1))  # scales a subnormal argument of flog to a normal one
    upk = ft(mant + 1)
    bits_of = _f32_bits if f32 else _f64_bits
    of_bits = _bits_to_f32 if f32 else _bits_to_f64
    kc = (one, two, magic_f, ln2hi, ln2lo) + q
    ikc = (it(onebits - off), himask, onebits, magic)
    sqrth, pow_mant = ft(math.sqrt(0.5)), ft(2.0**mant)

    @numba.njit(inline="always", fastmath={"contract"}, error_model="numpy")
    def int_consts(one):  # type: ignore[no-untyped-def]
        # ikc from the bits of a run-time 1, which LLVM cannot fold
        ob = bits_of(one)
        low = it(ob & -ob)  # the exponent's lowest bit
        return (it(ob - bits_of(sqrth * one)), it(-low), ob, ut(bits_of(pow_mant * one)))

    @numba.njit(inline="always", fastmath={"contract"}, error_model="numpy")
    def log_parts(u, e0, k, ik):  # type: ignore[no-untyped-def]
        # k: the constants kc (scaled by a run-time 1 or not; see fexp's ``one``).
        # u = 2^e * m, m in [sqrt(1/2), sqrt(2)); returns (e - e0, log(m)).  Integer
        # subtractions, masks and a shift only: no compare, no select, and no
        # integer-to-float conversion (AVX2 has none for 64-bit integers): e is
        # read as a float from the bits 2^mant + (e + bias).
        # ik: onebits - off, himask, onebits, magic (from a run-time 1 or not)
        b = bits_of(u)
        tb = b + ik[0]  # (e + bias) << mant, plus m's fraction below
        m = of_bits(b - (tb & ik[1]) + ik[2])
        ef = of_bits((ut(tb) >> shift) | ik[3]) - (k[2] + e0)
        s = (m - k[0]) / (m + k[0])
        return ef, (k[1] * s) * _odd_series(s * s, k[5:])

    def impl1p(x):  # type: ignore[no-untyped-def]
        u = one + x
        # u = 1 + x rounded: log1p(x) = log(u) + (x - (u - 1)) / u to first order
        ef, lm = log_parts(u, zero, kc, ikc)
        r = ef * ln2hi + (lm + ((x - (u - one)) / u + ef * ln2lo))
        r = x if abs(x) < small else r
        r = inf if x == inf else r
        r = -inf if x == -one else r
        r = nan if x < -one else r
        return x if x != x else r

    def impl(x):  # type: ignore[no-untyped-def]
        sub = x < tiny
        ef, lm = log_parts(x * up if sub else x, upk if sub else zero, kc, ikc)
        r = ef * ln2hi + (lm + ef * ln2lo)
        r = inf if x == inf else r
        r = -inf if x == zero else r
        r = nan if x < zero else r
        return x if x != x else r

    def impl_normal(x, one=one):  # type: ignore[no-untyped-def]
        k = _scaled(kc, ft(one))
        ef, lm = log_parts(x, zero, k, int_consts(ft(one)))
        return ef * k[3] + (lm + ef * k[4])

    if plus_one is None:
        return impl_normal
    return impl1p if plus_one else impl


@overload(flog1p, jit_options={"fastmath": {"contract"}, "error_model": "numpy"})
def _flog1p_impl(x):  # type: ignore[no-untyped-def]
    return _log_builder(x, True)


@overload(flog, jit_options={"fastmath": {"contract"}, "error_model": "numpy"})
def _flog_impl(x):  # type: ignore[no-untyped-def]
    return _log_builder(x, False)


def flog_normal(x: float, one: float = 1.0) -> float:
    """``log(x)`` for a positive, finite, normal ``x`` only: :func:`flog` without its
    edge cases (for 0, a subnormal, a negative, inf or NaN the result is meaningless).
    ``one``: as :func:`fexp`'s."""
    return math.log(x)


@overload(flog_normal, jit_options={"fastmath": {"contract"}, "error_model": "numpy"})
def _flog_normal_impl(x, one=1.0):  # type: ignore[no-untyped-def]
    return _log_builder(x, None)


# log1p(t) = 2 atanh(s), s = t / (2 + t), for t in [0, 1] (s <= 1/3): the
# series 2 (s + s^3/3 + ... + s^13/13); its first omitted term is below
# 5e-9 of the sum.
_L3 = np.float32(1.0 / 3.0)
_L5 = np.float32(1.0 / 5.0)
_L7 = np.float32(1.0 / 7.0)
_L9 = np.float32(1.0 / 9.0)
_L11 = np.float32(1.0 / 11.0)
_L13 = np.float32(1.0 / 13.0)
_TWO = np.float32(2.0)
_SP_MAX = np.float32(20.0)  # mamba_ssm's threshold: softplus(x) = x above it


def fsoftplus(x: float) -> float:
    """``log1p(exp(x))``, or ``x`` above 20 (mamba_ssm's threshold); in numba
    code, vectorizable for float32 (:func:`fexp` and a polynomial log1p)."""
    return x if x > 20.0 else math.log1p(math.exp(x))


@overload(fsoftplus, jit_options={"fastmath": {"contract"}, "error_model": "numpy"})
def _fsoftplus_impl(x):  # type: ignore[no-untyped-def]
    if isinstance(x, types.Float) and x.bitwidth == 32:

        def impl32(x):  # type: ignore[no-untyped-def]
            # softplus(x) = max(x, 0) + log1p(exp(-|x|)), exp(-|x|) in [0, 1]
            ax = x if x > _ZERO else -x
            t = fexp(-ax)
            s = t / (_TWO + t)
            s2 = s * s
            p = _L13 * s2 + _L11
            p = p * s2 + _L9
            p = p * s2 + _L7
            p = p * s2 + _L5
            p = p * s2 + _L3
            p = p * s2 + _ONE
            r = (x if x > _ZERO else _ZERO) + _TWO * s * p
            return x if x > _SP_MAX else r  # NaN: the comparison is false, r is NaN

        return impl32

    def impl64(x):  # type: ignore[no-untyped-def]
        return x if x > 20.0 else math.log1p(math.exp(x))

    return impl64
