"""numba kernels for pair sums, generated per user kernel.

A pair kernel ``f(xi, xj, *args)`` is a plain Python function (or an
``@njit`` dispatcher) returning a float or a tuple of ``k`` floats.  Its body
is compiled once per process for the CPU here (``njit``) and for CUDA in
:mod:`._cuda` (``cuda.jit(device=True)``): the same source, two targets.

The drivers are generated as Python source with ``k``, the signs and the
number of extra arguments unrolled, with the user's kernel written into the
source by :func:`propopt._jit.splice` (keyed by what it computes), and loaded
through :func:`propopt._jit.load_spliced`: numba caches it on disk wherever
it was defined (a module, a script, a closure, a lambda).

Compilation
-----------
``error_model='numpy'`` (a division by zero gives inf, as in NumPy, instead of
raising inside a parallel loop).  The user's kernel compiles with
``fastmath={'contract'}`` only (products and sums fuse into FMAs, nothing is
reordered); the drivers with ``{'contract', 'reassoc'}``, identically for the
halved and the full loops, so that LLVM may split a target's running sum into
vector lanes: the inner loops run over a source tile in SIMD registers (8
float64 lanes with AVX-512), the kernel inlined.  A sum is then added in a
different order than the plain loop (lane-wise partial sums over one tile),
not less accurately; results stay independent of the thread count up to
rounding.  Measured at N = 20,000 (Plummer kernel, float64, 2 threads, quiet
machine): the full loop 0.72 s -> 0.10 s, the halved loop 0.43 s -> 0.066 s.

For a loop of this kind the halving ratio has a ceiling below 2 set by the
kernel's cost ``K`` (vector operations per call) against the ``k`` outputs'
multiply-adds: the full loop spends ``2K + 2k`` per unordered pair, the halved
loop ``K + 2k`` plus the source credits' loads and stores.  For the Plummer
kernel (``K`` about 20 with the zero-distance test, ``k = 4``) that is at
most 48/28 = 1.7x; measured 1.5x.  The scalar loops of earlier versions
reached 1.7x because the scalar square root and division made ``K`` larger,
at 6-7x the time.

Drivers
-------
Coordinates arrive transposed, ``(d, n)`` C-contiguous, so that a tile's
sources are ``d`` contiguous runs.

``halved(XT, w, args, tile, nthreads, acc)``
    Each unordered pair once.  The upper triangle of ``tile x tile`` blocks,
    ``(I, J)`` with ``I <= J``, is listed row by row and cut into
    ``nthreads`` contiguous runs of equal length (every off-diagonal block
    holds ``tile^2`` pairs, so the runs hold equal work); run ``t`` adds
    into its own accumulator ``acc[t]`` (no two threads write one row), and
    the caller sums the ``nthreads`` accumulators.  Within a block pair,
    :data:`BLOCK` targets at a time stream over the source tile; the sources'
    credits gather in ``k`` tile-long arrays (L1) flushed once per block pair.
``full(TT, XT, w, args, ttile, stile, self_pairs, out)``
    Every (target, source) pair, tiled: targets in blocks of ``ttile`` (one
    block per task), sources in tiles of ``stile`` that stay in L1 while the
    block's targets pass over them, :data:`BLOCK` targets at a time.
    ``self_pairs`` skips ``j == i`` (targets are the sources).  The untiled
    loop is this one with ``ttile = BLOCK`` and one source tile of all
    sources: one compiled driver for both (each costs 3-6 s to compile).
"""

from __future__ import annotations

from typing import Any

from .. import _jit
from ._plan import Form


def kernel_source(py: Any, helper: str = "numba.njit(cache=False)") -> _jit.Spliced:
    """The pair kernel ``py`` as generated source (see :func:`propopt._jit.splice`)."""
    return _jit.splice(py, "_py_kernel", helper)


def _row(name: str, i: str, d: int) -> str:
    """Point ``i`` of a ``(d, n)`` coordinate array as a tuple of its ``d`` values."""
    return "(" + ", ".join(f"{name}[{c}, {i}]" for c in range(d)) + ("," if d == 1 else "") + ")"


