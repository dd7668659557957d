"""CUDA scan kernels for monoids (numba.cuda): one launch, one read and one write per element.

``scan_tiles`` is a single-pass scan with decoupled look-back (Merrill and
Garland, "Single-pass Parallel Prefix Scan with Decoupled Look-back", 2016):

1. A block takes the next tile number from a counter, loads its tile of
   ``TPB * ITEMS`` elements (coalesced, through shared memory), and each
   thread folds its ``ITEMS`` consecutive elements.
2. The block scans the thread partials (warp shuffles for 4- and 8-byte
   numbers, a shared-memory scan otherwise) and publishes the tile's total.
3. It walks back over the tiles before it (warp 0, 32 tiles a step; thread
   0 where the dtype has no shuffles) to the nearest published inclusive
   prefix, publishes its own, and each thread scans its items from
   ``carry . (partials of the threads before it)``; the tile is written
   back coalesced.

Shared tiles are indexed ``l + l // 32`` (one word of padding per 32), so
that threads reading their ``ITEMS`` consecutive elements hit distinct
banks.  Elements past the end are padded with the identity; they reach only
the last tile's total, which no tile reads.  No element is combined with the
identity.  Arrays are handled as ``(P, N, Q)`` with the scan along ``N``;
torch CUDA tensors are used zero-copy through ``__cuda_array_interface__``
and the kernel runs on torch's current stream.

This module is imported only when CUDA arrays are scanned, so nothing here is
needed on a machine without numba-cuda.  ``NUMBA_ENABLE_CUDASIM=1`` runs the
kernels in numba's simulator (the test suite does, with small tiles).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _jit, _kinds
from .._cpu_source import _j, _v, flush_source

if TYPE_CHECKING:
    from ..monoid import Monoid

#: Threads per block.  256 is a common sweet spot for shared-memory scans.
THREADS = 256

#: Shared memory (bytes) the staged tile may use per block (48 KiB is the
#: static limit; the partials need a little more).
TILE_BYTES = 32 * 1024

#: Most items per thread: long enough to amortize the block scan.
MAX_ITEMS = 16

_config: dict[str, int | None] = {"threads": None, "items": None}


@contextlib.contextmanager
def tiles(threads: int | None = None, items: int | None = None) -> Iterator[None]:
    """Temporarily override threads per block and items per thread (tests)."""
    old = dict(_config)
    _config.update(threads=threads, items=items)
    try:
        yield
    finally:
        _config.update(old)


def _shape(arity: int, itemsize: int) -> tuple[int, int]:
    tpb = _config["threads"] or THREADS
    items = _config["items"] or max(1, min(MAX_ITEMS, TILE_BYTES // (arity * itemsize * tpb)))
    return tpb, items


def _source(
    k: int,
    dtype: np.dtype,
    tpb: int,
    items: int,
    header: str,
    sim: bool,
    flush: Sequence[int] = (),
) -> str:
    """One-pass scan: each block scans its tile and finds its carry by decoupled look-back.

    A block takes the next tile number from a counter (so every tile before
    it in its row has started, whatever order the GPU schedules blocks in),
    scans its tile, publishes the tile's total with flag 1, then walks back
    over the tiles before it: a tile with flag 1 contributes its total, a
    tile with flag 2 its inclusive prefix, which ends the walk.  It then
    publishes its own inclusive prefix with flag 2.  Each element is read
    once and written once.  The published values are written before a
    fence and read after one, bypassing the (incoherent) L1 cache.
    """
    X, O, E = _v("x", k), _v("o", k), _v("e", k)
    AG, IN, SH = _v("ag", k), _v("in", k), _v("sh", k)
    A, V, W, U = _v("a", k), _v("v", k), _v("w", k), _v("u", k)
    cplx = dtype.kind == "c"
    # warp shuffles where the device has them for the dtype; shared memory otherwise
    shfl = not sim and dtype.kind in "iuf" and dtype.itemsize in (4, 8) and tpb % 32 == 0

    def lhs(names: Sequence[str]) -> str:
        return names[0] if k == 1 else _j(names)

    def cast(names: Sequence[str]) -> str:
        return "; ".join(f"{n} = DT({n})" for n in names)

    lines = [
        header,
        "import numpy as np",
        "from numba import cuda",
        f"DT = np.{dtype.name}",
        f"TPB = {tpb}",
        f"ITEMS = {items}",
        "TILE = TPB * ITEMS",
        "NW = (TPB + 31) // 32",
        "SHSIZE = TILE + TILE // 32 + 1",
        "FULL = 0xFFFFFFFF",
    ]
    w = lines.append
    ftz = flush_source(dtype, flush, "@cuda.jit(device=True)")
    if ftz:  # flush-to-zero after each combine, as the CPU kernels (see Monoid.flush)
        args = _j(_v("a", k) + _v("b", k))
        res = ["r"] if k == 1 else [f"r[{i}]" for i in range(k)]
        res = [f"ftz(DT({r}))" if i in flush else f"DT({r})" for i, r in enumerate(res)]
        w("_c = cuda.jit(device=True)(_py_combine)")
        w(ftz)
        w("@cuda.jit(device=True)")
        w(f"def comb({args}):")
        w(f"    r = _c({args})")
        w("    return " + (res[0] if k == 1 else "(" + ", ".join(res) + ")"))
    else:
        w("comb = cuda.jit(device=True)(_py_combine)")
    w("")
    # put / get: a published value, stored plainly and read from L2 (ld.global.cg);
    # complex values travel as two real words
    if cplx:
        w("@cuda.jit(device=True)")
        w("def put(a, i, v):")
        w("    a[2 * i] = v.real")
        w("    a[2 * i + 1] = v.imag")
        w("")
        w("@cuda.jit(device=True)")
        w("def get(a, i):")
        if sim:
            w("    return DT(complex(a[2 * i], a[2 * i + 1]))")
        else:
            w("    return DT(complex(cuda.ldcg(a, 2 * i), cuda.ldcg(a, 2 * i + 1)))")
    else:
        w("@cuda.jit(device=True)")
        w("def put(a, i, v):")
        w("    a[i] = v")
        w("")
        w("@cuda.jit(device=True)")
        w("def get(a, i):")
        w("    return a[i]" if sim else "    return cuda.ldcg(a, i)")
    w("")
    w("@cuda.jit")
    w(f"def scan_tiles({_j(X)}, {_j(O)}, {_j(AG)}, {_j(IN)}, flags, N, NT, rev, excl, {_j(E)}):")
    for s in SH:
        w(f"    {s} = cuda.shared.array(SHSIZE, DT)")
    if shfl:
        for i in range(k):
            w(f"    wt{i} = cuda.shared.array(32, DT)")
    else:
        for i in range(k):
            w(f"    pa{i} = cuda.shared.array(TPB, DT)")
    for i in range(k):
        w(f"    cy{i} = cuda.shared.array(1, DT)")
    w("    tk = cuda.shared.array(1, np.int32)")
    w("    tid = cuda.threadIdx.x")
    w("    if tid == 0:")
    w("        tk[0] = cuda.atomic.add(flags, flags.size - 1, 1)")
    w("    cuda.syncthreads()")
    w("    t = tk[0]")
    w("    r = t // NT")
    w("    blk = t - r * NT")
    w("    base = blk * TILE")
    w("    Q = x0.shape[2]")
    w("    p = r // Q")
    w("    q = r - p * Q")
    # load the tile (coalesced), padding past the end with the identity; the
    # padded elements only reach the last tile's total, which no tile reads
    w("    for i in range(ITEMS):")
    w("        l = i * TPB + tid")
    w("        g = base + l")
    w("        if g < N:")
    w("            n = N - 1 - g if rev else g")
    w("            " + "; ".join(f"{s}[l + (l >> 5)] = {x}[p, n, q]" for s, x in zip(SH, X)))
    w("        else:")
    w("            " + "; ".join(f"{s}[l + (l >> 5)] = {e}" for s, e in zip(SH, E)))
    w("    cuda.syncthreads()")
    # each thread folds its ITEMS consecutive elements, from the first one
    w("    j = tid * ITEMS")
    w("    j += j >> 5")
    w("    " + "; ".join(f"{a} = {s}[j]" for a, s in zip(A, SH)))
    w("    for i in range(1, ITEMS):")
    w("        j = tid * ITEMS + i")
    w("        j += j >> 5")
    w(f"        {lhs(A)} = comb({_j(A + [s + '[j]' for s in SH])})")
    # the thread's prefix u (the fold of the threads before it, when hp) and
    # the tile's total (in the a's of the last thread, then in cy)
    if shfl:
        w("    " + cast(A))
        w("    lane = tid & 31")
        w("    wid = tid >> 5")
        w("    d = 1")
        w("    while d < 32:")
        _shuffled(w, "        ", A, "shfl_up_sync", "lane >= d", lhs, cast)
        w("        d *= 2")
        w("    " + "; ".join(f"{u} = cuda.shfl_up_sync(FULL, {a}, 1)" for u, a in zip(U, A)))
        w("    if lane == 31 or tid == TPB - 1:")
        w("        " + "; ".join(f"wt{i}[wid] = {a}" for i, a in enumerate(A)))
        w("    cuda.syncthreads()")
        w("    if wid == 0:")
        w("        m = lane if lane < NW else 0")
        w("        " + "; ".join(f"{v} = wt{i}[m]" for i, v in enumerate(V)))
        w("        d = 1")
        w("        while d < NW:")
        _shuffled(w, "            ", V, "shfl_up_sync", "lane >= d", lhs, cast)
        w("            d *= 2")
        w("        if lane < NW:")
        w("            " + "; ".join(f"wt{i}[lane] = {v}" for i, v in enumerate(V)))
        w("    cuda.syncthreads()")
        w("    hp = tid > 0")
        w("    if lane == 0 and wid > 0:")
        w("        " + "; ".join(f"{u} = wt{i}[wid - 1]" for i, u in enumerate(U)))
        w("    elif lane > 0 and wid > 0:")
        w(f"        {lhs(U)} = comb({_j([f'wt{i}[wid - 1]' for i in range(k)] + U)})")
        total = [f"wt{i}[NW - 1]" for i in range(k)]
    else:
        w("    " + "; ".join(f"pa{i}[tid] = {a}" for i, a in enumerate(A)))
        w("    cuda.syncthreads()")
        w("    s = 1")
        w("    while s < TPB:")
        w("        " + "; ".join(f"{v} = pa{i}[tid]" for i, v in enumerate(V)))
        w("        if tid >= s:")
        w(f"            {lhs(V)} = comb({_j([f'pa{i}[tid - s]' for i in range(k)] + V)})")
        w("        cuda.syncthreads()")
        w("        " + "; ".join(f"pa{i}[tid] = {v}" for i, v in enumerate(V)))
        w("        cuda.syncthreads()")
        w("        s *= 2")
        w("    hp = tid > 0")
        w("    " + "; ".join(f"{u} = pa{i}[tid - hp]" for i, u in enumerate(U)))
        total = [f"pa{i}[TPB - 1]" for i in range(k)]
    if shfl:
        _look_back_warp(w, k, total, lhs, cast)
    else:
        _look_back_thread(w, k, total, lhs)
    w("    cuda.syncthreads()")
    # each thread scans its items from carry . u; no element meets the identity
    w("    have = blk > 0")
    w("    if have:")
    w("        " + "; ".join(f"{x} = cy{i}[0]" for i, x in enumerate(W)))
    w("        if hp:")
    w(f"            {lhs(W)} = comb({_j(W + U)})")
    w("    elif hp:")
    w("        " + "; ".join(f"{x} = {u}" for x, u in zip(W, U)))
    w("        have = True")
    w("    else:")  # the row's first element: an exclusive scan writes the identity there
    w("        " + "; ".join(f"{x} = {e}" for x, e in zip(W, E)))
    w("    for i in range(ITEMS):")
    w("        j = tid * ITEMS + i")
    w("        j += j >> 5")
    w("        " + "; ".join(f"{v} = {s}[j]" for v, s in zip(V, SH)))
    w("        if excl:")
    w("            " + "; ".join(f"{s}[j] = {x}" for s, x in zip(SH, W)))
    _fold(w, "        ", W, V, lhs, older=False)
    w("        if not excl:")
    w("            " + "; ".join(f"{s}[j] = {x}" for s, x in zip(SH, W)))
    w("    cuda.syncthreads()")
    w("    for i in range(ITEMS):")
    w("        l = i * TPB + tid")
    w("        g = base + l")
    w("        if g < N:")
    w("            n = N - 1 - g if rev else g")
    w("            " + "; ".join(f"{o}[p, n, q] = {s}[l + (l >> 5)]" for o, s in zip(O, SH)))
    return "\n".join(lines) + "\n"


def _shuffled(
    w: Any, indent: str, names: Sequence[str], op: str, cond: str, lhs: Any, cast: Any
) -> None:
    """One step of a warp scan or fold: the values ``d`` lanes away (by ``op``), folded in
    on the left where ``cond`` holds (they come before)."""
    n = [f"n{i}" for i in range(len(names))]
    w(indent + "; ".join(f"{m} = cuda.{op}(FULL, {x}, d)" for m, x in zip(n, names)))
    w(f"{indent}if {cond}:")
    w(f"{indent}    {lhs(names)} = comb({_j(n + list(names))})")
    w(f"{indent}    " + cast(names))


def _fold(
    w: Any, indent: str, acc: Sequence[str], new: Sequence[str], lhs: Any, older: bool
) -> None:
    """``acc = new . acc`` (``older``: new comes first) or ``acc . new``; ``new`` alone at first."""
    args = list(new) + list(acc) if older else list(acc) + list(new)
    w(f"{indent}if have:")
    w(f"{indent}    {lhs(acc)} = comb({_j(args)})")
    w(f"{indent}else:")
    w(f"{indent}    " + "; ".join(f"{x} = {v}" for x, v in zip(acc, new)))
    w(f"{indent}    have = True")


def _read(w: Any, indent: str, k: int) -> None:
    """The value of tile ``jj`` into the r's: its inclusive prefix (flag 2) or its total."""
    AG, IN, R = _v("ag", k), _v("in", k), _v("r", k)
    w(f"{indent}if f == 2:")
    w(f"{indent}    " + "; ".join(f"{r} = get({i}, jj)" for r, i in zip(R, IN)))
    w(f"{indent}else:")
    w(f"{indent}    " + "; ".join(f"{r} = get({a}, jj)" for r, a in zip(R, AG)))


