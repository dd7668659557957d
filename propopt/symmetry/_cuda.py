"""CUDA pair sums (numba.cuda) with shared-memory tiles, in the style of GPU Gems 3.

The user's kernel body is compiled as a device function
(``cuda.jit(device=True)``), the same source as the CPU path.

``halved``
    One thread block per tile pair ``(I, J)``, ``I <= J``, of the upper
    triangle (``nb (nb + 1) / 2`` blocks of ``TILE`` threads).  The block
    stages tile ``J``'s points in shared memory; thread ``t`` holds point
    ``I * TILE + t`` in registers and walks the shared tile starting at its
    own offset (``jj = (t + s) mod m``), so that at each step the threads of
    a warp credit distinct sources.  The target's sum goes to global memory
    with one atomic add per component; the sources' credits gather in a
    shared accumulator tile (shared atomics) that is added to global memory
    once per block.  Each unordered pair is evaluated once.
``full``
    Nyland, Harris and Prins (GPU Gems 3, ch. 31): one thread per target,
    source tiles loaded cooperatively into shared memory, every (target,
    source) pair evaluated.  Used for separate targets, where no halving is
    possible.

This module is imported only for ``device='cuda'``; the test suite runs it in
numba's CUDA simulator on tiny inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _jit
from ._cpu import kernel_source
from ._plan import Form, PairPlan

THREADS = 128
"""Threads per block = points per tile (GPU Gems 3 used 256 on G80; 128 keeps the
shared tiles small enough for several blocks per SM with k = 4 outputs)."""


def _tup(expr: str, d: int) -> str:
    return "(" + ", ".join(expr.format(c=c) for c in range(d)) + ("," if d == 1 else "") + ")"


def source(form: Form, dtype: np.dtype, tile: int, header: str) -> str:
    k, scalar, signs, nargs, d = form
    A = "".join(f", a{m}" for m in range(nargs))
    K = range(k)

    def val(x: str, c: int) -> str:
        return x if scalar else f"{x}[{c}]"

    zero = "; ".join(f"s{c} = 0.0" for c in K)
    lines = [
        header,
        "import numpy as np",
        "from numba import cuda",
        "_f = getattr(_py_kernel, 'py_func', _py_kernel)",
        "kern = cuda.jit(device=True)(_f)",
        f"TILE = {tile}",
        f"D = {d}",
        f"K = {k}",
        f"DT = np.{dtype.name}",
        "",
        "@cuda.jit",
        f"def halved(X, w{A}, pi, pj, n, out):",
        "    b = cuda.blockIdx.x",
        "    tid = cuda.threadIdx.x",
        "    I = pi[b]",
        "    J = pj[b]",
        "    shx = cuda.shared.array((TILE, D), DT)",
        "    shw = cuda.shared.array(TILE, np.float64)",
        "    sha = cuda.shared.array((TILE, K), np.float64)",
        "    j = J * TILE + tid",
        "    if j < n:",
        "        for c in range(D):",
        "            shx[tid, c] = X[j, c]",
        "        shw[tid] = w[j]",
        "    for c in range(K):",
        "        sha[tid, c] = 0.0",
        "    cuda.syncthreads()",
        "    i = I * TILE + tid",
        "    m = min(TILE, n - J * TILE)",
        "    if i < n:",
        f"        xi = {_tup('X[i, {c}]', d)}",
        "        wi = w[i]",
        f"        {zero}",
        "        for s in range(m):",
        "            jj = (tid + s) % m",
        "            if I == J and jj <= tid:",
        "                continue",
        f"            v = kern(xi, {_tup('shx[jj, {c}]', d)}{A})",
        "            wj = shw[jj]",
    ]
    for c in K:
        lines.append(f"            s{c} += wj * {val('v', c)}")
        lines.append(
            f"            cuda.atomic.add(sha, (jj, {c}), {signs[c]!r} * wi * {val('v', c)})"
        )
    for c in K:
        lines.append(f"        cuda.atomic.add(out, (i, {c}), s{c})")
    lines += [
        "    cuda.syncthreads()",
        "    if j < n:",
    ]
    for c in K:
        lines.append(f"        cuda.atomic.add(out, (j, {c}), sha[tid, {c}])")
    lines += [
        "",
        "@cuda.jit",
        f"def full(T, X, w{A}, nt, n, self_pairs, out):",
        "    tid = cuda.threadIdx.x",
        "    i = cuda.blockIdx.x * TILE + tid",
        "    shx = cuda.shared.array((TILE, D), DT)",
        "    shw = cuda.shared.array(TILE, np.float64)",
        "    ii = min(i, nt - 1)",
        f"    ti = {_tup('T[ii, {c}]', d)}",
        f"    {zero}",
        "    for j0 in range(0, n, TILE):",
        "        j = j0 + tid",
        "        if j < n:",
        "            for c in range(D):",
        "                shx[tid, c] = X[j, c]",
        "            shw[tid] = w[j]",
        "        cuda.syncthreads()",
        "        m = min(TILE, n - j0)",
        "        for jj in range(m):",
        "            if self_pairs and j0 + jj == i:",
        "                continue",
        f"            v = kern(ti, {_tup('shx[jj, {c}]', d)}{A})",
        "            wj = shw[jj]",
    ]
    for c in K:
        lines.append(f"            s{c} += wj * {val('v', c)}")
    lines += ["        cuda.syncthreads()", "    if i < nt:"]
    for c in K:
        lines.append(f"        out[i, {c}] = s{c}")
    return "\n".join(lines) + "\n"


def kernels(kernel: Any, form: Form, dtype: np.dtype, tile: int) -> Any:
    spliced = kernel_source(kernel, "cuda.jit(device=True)")
    src = "from numba import cuda\n" + source(form, dtype, tile, spliced.source)
    return _jit.load_spliced(spliced, src, "pairs_cuda")


def pair_sum(p: PairPlan) -> np.ndarray:
    """Pair sums on the GPU: NumPy in, NumPy (float64) out."""
    from numba import cuda

    if not cuda.is_available():
        raise RuntimeError(
            "device='cuda' needs a CUDA GPU and numba-cuda (none is available); use device='cpu'"
        )
    kernel, X, w, args, k, T = p.kernel, p.X, p.w, p.args, p.k, p.T
    tpb = p.tile or THREADS
    n = X.shape[0]
    mod = kernels(kernel, p.form, X.dtype, tpb)
    dX, dw = cuda.to_device(X), cuda.to_device(w)
    if T is None:
        nb = (n + tpb - 1) // tpb
        I, J = np.triu_indices(nb)
        out = cuda.to_device(np.zeros((n, k)))
        grid = len(I)
        mod.halved[grid, tpb](
            dX,
            dw,
            *args,
            cuda.to_device(I.astype(np.int64)),
            cuda.to_device(J.astype(np.int64)),
            n,
            out,
        )
    else:
        nt = T.shape[0]
        out = cuda.to_device(np.zeros((nt, k)))
        mod.full[(nt + tpb - 1) // tpb, tpb](
            dX if T is X else cuda.to_device(T), dX, dw, *args, nt, n, T is X, out
        )
    return out.copy_to_host()
