"""CUDA top-k (numba.cuda): radix select of the k-th key, then an ordered gather.

Work is ``O(n)`` for every input order (no data-dependent admission):

1. ``keys``: each value becomes an order-preserving unsigned 64-bit key
   (float bits with the sign trick; ``-0.0`` as ``+0.0``; NaN canonical, or
   key 0 -- below every valid key -- when NaNs are ignored); smaller-is-better
   is the bitwise complement.  32-bit dtypes use the top half and a low
   "valid" bit, so only 4 digit passes are needed.
2. ``hist`` / ``pick``: for each 8-bit digit from the top, histograms (one
   per warp, in shared memory) of the keys that match the digits chosen so
   far; one thread per row then picks the digit holding the k-th largest key
   (4 or 8 passes, each a read of the keys), on the device.
3. ``count`` / ``offsets`` / ``gather``: each block owns a tile of
   ``THREADS * ITEMS`` keys and counts those above the k-th key and equal to
   it; exclusive scans of the tiles' counts (one block per row) give every
   tile its output offsets, and a block scan of the rare winners inside a
   tile keeps them in index order.  So, among keys equal to the k-th,
   exactly the smallest indices are taken: ties are deterministic, as on
   the CPU.
4. The ``<= k`` winners are sorted (key descending, index ascending) with
   torch's sort on the device, unless ``sorted=False`` (then they stay in
   the gather's order), and the values gathered.

For torch tensors, buffers come from torch's caching allocator and every
kernel runs on torch's current stream (``select``, for numba device arrays,
uses numba's allocator and stream 0).  The host waits for the device only
when NaNs are ignored in a float input: it reads each row's count of NaNs
(the keys pass counts them) to check that the rows keep equally many
values.  The module is imported only for CUDA inputs; the test suite runs
it in numba's simulator
(``NUMBA_ENABLE_CUDASIM=1``) on tiny arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, uint64

from ... import _jit
from ._checks import torch_gather

#: Threads per block of every kernel.
THREADS = 256

#: Elements per thread segment in ``count`` / ``gather``.
ITEMS = 64

_config: dict[str, int] = {"threads": THREADS, "items": ITEMS}

M32 = uint64(0xFFFFFFFF)
SIGN32 = uint64(0x80000000)
ABS32 = uint64(0x7FFFFFFF)
INF32 = uint64(0x7F800000)
NAN32 = uint64(0x7FC00000)
SIGN64 = uint64(0x8000000000000000)
ABS64 = uint64(0x7FFFFFFFFFFFFFFF)
INF64 = uint64(0x7FF0000000000000)
NAN64 = uint64(0x7FF8000000000000)
ALL64 = uint64(0xFFFFFFFFFFFFFFFF)


def _keys_kernel(wide: bool) -> Any:
    """The kernel writing each row's sort keys, for 64-bit (``wide``) or 32-bit ``bits``.

    ``keys[r, i]`` orders ``bits[r, i]`` (an integer, or a float's bits with
    ``is_float``: -0 as +0, every NaN as one NaN above +inf) as unsigned
    integers, largest first with ``desc`` and smallest first without; a
    32-bit key sits in the high half with a 1 below it (a valid entry), a
    64-bit key is the whole word.  With ``nan_ignore`` a NaN's key is 0 and
    ``ignored[r]`` counts it.
    """
    mask = ALL64 if wide else M32
    sign, absmask, inf, nan = (
        (SIGN64, ABS64, INF64, NAN64) if wide else (SIGN32, ABS32, INF32, NAN32)
    )
    shift = uint64(0) if wide else uint64(32)
    valid_bit = uint64(0) if wide else uint64(1)

    @cuda.jit
    def keys_kernel(bits, keys, is_float, desc, nan_ignore, ignored):  # type: ignore[no-untyped-def]
        per = cuda.gridDim.x // bits.shape[0]  # blocks per row: the grid is flat (rows > 65535)
        r = cuda.blockIdx.x // per
        n = bits.shape[1]
        i = (cuda.blockIdx.x - r * per) * cuda.blockDim.x + cuda.threadIdx.x
        c = 0
        while i < n:
            u = uint64(bits[r, i]) & mask
            valid = True
            if is_float:
                if (u & absmask) > inf:
                    if nan_ignore:
                        valid = False
                    u = nan
                if u == sign:
                    u = uint64(0)
                u = (u ^ mask) if (u & sign) != 0 else (u | sign)
            else:
                u = u ^ sign
            if not desc:
                u = u ^ mask
            keys[r, i] = ((u << shift) | valid_bit) if valid else uint64(0)
            if not valid:
                c += 1
            i += per * cuda.blockDim.x
        if c:
            cuda.atomic.add(ignored, r, c)

    return keys_kernel


_keys32 = _keys_kernel(wide=False)
_keys64 = _keys_kernel(wide=True)


#: Warps per block whose histograms a block keeps apart (``THREADS / 32``).
_WARPS = 8


@cuda.jit
def _hist(keys, prefix, mask, shift, hist):  # type: ignore[no-untyped-def]
    # one 256-bin histogram per warp: the first digits of random keys fall in
    # a few bins, and one shared histogram would serialize their atomics
    per = cuda.gridDim.x // keys.shape[0]
    r = cuda.blockIdx.x // per
    n = keys.shape[1]
    local = cuda.shared.array((_WARPS, 256), dtype=np.int32)
    t = cuda.threadIdx.x
    w = (t // 32) % _WARPS
    for d in range(t, _WARPS * 256, cuda.blockDim.x):
        local[d // 256, d % 256] = 0
    cuda.syncthreads()
    p = prefix[r]
    i = (cuda.blockIdx.x - r * per) * cuda.blockDim.x + t
    while i < n:
        key = keys[r, i]
        if (key & mask) == p:
            cuda.atomic.add(local, (w, int((key >> shift) & uint64(255))), 1)
        i += per * cuda.blockDim.x
    cuda.syncthreads()
    for d in range(t, 256, cuda.blockDim.x):
        c = 0
        for j in range(_WARPS):
            c += local[j, d]
        if c != 0:
            cuda.atomic.add(hist, (r, d), c)


@cuda.jit
def _pick(hist, prefix, remaining, shift):  # type: ignore[no-untyped-def]
    # one thread per row: the digit that holds the row's remaining-th best key;
    # the histogram is cleared for the next pass
    r = cuda.grid(1)
    if r >= hist.shape[0]:
        return
    rem = remaining[r]
    c = 0
    d = 255
    while rem > 0 and d >= 0:
        h = hist[r, d]
        if c + h >= rem:
            remaining[r] = rem - c
            prefix[r] |= uint64(d) << shift
            break
        c += h
        d -= 1
    for d in range(256):
        hist[r, d] = 0


@cuda.jit
def _count(keys, kth, low, items, gt, eq):  # type: ignore[no-untyped-def]
    # block (s, r) counts the keys of tile s (blockDim * items elements) that
    # are above row r's k-th key and equal to it
    r = cuda.blockIdx.x // gt.shape[1]  # a flat grid of (row, tile) blocks
    s = cuda.blockIdx.x - r * gt.shape[1]
    n = keys.shape[1]
    t = cuda.threadIdx.x
    th = kth[r] | low
    tile = cuda.blockDim.x * items
    sums = cuda.shared.array(2, dtype=np.int64)
    if t < 2:
        sums[t] = 0
    cuda.syncthreads()
    a = 0
    b = 0
    for i in range(s * tile + t, min(s * tile + tile, n), cuda.blockDim.x):
        key = keys[r, i]
        if key > th:
            a += 1
        elif key == th:
            b += 1
    if a:
        cuda.atomic.add(sums, 0, a)
    if b:
        cuda.atomic.add(sums, 1, b)
    cuda.syncthreads()
    if t == 0:
        gt[r, s] = sums[0]
        eq[r, s] = sums[1]


@cuda.jit
def _offsets(gt, eq, kk, need):  # type: ignore[no-untyped-def]
    # one block per row: exclusive prefix sums of the tiles' counts, in place,
    # and the row's numbers of keys above the k-th and of ties to take
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    segs = gt.shape[1]
    part = cuda.shared.array((2, 1024), dtype=np.int64)
    per = (segs + nt - 1) // nt
    lo = min(t * per, segs)
    hi = min(lo + per, segs)
    a = 0
    b = 0
    for j in range(lo, hi):
        a += gt[r, j]
        b += eq[r, j]
    part[0, t] = a
    part[1, t] = b
    cuda.syncthreads()
    if t == 0:  # nt partial sums, scanned by one thread
        ca = 0
        cb = 0
        for j in range(nt):
            xa = part[0, j]
            xb = part[1, j]
            part[0, j] = ca
            part[1, j] = cb
            ca += xa
            cb += xb
        need[r, 0] = ca
        need[r, 1] = kk - ca
    cuda.syncthreads()
    a = part[0, t]
    b = part[1, t]
    for j in range(lo, hi):
        xa = gt[r, j]
        xb = eq[r, j]
        gt[r, j] = a
        eq[r, j] = b
        a += xa
        b += xb


@cuda.jit
def _gather(keys, kth, low, items, gt_off, eq_off, need, out):  # type: ignore[no-untyped-def]
    # block (s, r) writes the positions of tile s's winners in index order:
    # the keys above the k-th, then the first ties until the row has k
    r = cuda.blockIdx.x // gt_off.shape[1]  # a flat grid of (row, tile) blocks
    s = cuda.blockIdx.x - r * gt_off.shape[1]
    n = keys.shape[1]
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    th = kth[r] | low
    ngt = need[r, 0]
    neq = need[r, 1]
    a = gt_off[r, s]
    b = eq_off[r, s]
    flags = cuda.shared.array(1024, dtype=np.int64)
    tile = nt * items
    for base in range(s * tile, min(s * tile + tile, n), nt):
        i = base + t
        f = 0
        if i < n:
            key = keys[r, i]
            if key > th:
                f = 1
            elif key == th:
                f = 1 << 32
        # rare: scan the flags (both counts packed in one int64)
        if cuda.syncthreads_or(1 if f != 0 else 0):
            flags[t] = f
            cuda.syncthreads()
            step = 1
            while step < nt:
                v = flags[t - step] if t >= step else 0
                cuda.syncthreads()
                flags[t] += v
                cuda.syncthreads()
                step *= 2
            incl = flags[t]
            total = flags[nt - 1]
            cuda.syncthreads()
            if f == 1:
                out[r, a + (incl & 0xFFFFFFFF) - 1] = i
            elif f != 0:
                q = b + (incl >> 32) - 1
                if q < neq:
                    out[r, ngt + q] = i
            a += total & 0xFFFFFFFF
            b += total >> 32


#: Blocks a histogram pass launches in all (rows share them).
_TARGET_BLOCKS = 2048


def _grid(n: int, rows: int = 1) -> int:
    """Blocks per row for a grid-stride pass over rows of ``n``."""
    per_row = max(1, -(-_TARGET_BLOCKS // max(rows, 1)))
    return max(1, min(-(-n // _config["threads"]), per_row))


class Buffers:
    """Device buffers and stream for one call: numba's allocator and stream 0."""

    stream: Any = 0

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return cuda.device_array(shape, dtype)

    def full(self, shape: tuple[int, ...], value: Any, dtype: Any) -> Any:
        return cuda.to_device(np.full(shape, value, dtype))