def _publish(w: Any, indent: str, arrays: Sequence[str], vals: Sequence[str], flag: int) -> None:
    """Write a tile's value, fence, then raise its flag (readers fence after the flag)."""
    w(indent + "; ".join(f"put({a}, t, {v})" for a, v in zip(arrays, vals)))
    w(f"{indent}cuda.threadfence()")
    w(f"{indent}cuda.atomic.exch(flags, t, {flag})")


def _look_back_thread(w: Any, k: int, total: Sequence[str], lhs: Any) -> None:
    """Thread 0 walks back one tile at a time (dtypes without warp shuffles)."""
    AG, IN, V, W, R = _v("ag", k), _v("in", k), _v("v", k), _v("w", k), _v("r", k)
    w("    if tid == 0:")
    w("        " + "; ".join(f"{v} = {tot}" for v, tot in zip(V, total)))
    w("        if blk == 0:")
    _publish(w, "            ", IN, V, 2)
    w("        else:")
    _publish(w, "            ", AG, V, 1)
    w("            jj = t - 1")
    w("            have = False")
    w("            " + "; ".join(f"{x} = {v}" for x, v in zip(W, V)))  # (typing placeholders)
    w("            while True:")
    w("                f = cuda.atomic.add(flags, jj, 0)")
    w("                if f != 0:")
    w("                    cuda.threadfence()")
    _read(w, "                    ", k)
    _fold(w, "                    ", W, R, lhs, older=True)
    w("                    if f == 2:")
    w("                        break")
    w("                    jj -= 1")
    w("            " + "; ".join(f"cy{i}[0] = {x}" for i, x in enumerate(W)))
    w(f"            {lhs(W)} = comb({_j(W + V)})")
    _publish(w, "            ", IN, W, 2)


