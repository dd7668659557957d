"""numba kernels for pair sums, generated per user kernel.

A pair kernel ``f(xi, xj, *args)`` is a plain Python function (or an
``@njit`` dispatcher) returning a float or a tuple of ``k`` floats.  Its body
is compiled once per process for the CPU here (``njit``) and for CUDA in
:mod:`._cuda` (``cuda.jit(device=True)``): the same source, two targets.

The drivers are generated as Python source with ``k``, the signs and the
number of extra arguments unrolled, and loaded through
:func:`propopt._jit.load_module`: a kernel importable by name (a module-level
function) gets numba's on-disk cache; a lambda or closure is compiled in
memory.

Compilation
-----------
``error_model='numpy'`` (a division by zero gives inf, as in NumPy, instead of
raising inside a parallel loop) and ``fastmath={'contract'}`` only: products
and sums fuse into FMAs (one rounding instead of two), nothing is reordered.
Measured single-threaded at N = 6,000 (Plummer kernel, float64): the halved
loop 20% faster, the full loop 8%, halving ratio 1.46 -> 1.65.  Rejected:
``fastmath={'reassoc'}``, which vectorizes the full loop's reductions (2.5x
faster) but not the halved loop's scatter of credits, so that the full loop
would win (0.145 s against 0.205 s at N = 8,000).

The source's credit is written ``bj = bj + (-w_a) v + (-w_b) u`` for an
antisymmetric component (the negated weights computed once per pair of
targets): two FMAs per component and pair of targets instead of a product,
an FMA and a sum; 8-10% off the halved loop (ratio 1.44-1.58 -> 1.64-1.73
single-threaded at N = 8,000, side by side).

Drivers
-------
``halved(X, w, args, tile, nthreads, acc)``
    Each unordered pair once.  The upper triangle of ``tile x tile`` blocks,
    ``(I, J)`` with ``I <= J``, is listed row by row and cut into
    ``nthreads`` contiguous runs of equal length (every off-diagonal block
    holds ``tile^2`` pairs, so the runs hold equal work); run ``t`` adds
    into its own accumulator ``acc[t]`` (no two threads write one row), and
    the caller sums the ``nthreads`` accumulators.
``full(T, X, w, args, tile, self_pairs, out)``
    Every (target, source) pair, tiled: targets in blocks of ``tile`` (one
    block per task), sources in tiles of ``tile`` that stay in L1 while the
    block's targets pass over them.  ``self_pairs`` skips ``j == i`` (targets
    are the sources).
``untiled(...)``
    The same loop without source tiles: each target streams all sources.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from typing import Any

from .. import _jit


def kernel_import(py: Any) -> str | None:
    """An import line for ``py`` if it can be imported by name, else None."""
    mod, qual = getattr(py, "__module__", None), getattr(py, "__qualname__", "")
    if not mod or mod == "__main__" or "<" in qual or "." in qual:
        return None
    try:
        if getattr(importlib.import_module(mod), qual) is not py:
            return None
        src = inspect.getsource(getattr(py, "py_func", py))
    except (ImportError, AttributeError, OSError, TypeError):
        return None
    digest = hashlib.sha256(src.encode()).hexdigest()[:16]
    return f"# kernel source sha256: {digest}\nfrom {mod} import {qual} as _py_kernel"


def _row(name: str, i: str, d: int) -> str:
    """A row of a 2-D array as a tuple of its ``d`` values (registers, no array view)."""
    return "(" + ", ".join(f"{name}[{i}, {c}]" for c in range(d)) + ("," if d == 1 else "") + ")"


def source(k: int, scalar: bool, signs: tuple[float, ...], nargs: int, d: int, header: str) -> str:
    """Driver source for a kernel with ``k`` outputs, ``nargs`` extra arguments, ``d`` coordinates.

    Rows go to the kernel as tuples of their values (registers, no array
    view).  Targets are taken two at a time (register blocking): each source
    row loaded is used twice, and in the halved loop one read-modify-write of
    the source's credit serves both targets.
    """
    cache = "True" if header else "False"
    A = "".join(f", a{m}" for m in range(nargs))
    K = range(k)

    def val(x: str, c: int) -> str:
        return x if scalar else f"{x}[{c}]"

    def wgt(r: str, c: int) -> str:
        """The weight crediting the source: ``w`` or ``-w`` by the component's law."""
        return f"w{r}" if signs[c] > 0 else f"nw{r}"

    def zero(*names: str) -> str:
        return "; ".join(f"{n}{c} = 0.0" for n in names for c in K)

    out: list[str] = []

    def emit(indent: int, *lines: str) -> None:
        out.extend(" " * indent + ln for ln in lines)

    emit(
        0,
        header,
        "import numpy as np",
        "from numba import njit, prange",
        "_f = getattr(_py_kernel, 'py_func', _py_kernel)",
        f"kern = njit(cache={cache}, error_model='numpy', fastmath={{'contract'}})(_f)",
        "",
        f"@njit(parallel=True, cache={cache}, error_model='numpy', fastmath={{'contract'}})",
        f"def halved(X, w{A}, tile, nthreads, acc):",
        "    n = X.shape[0]",
        "    nb = (n + tile - 1) // tile",
        "    npairs = nb * (nb + 1) // 2",
        "    for t in prange(nthreads):",
        "        lo = t * npairs // nthreads",
        "        hi = (t + 1) * npairs // nthreads",
        "        a = acc[t]",
        f"        bj = np.zeros(({k}, tile))",
        "        I = 0",
        "        p = lo",
        "        while p >= nb - I:",
        "            p -= nb - I",
        "            I += 1",
        "        J = I + p",
        "        for q in range(lo, hi):",
        "            i0 = I * tile",
        "            i1 = min(i0 + tile, n)",
        "            j0 = J * tile",
        "            j1 = min(j0 + tile, n)",
        "            bj[:, : j1 - j0] = 0.0",
        "            i = i0",
        "            while i < i1:",
        "                if i + 1 < i1:",
        f"                    xa = {_row('X', 'i', d)}",
        f"                    xb = {_row('X', 'i + 1', d)}",
        "                    wa = w[i]",
        "                    wb = w[i + 1]",
        "                    nwa = -wa",
        "                    nwb = -wb",
        f"                    {zero('sa', 'sb')}",
        "                    js = j0",
        "                    if I == J:",
        f"                        v = kern(xa, xb{A})",
    )
    for c in K:
        emit(24, f"sa{c} += wb * {val('v', c)}", f"sb{c} += {signs[c]!r} * wa * {val('v', c)}")
    emit(
        20,
        "    js = i + 2",
        "for j in range(js, j1):",
        f"    xj = {_row('X', 'j', d)}",
        "    wj = w[j]",
        f"    v = kern(xa, xj{A})",
        f"    u = kern(xb, xj{A})",
    )
    for c in K:
        emit(
            24,
            f"sa{c} += wj * {val('v', c)}",
            f"sb{c} += wj * {val('u', c)}",
            f"bj[{c}, j - j0] = bj[{c}, j - j0] + {wgt('a', c)} * {val('v', c)}"
            f" + {wgt('b', c)} * {val('u', c)}",
        )
    for c in K:
        emit(20, f"a[i, {c}] += sa{c}", f"a[i + 1, {c}] += sb{c}")
    emit(
        16,
        "    i += 2",
        "else:",
        f"    xa = {_row('X', 'i', d)}",
        "    wa = w[i]",
        "    nwa = -wa",
        f"    {zero('sa')}",
        "    js = i + 1 if I == J else j0",
        "    for j in range(js, j1):",
        f"        v = kern(xa, {_row('X', 'j', d)}{A})",
        "        wj = w[j]",
    )
    for c in K:
        emit(
            24,
            f"sa{c} += wj * {val('v', c)}",
            f"bj[{c}, j - j0] += {wgt('a', c)} * {val('v', c)}",
        )
    for c in K:
        emit(20, f"a[i, {c}] += sa{c}")
    emit(20, "i += 1")
    emit(12, "for j in range(j0, j1):")
    for c in K:
        emit(16, f"a[j, {c}] += bj[{c}, j - j0]")
    emit(12, "J += 1", "if J == nb:", "    I += 1", "    J = I", "")

    def sweep(ind: int) -> None:
        """Targets ``i0:i1`` against sources ``j0:j1``, two targets at a time."""
        emit(
            ind,
            "i = i0",
            "while i < i1:",
            "    if i + 1 < i1:",
            f"        ta = {_row('T', 'i', d)}",
            f"        tb = {_row('T', 'i + 1', d)}",
            f"        {zero('sa', 'sb')}",
            "        for j in range(j0, j1):",
            f"            xj = {_row('X', 'j', d)}",
            "            wj = w[j]",
            "            if self_pairs and (j == i or j == i + 1):",
            "                if j != i:",
            f"                    v = kern(ta, xj{A})",
        )
        for c in K:
            emit(ind + 20, f"sa{c} += wj * {val('v', c)}")
        emit(ind + 16, "else:", f"    u = kern(tb, xj{A})")
        for c in K:
            emit(ind + 20, f"sb{c} += wj * {val('u', c)}")
        emit(ind + 16, "continue")
        emit(ind + 12, f"v = kern(ta, xj{A})", f"u = kern(tb, xj{A})")
        for c in K:
            emit(ind + 12, f"sa{c} += wj * {val('v', c)}", f"sb{c} += wj * {val('u', c)}")
        for c in K:
            emit(ind + 8, f"out[i, {c}] += sa{c}", f"out[i + 1, {c}] += sb{c}")
        emit(
            ind + 4,
            "    i += 2",
            "else:",
            f"    ta = {_row('T', 'i', d)}",
            f"    {zero('sa')}",
            "    for j in range(j0, j1):",
            "        if self_pairs and j == i:",
            "            continue",
            f"        v = kern(ta, {_row('X', 'j', d)}{A})",
            "        wj = w[j]",
        )
        for c in K:
            emit(ind + 12, f"sa{c} += wj * {val('v', c)}")
        for c in K:
            emit(ind + 8, f"out[i, {c}] += sa{c}")
        emit(ind + 8, "i += 1")

    emit(
        0,
        f"@njit(parallel=True, cache={cache}, error_model='numpy', fastmath={{'contract'}})",
        f"def full(T, X, w{A}, tile, self_pairs, out):",
        "    nt = T.shape[0]",
        "    n = X.shape[0]",
        "    nb = (nt + tile - 1) // tile",
        "    for b in prange(nb):",
        "        i0 = b * tile",
        "        i1 = min(i0 + tile, nt)",
        "        for j0 in range(0, n, tile):",
        "            j1 = min(j0 + tile, n)",
    )
    sweep(12)
    emit(
        0,
        "",
        f"@njit(parallel=True, cache={cache}, error_model='numpy', fastmath={{'contract'}})",
        f"def untiled(T, X, w{A}, tile, self_pairs, out):",
        "    nt = T.shape[0]",
        "    n = X.shape[0]",
        "    nb = (nt + 1) // 2",
        "    for b in prange(nb):",
        "        i0 = 2 * b",
        "        i1 = min(i0 + 2, nt)",
        "        j0 = 0",
        "        j1 = n",
    )
    sweep(8)
    return "\n".join(out) + "\n"


def kernels(kernel: Any, k: int, scalar: bool, signs: tuple[float, ...], nargs: int, d: int) -> Any:
    """The generated driver module for ``kernel`` (cached per process)."""
    imp = kernel_import(kernel)
    tag = "pairs_cpu"
    if imp is not None:
        return _jit.load_module(source(k, scalar, signs, nargs, d, imp), tag)
    src = source(k, scalar, signs, nargs, d, "")
    return _jit.load_module(src, tag, {"_py_kernel": kernel})