class TorchBuffers(Buffers):
    """Buffers from torch's caching allocator, kernels on torch's current stream.

    A fresh ``cudaMalloc`` of the keys (8 bytes per value) per call, and the
    synchronous host-to-device copies of numba's allocator, cost more than
    the kernels themselves.
    """

    def __init__(self, device: Any) -> None:
        import torch

        self.torch, self.device = torch, device
        self.stream = cuda.external_stream(torch.cuda.current_stream(device).cuda_stream)

    def _dtype(self, dtype: Any) -> Any:
        return getattr(self.torch, np.dtype(dtype).name)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        t = self.torch.empty(shape, dtype=self._dtype(dtype), device=self.device)
        return cuda.as_cuda_array(t)

    def full(self, shape: tuple[int, ...], value: Any, dtype: Any) -> Any:
        t = self.torch.full(shape, value, dtype=self._dtype(dtype), device=self.device)
        return cuda.as_cuda_array(t)


def _select_device(
    bits: Any, wide: bool, is_float: bool, k: int, desc: bool, nanbig: bool, buf: Buffers
) -> tuple[Any, Any]:
    """Best ``k`` positions per row, on the device: ``(positions, keys)``.

    The positions ``(rows, kk)`` are those above the k-th key in index order,
    then the ties with the smallest indices; ``keys`` are the order keys.
    The host reads one number per row (its ignored NaNs) only when NaNs are
    ignored in a float input; otherwise nothing waits for the device.
    """
    with _jit.small_grids():
        return _select_launches(bits, wide, is_float, k, desc, nanbig, buf)