def _look_back_warp(w: Any, k: int, total: Sequence[str], lhs: Any, cast: Any) -> None:
    """Warp 0 walks back 32 tiles at a time, as CUB's decoupled look-back does.

    Lane ``l`` reads the flag of tile ``j - l``.  The nearest tile with flag
    2 (an inclusive prefix) ends the window; while a tile before it has no
    value yet (flag 0) the window is read again.  The window's values are
    folded in tile order (older tiles on the left) by a shuffle tree, and
    lane 0 carries the fold across windows.
    """
    AG, IN, V, W, R = _v("ag", k), _v("in", k), _v("v", k), _v("w", k), _v("r", k)
    w("    if tid < 32:")
    w("        " + "; ".join(f"{v} = {tot}" for v, tot in zip(V, total)))
    w("        if blk == 0:")
    w("            if tid == 0:")
    _publish(w, "                ", IN, V, 2)
    w("        else:")
    w("            if tid == 0:")
    _publish(w, "                ", AG, V, 1)
    w("            lo = t - blk")  # the row's first tile, which always ends a walk
    w("            top = t - 1")
    w("            have = False")
    w("            " + "; ".join(f"{x} = {v}" for x, v in zip(W, V)))  # (typing placeholders)
    w("            while True:")
    w("                jj = top - tid")
    w("                f = 2")
    w("                if jj >= lo:")
    w("                    f = cuda.atomic.add(flags, jj, 0)")
    # the nearest lane with flag 2 (32: none in this window)
    w("                near = tid if f == 2 else 32")
    w("                d = 16")
    w("                while d > 0:")
    w("                    near = min(near, cuda.shfl_xor_sync(FULL, near, d))")
    w("                    d //= 2")
    w("                if cuda.any_sync(FULL, f == 0 and tid <= near):")
    w("                    continue")
    w("                cuda.threadfence()")
    w("                " + "; ".join(f"{r} = {v}" for r, v in zip(R, V)))
    w("                if tid <= near and jj >= lo:")
    _read(w, "                    ", k)
    w("                d = 1")
    w("                while d < 32:")
    pair = "tid & (2 * d - 1) == 0 and tid + d <= near and tid + d < 32"
    _shuffled(w, "                    ", R, "shfl_down_sync", pair, lhs, cast)
    w("                    d *= 2")
    w("                if tid == 0:")
    _fold(w, "                    ", W, R, lhs, older=True)
    w("                if near < 32:")
    w("                    break")
    w("                top -= 32")
    w("            if tid == 0:")
    w("                " + "; ".join(f"cy{i}[0] = {x}" for i, x in enumerate(W)))
    w(f"                {lhs(W)} = comb({_j(W + V)})")
    _publish(w, "                ", IN, W, 2)