def _tile_point(d: int) -> str:
    """Source ``jj`` of the tile views ``Y0 ..`` as a tuple."""
    return "(" + ", ".join(f"Y{c}[jj]" for c in range(d)) + ("," if d == 1 else "") + ")"


BLOCK = 3
"""Targets per register block: each source loaded (and, halved, each credit
read and written) serves this many targets.  Both drivers use the same."""

FASTMATH = "{'contract', 'reassoc'}"
"""LLVM flags of the drivers' loops (the user's kernel gets ``'contract'`` only)."""


def source(form: Form, header: str, block: int = BLOCK, cache: bool = True) -> str:
    """Driver source for a kernel of ``form``: ``k`` outputs, ``nargs`` extra arguments,
    ``d`` coordinates.

    Coordinates arrive transposed, ``(d, n)``, so that a tile's sources are
    ``d`` contiguous runs.  Every inner loop runs over a source tile from
    index 0 (views of the tile, so that no index can be negative and numba
    needs no wraparound test): a straight loop LLVM vectorizes, the targets'
    sums as reductions, the halved loop's source credits as contiguous
    read-modify-writes of ``k`` per-tile arrays.  Targets are taken ``block``
    at a time in both drivers.
    """
    k, scalar, signs, nargs, d = form
    A = "".join(f", a{m}" for m in range(nargs))
    K = range(k)
    R = range(block)
    D = range(d)
    jit = f"@njit(parallel=True, cache={cache}, error_model='numpy', fastmath={FASTMATH})"

    def val(x: str, c: int) -> str:
        return x if scalar else f"{x}[{c}]"

    def wgt(r: int, c: int) -> str:
        """The weight crediting the source: ``w`` or ``-w`` by the component's law."""
        return f"w{r}" if signs[c] > 0 else f"nw{r}"

    out: list[str] = []

    def emit(indent: int, *lines: str) -> None:
        out.extend(" " * indent + ln for ln in lines)

    def xj() -> str:
        return "(" + ", ".join(f"y{c}[t]" for c in D) + ("," if d == 1 else "") + ")"

    def run(ind: int, lo: str, hi: str, rows: range, credit: bool) -> None:
        """Targets ``x{r}`` (r in rows) against sources ``lo:hi`` of the tile."""
        emit(ind, f"if {lo} < {hi}:")
        ind += 4
        for c in D:
            emit(ind, f"y{c} = Y{c}[{lo}:{hi}]")
        emit(ind, f"v = wJ[{lo}:{hi}]")
        if credit:
            for c in K:
                emit(ind, f"b{c} = B{c}[{lo}:{hi}]")
        emit(ind, f"for t in range({hi} - {lo}):", f"    xj = {xj()}", "    wj = v[t]")
        for r in rows:
            emit(ind + 4, f"f{r} = kern(x{r}, xj{A})")
        for c in K:
            for r in rows:
                emit(ind + 4, f"s{r}_{c} += wj * {val(f'f{r}', c)}")
            if credit:
                cr = " + ".join(f"{wgt(r, c)} * {val(f'f{r}', c)}" for r in rows)
                emit(ind + 4, f"b{c}[t] = b{c}[t] + {cr}")

    def targets(ind: int, src: str, rows: range, weights: bool) -> None:
        for r in rows:
            emit(ind, f"x{r} = {_row(src, f'i + {r}', d)}")
            if weights:
                emit(ind, f"w{r} = w[i + {r}]", f"nw{r} = -w{r}")
        emit(ind, "; ".join(f"s{r}_{c} = 0.0" for r in rows for c in K))

    def flush(ind: int, dst: str, rows: range) -> None:
        for r in rows:
            for c in K:
                emit(ind, f"{dst}[i + {r}, {c}] += s{r}_{c}")

    def tile_views(ind: int, src: str) -> None:
        for c in D:
            emit(ind, f"Y{c} = {src}[{c}, j0:j1]")
        emit(ind, "wJ = w[j0:j1]")

    emit(
        0,
        header,
        "import numpy as np",
        "from numba import njit, prange",
        "_f = getattr(_py_kernel, 'py_func', _py_kernel)",
        "kern = njit(error_model='numpy', fastmath={'contract'})(_f)",
        "",
        jit,
        f"def halved(X, w{A}, tile, nthreads, acc):",
        "    n = X.shape[1]",
        "    nb = (n + tile - 1) // tile",
        "    npairs = nb * (nb + 1) // 2",
        "    for task in prange(nthreads):",
        "        lo = task * npairs // nthreads",
        "        hi = (task + 1) * npairs // nthreads",
        "        a = acc[task]",
    )
    for c in K:
        emit(8, f"B{c} = np.zeros(tile)")
    emit(
        8,
        "I = 0",
        "p = lo",
        "while p >= nb - I:",
        "    p -= nb - I",
        "    I += 1",
        "J = I + p",
        "for q in range(lo, hi):",
        "    i0 = I * tile",
        "    i1 = min(i0 + tile, n)",
        "    j0 = J * tile",
        "    j1 = min(j0 + tile, n)",
        "    nj = j1 - j0",
    )
    tile_views(12, "X")
    for c in K:
        emit(12, f"B{c}[:nj] = 0.0")
    emit(12, "i = i0", f"while i + {block} <= i1:")
    targets(16, "X", R, True)
    emit(16, "js = 0", "if I == J:")
    for r1 in R:
        for r2 in R:
            if r2 > r1:
                emit(20, f"f = kern(x{r1}, x{r2}{A})")
                for c in K:
                    emit(
                        20,
                        f"s{r1}_{c} += w{r2} * {val('f', c)}",
                        f"s{r2}_{c} += {wgt(r1, c)} * {val('f', c)}",
                    )
    emit(20, f"js = i - i0 + {block}")
    run(16, "js", "nj", R, True)
    flush(16, "a", R)
    emit(16, f"i += {block}")
    emit(12, "while i < i1:")
    targets(16, "X", range(1), True)
    emit(16, "js = i - i0 + 1 if I == J else 0")
    run(16, "js", "nj", range(1), True)
    flush(16, "a", range(1))
    emit(16, "i += 1")
    emit(12, "for u in range(nj):")
    for c in K:
        emit(16, f"a[j0 + u, {c}] += B{c}[u]")
    emit(12, "J += 1", "if J == nb:", "    I += 1", "    J = I", "")

    def sweep(ind: int) -> None:
        """Targets ``i0:i1`` against the source tile ``j0:j1``; skip ``j == i`` for self pairs."""
        tile_views(ind, "X")
        emit(ind, "nj = j1 - j0", "i = i0")
        for rows in (R, range(1)):
            nr = len(rows)
            emit(ind, f"while i + {nr} <= i1:")
            targets(ind + 4, "T", rows, False)
            emit(
                ind + 4,
                "cut = nj",
                f"if self_pairs and i < j1 and i + {nr} > j0:",
                "    cut = i - j0 if i >= j0 else 0",
            )
            run(ind + 4, "0", "cut", rows, False)
            emit(ind + 4, "if cut < nj:", f"    end = min(i + {nr} - j0, nj)")
            emit(ind + 8, "for jj in range(cut, end):", f"    xj = {_tile_point(d)}")
            emit(ind + 12, "wj = wJ[jj]")
            for r in rows:
                emit(ind + 12, f"if j0 + jj != i + {r}:", f"    f = kern(x{r}, xj{A})")
                for c in K:
                    emit(ind + 16, f"s{r}_{c} += wj * {val('f', c)}")
            run(ind + 8, "end", "nj", rows, False)
            flush(ind + 4, "out", rows)
            emit(ind + 4, f"i += {nr}")

    emit(
        0,
        jit,
        f"def full(T, X, w{A}, ttile, stile, self_pairs, out):",
        "    nt = T.shape[1]",
        "    n = X.shape[1]",
        "    nb = (nt + ttile - 1) // ttile",
        "    for b in prange(nb):",
        "        i0 = b * ttile",
        "        i1 = min(i0 + ttile, nt)",
        "        for j0 in range(0, n, stile):",
        "            j1 = min(j0 + stile, n)",
    )
    sweep(12)
    return "\n".join(out) + "\n"


def kernels(kernel: Any, form: Form) -> Any:
    """The generated driver module for ``kernel`` (cached per process)."""
    spliced = kernel_source(kernel)
    src = source(form, spliced.source, cache=spliced.namespace is None)
    return _jit.load_spliced(spliced, src, "pairs_cpu")