def _select_launches(
    bits: Any, wide: bool, is_float: bool, k: int, desc: bool, nanbig: bool, buf: Buffers
) -> tuple[Any, Any]:
    """:func:`_select_device` without the warning guard."""
    rows, n = bits.shape
    tpb = _config["threads"]
    st = buf.stream
    keys = buf.empty((rows, n), np.uint64)
    ignored = buf.full((rows,), 0, np.int64)
    kern = _keys64 if wide else _keys32
    grid = _grid(n, rows) * rows  # flat: a y dimension would stop at 65535 rows
    kern[grid, tpb, st](bits, keys, is_float, desc, not nanbig, ignored)
    if is_float and not nanbig:
        # an ignored NaN has key 0, below every valid key
        valid = n - ignored.copy_to_host(stream=st)
        if not isinstance(st, int):
            st.synchronize()
        kk = int(valid.min()) if rows else 0
        if rows and int(valid.max()) != kk and kk < k:
            raise ValueError(
                f"rows of x hold different numbers of non-NaN values ({kk} to "
                f"{int(valid.max())}) and k={k}; with nan='ignore' the result would be "
                "ragged: pass nan='largest' (torch's convention) or a smaller k"
            )
        kk = min(k, kk)
    else:
        kk = min(k, n)
    if kk == 0:
        return buf.empty((rows, 0), np.int64), keys
    # the k-th largest key of each row, one 8-bit digit at a time
    prefix = buf.full((rows,), 0, np.uint64)
    remaining = buf.full((rows,), kk, np.int64)
    hist = buf.full((rows, 256), 0, np.int64)
    low = 32 if not wide else 0
    pgrid = (rows + tpb - 1) // tpb
    for shift in range(56, low - 8, -8):
        mask = np.uint64((0xFFFFFFFFFFFFFFFF << (shift + 8)) & 0xFFFFFFFFFFFFFFFF)
        _hist[grid, tpb, st](keys, prefix, mask, np.uint64(shift), hist)
        _pick[pgrid, tpb, st](hist, prefix, remaining, np.uint64(shift))
    lowbit = np.uint64(0 if wide else 1)  # 32-bit keys carry a low "valid" bit
    # gather: keys above the k-th, then the smallest indices among equal ones
    items = _config["items"]
    segs = (n + tpb * items - 1) // (tpb * items)
    gt = buf.empty((rows, segs), np.int64)
    eq = buf.empty((rows, segs), np.int64)
    need = buf.empty((rows, 2), np.int64)
    _count[segs * rows, tpb, st](keys, prefix, lowbit, items, gt, eq)
    _offsets[rows, min(1024, tpb * 4), st](gt, eq, kk, need)
    out = buf.empty((rows, kk), np.int64)
    _gather[segs * rows, tpb, st](keys, prefix, lowbit, items, gt, eq, need, out)
    return out, keys