def kernels(monoid: Monoid, dtype: np.dtype) -> tuple[Any, int]:
    """Kernel module (``scan_tiles``) for ``monoid`` and ``dtype`` at the current tile shape."""
    from numba import config

    dtype = np.dtype(dtype)
    tpb, items = _shape(monoid.arity, dtype.itemsize)
    sim = bool(getattr(config, "ENABLE_CUDASIM", 0))
    cache = _jit.kernel_cache(monoid, "cuda")
    key = (dtype, tpb, items, sim)
    if key not in cache:
        spliced = _jit.splice(monoid.scalar, "_py_combine", "cuda.jit(device=True)")
        tag = f"cuda_{monoid.name}_{dtype.name}"
        src = _source(monoid.arity, dtype, tpb, items, spliced.source, sim, monoid.flush)
        cache[key] = _jit.load_spliced(spliced, "from numba import cuda\n" + src, tag)
    return cache[key], tpb * items


def _launch(
    mod: Any,
    tile: int,
    xs: list[Any],
    outs: list[Any],
    rev: bool,
    excl: bool,
    ident: tuple[Any, ...],
    stream: Any,
    empty: Any,
) -> None:
    """One launch: ``scan_tiles`` over every tile of every row (see :func:`_source`)."""
    p, n, q = xs[0].shape
    nt = -(-n // tile)
    tiles = p * q * nt
    dtype = np.dtype(xs[0].dtype)
    # published totals and prefixes; complex ones as pairs of reals
    wide = 2 if dtype.kind == "c" else 1
    real = np.finfo(dtype).dtype if dtype.kind == "c" else dtype
    ags = [empty((wide * tiles,), real) for _ in xs]
    ins = [empty((wide * tiles,), real) for _ in xs]
    flags = empty((tiles + 1,), np.dtype(np.int32), zero=True)  # the last one counts tiles
    mod.scan_tiles[tiles, mod.TPB, stream](*xs, *outs, *ags, *ins, flags, n, nt, rev, excl, *ident)


def scan(
    monoid: Monoid,
    leaves: Sequence[Any],
    axis: int,
    reverse: bool,
    exclusive: bool,
) -> list[Any]:
    """Scan CUDA arrays (torch CUDA tensors or numba device arrays) along ``axis``.

    Torch tensors are used in place and the kernels run on torch's current
    stream, so nothing waits for the device: the arrays are imported without
    numba's stream synchronisation, which would make every call wait for all
    the work queued before it.
    """
    from numba import cuda

    shape = tuple(int(d) for d in leaves[0].shape)
    n = shape[axis]
    p = int(np.prod(shape[:axis], dtype=np.int64))
    q = int(np.prod(shape[axis + 1 :], dtype=np.int64))
    is_torch = _kinds.array_kind(leaves[0]) == _kinds.TORCH_CUDA
    if is_torch:
        import torch

        dtype = np.dtype(str(leaves[0].dtype).replace("torch.", ""))
        src = [x.contiguous().view(p, n, q) for x in leaves]
        res = [torch.empty_like(s) for s in src]
        xs = [cuda.as_cuda_array(s, sync=False) for s in src]
        outs = [cuda.as_cuda_array(r, sync=False) for r in res]
        stream = cuda.external_stream(torch.cuda.current_stream(leaves[0].device).cuda_stream)
        dev = leaves[0].device

        def empty(shape: tuple[int, ...], dt: np.dtype = dtype, zero: bool = False) -> Any:
            # torch's caching allocator, on torch's stream
            make = torch.zeros if zero else torch.empty
            t = make(shape, dtype=getattr(torch, dt.name), device=dev)
            return cuda.as_cuda_array(t, sync=False)

    else:
        dtype = np.dtype(leaves[0].dtype)
        try:
            xs = [x.reshape(p, n, q) for x in leaves]
        except (NotImplementedError, ValueError) as err:
            raise ValueError(
                "CUDA device arrays must be C-contiguous to be scanned; copy them first "
                "(e.g. cuda.to_device(np.ascontiguousarray(host)))"
            ) from err
        outs = [cuda.device_array((p, n, q), dtype) for _ in leaves]
        res = outs
        stream = 0

        def empty(shape: tuple[int, ...], dt: np.dtype = dtype, zero: bool = False) -> Any:
            if zero:
                return cuda.to_device(np.zeros(shape, dt))
            return cuda.device_array(shape, dt)

    mod, tile = kernels(monoid, dtype)
    ident = tuple(dtype.type(v) for v in monoid.identity(dtype))
    if n > 0 and p * q > 0:
        with _jit.small_grids():
            _launch(mod, tile, xs, outs, bool(reverse), bool(exclusive), ident, stream, empty)
    return [r.reshape(shape) if not is_torch else r.view(shape) for r in res]


_CAST_SOURCE = """
from numba import cuda


@cuda.jit
def cast(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]
"""


def convert(x: Any, dtype: Any) -> Any:
    """A new device array with ``x`` cast elementwise to ``dtype`` (e.g. float16 <-> float32)."""
    from numba import cuda

    shape = tuple(int(d) for d in x.shape)
    src = x if hasattr(x, "copy_to_host") else cuda.as_cuda_array(x)
    try:
        flat = src.reshape(-1)
    except (NotImplementedError, ValueError) as err:
        raise ValueError(
            "CUDA device arrays must be C-contiguous to be scanned; copy them first "
            "(e.g. cuda.to_device(np.ascontiguousarray(host)))"
        ) from err
    out = cuda.device_array(flat.shape, np.dtype(dtype))
    if flat.size:
        cast = _jit.load_module(_CAST_SOURCE, "cuda_cast").cast
        cast[-(-flat.size // 256), 256](flat, out)
    return out.reshape(shape)


_SHIFT_SOURCE = """
from numba import cuda


@cuda.jit
def shift(src, starts, ident, step, dst):
    # dst[a, i, b]: the identity ident[a, 0, b] where a segment starts or
    # nothing comes before (the first element in scan order), else src[a, i - step, b]
    k = cuda.grid(1)
    p, n, q = dst.shape
    if k < p * n * q:
        a = k // (n * q)
        i = (k // q) % n
        b = k % q
        j = i - step
        if starts[a, i, b] or j < 0 or j >= n:
            dst[a, i, b] = ident[a, 0, b]
        else:
            dst[a, i, b] = src[a, j, b]
"""


def shift(x: Any, starts: np.ndarray, ident: np.ndarray, axis: int, reverse: bool) -> Any:
    """A device array of ``x``'s shape: the element before in scan order, ``ident`` at a start.

    ``starts`` (host, bool, ``x``'s shape) marks the segment starts in scan
    order; for ``reverse`` the element before is the one at ``i + 1``.
    ``ident`` (host) has ``x``'s shape with length 1 along ``axis``.  This
    turns an exclusive segmented scan into an inclusive one.
    """
    from numba import cuda

    shape = tuple(int(d) for d in x.shape)
    n = shape[axis]
    p = int(np.prod(shape[:axis], dtype=np.int64))
    q = int(np.prod(shape[axis + 1 :], dtype=np.int64))
    dtype = np.dtype(x.dtype)
    try:
        src = x.reshape(p, n, q)
    except (NotImplementedError, ValueError) as err:
        raise ValueError(
            "CUDA device arrays must be C-contiguous to be scanned; copy them first "
            "(e.g. cuda.to_device(np.ascontiguousarray(host)))"
        ) from err
    out = cuda.device_array((p, n, q), dtype)
    if p * n * q:
        flags = cuda.to_device(np.ascontiguousarray(starts, dtype=np.uint8).reshape(p, n, q))
        e = cuda.to_device(np.ascontiguousarray(ident, dtype=dtype).reshape(p, 1, q))
        kernel = _jit.load_module(_SHIFT_SOURCE, "cuda_shift").shift
        kernel[-(-(p * n * q) // 256), 256](src, flags, e, -1 if reverse else 1, out)
    return out.reshape(shape)