def select(
    bits: Any, wide: bool, is_float: bool, k: int, desc: bool, nanbig: bool, ordered: bool = True
) -> np.ndarray:
    """Best ``k`` positions per row of ``bits`` (a (rows, n) int32/int64 device array).

    Returns host int64 positions ``(rows, kk)`` sorted best first (with
    ``ordered=False`` in the gather's order: no copy of keys, no host sort).
    Raises for ``nan='ignore'`` rows with different numbers of NaNs when that
    would make the result ragged.
    """
    out, keys = _select_device(bits, wide, is_float, k, desc, nanbig, Buffers())
    pos = out.copy_to_host()
    if not ordered or pos.shape[1] == 0:
        return pos  # as gathered: those above the k-th key, then ties, each by index
    # sort the winners: key descending, index ascending
    hk = keys.copy_to_host()
    result = np.empty_like(pos)
    for r in range(pos.shape[0]):
        kr = hk[r, pos[r]]
        result[r] = pos[r][np.lexsort((pos[r], ~kr))]
    return result


def order(pos: Any, keys: Any) -> Any:
    """Sort each row of positions best first (key descending, index ascending), in torch.

    ``pos`` (rows, kk) int64 and ``keys`` (rows, n) int64 holding the unsigned
    order keys' bits: flipping the sign bit makes signed order the unsigned one.
    """
    import torch

    ps, _ = torch.sort(pos, dim=1)
    kv = torch.bitwise_xor(keys.gather(1, ps), torch.iinfo(torch.int64).min)
    _, o = torch.sort(kv, dim=1, descending=True, stable=True)
    return ps.gather(1, o)


def topk(
    x: Any, k: int, ax: int, largest: bool, nanbig: bool, ordered: bool = True
) -> tuple[Any, Any]:
    """topk of a CUDA tensor (torch) along ``ax``: values and int64 indices on the device."""
    import torch

    t = torch.as_tensor(x, device="cuda") if not isinstance(x, torch.Tensor) else x
    xm = t.detach().movedim(ax, -1)
    lead, n = tuple(xm.shape[:-1]), xm.shape[-1]
    rows = int(np.prod(lead, dtype=np.int64))
    kk = min(k, n)
    if n == 0 or rows == 0:
        idx = torch.empty(lead + (kk,), dtype=torch.int64, device=t.device)
        return torch_gather(t, ax, idx.movedim(-1, ax)), idx.movedim(-1, ax)
    x2 = xm.reshape(rows, n)
    is_float = x2.dtype.is_floating_point
    if is_float and x2.element_size() < 4:  # float16, bfloat16, float8: exact
        x2 = x2.float()
    elif x2.dtype == getattr(torch, "uint64", None):
        # order preserving, as for NumPy: flip the top bit (a cast would wrap)
        x2 = x2.view(torch.int64).bitwise_xor(torch.iinfo(torch.int64).min)
    elif x2.dtype in (torch.bool, torch.uint8, torch.int8, torch.int16):
        x2 = x2.to(torch.int32)
    elif not is_float and x2.dtype not in (torch.int32, torch.int64):
        x2 = x2.to(torch.int64)
    x2 = x2.contiguous()
    wide = x2.element_size() == 8
    bits = x2.view(torch.int64 if wide else torch.int32)
    with torch.cuda.device(t.device):
        buf = TorchBuffers(t.device)
        out, keys = _select_device(
            cuda.as_cuda_array(bits), wide, is_float, kk, largest, nanbig, buf
        )
        if out.shape[1] == 0:
            pos = torch.empty((rows, 0), dtype=torch.int64, device=t.device)
        else:
            pos = torch.as_tensor(out, device=t.device)
        if ordered and pos.shape[1] > 1:
            pos = order(pos, torch.as_tensor(keys, device=t.device).view(torch.int64))
    idx = pos.reshape(lead + (pos.shape[1],)).movedim(-1, ax)
    return torch_gather(t, ax, idx), idx
