"""CUDA top-k (numba.cuda): radix select of the k-th key, then an ordered gather.

Work is ``O(n)`` for every input order (no data-dependent admission):

1. ``keys``: each value becomes an order-preserving unsigned 64-bit key
   (float bits with the sign trick; ``-0.0`` as ``+0.0``; NaN canonical, or
   key 0 -- below every valid key -- when NaNs are ignored); smaller-is-better
   is the bitwise complement.  32-bit dtypes use the top half and a low
   "valid" bit, so only 4 digit passes are needed.
2. ``hist``: for each 8-bit digit from the top, a shared-memory histogram of
   the keys that match the digits chosen so far; the host picks the digit
   holding the k-th largest key (4 or 8 passes, each a read of the keys).
3. ``count`` / ``gather``: each thread owns a contiguous segment and counts
   its keys above the k-th key and equal to it; exclusive scans of those
   counts (host) give every segment its output offsets, so the winners are
   written in index order and, among keys equal to the k-th, exactly the
   smallest indices are taken -- ties are deterministic, as on the CPU.
4. The ``<= k`` winners are sorted (key descending, index ascending) on the
   host, unless ``sorted=False`` (then they stay in the gather's order), and the
   values gathered on the device.

The module is imported only for CUDA inputs; the test suite runs it in
numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) on tiny arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, uint64

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


@cuda.jit
def _keys32(bits, keys, is_float, desc, nan_ignore):  # type: ignore[no-untyped-def]
    r = cuda.blockIdx.y
    n = bits.shape[1]
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    while i < n:
        u = uint64(bits[r, i]) & M32
        valid = True
        if is_float:
            if (u & ABS32) > INF32:
                if nan_ignore:
                    valid = False
                u = NAN32
            if u == SIGN32:
                u = uint64(0)
            u = (u ^ M32) if (u & SIGN32) != 0 else (u | SIGN32)
        else:
            u = u ^ SIGN32
        if not desc:
            u = u ^ M32
        keys[r, i] = ((u << uint64(32)) | uint64(1)) if valid else uint64(0)
        i += cuda.gridDim.x * cuda.blockDim.x


@cuda.jit
def _keys64(bits, keys, is_float, desc, nan_ignore):  # type: ignore[no-untyped-def]
    r = cuda.blockIdx.y
    n = bits.shape[1]
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    while i < n:
        u = uint64(bits[r, i])
        valid = True
        if is_float:
            if (u & ABS64) > INF64:
                if nan_ignore:
                    valid = False
                u = NAN64
            if u == SIGN64:
                u = uint64(0)
            u = (u ^ ALL64) if (u & SIGN64) != 0 else (u | SIGN64)
        else:
            u = u ^ SIGN64
        if not desc:
            u = u ^ ALL64
        keys[r, i] = u if valid else uint64(0)
        i += cuda.gridDim.x * cuda.blockDim.x


@cuda.jit
def _hist(keys, prefix, mask, shift, hist):  # type: ignore[no-untyped-def]
    r = cuda.blockIdx.y
    n = keys.shape[1]
    local = cuda.shared.array(256, dtype=np.int64)
    t = cuda.threadIdx.x
    for d in range(t, 256, cuda.blockDim.x):
        local[d] = 0
    cuda.syncthreads()
    p = prefix[r]
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    while i < n:
        key = keys[r, i]
        if (key & mask) == p:
            cuda.atomic.add(local, int((key >> shift) & uint64(255)), 1)
        i += cuda.gridDim.x * cuda.blockDim.x
    cuda.syncthreads()
    for d in range(t, 256, cuda.blockDim.x):
        if local[d] != 0:
            cuda.atomic.add(hist, (r, d), local[d])


@cuda.jit
def _count(keys, kth, items, gt, eq):  # type: ignore[no-untyped-def]
    r = cuda.blockIdx.y
    n = keys.shape[1]
    s = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if s < gt.shape[1]:
        a = 0
        b = 0
        th = kth[r]
        for i in range(s * items, min(s * items + items, n)):
            key = keys[r, i]
            if key > th:
                a += 1
            elif key == th:
                b += 1
        gt[r, s] = a
        eq[r, s] = b


@cuda.jit
def _gather(keys, kth, items, gt_off, eq_off, need, out):  # type: ignore[no-untyped-def]
    r = cuda.blockIdx.y
    n = keys.shape[1]
    s = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if s < gt_off.shape[1]:
        a = gt_off[r, s]
        b = eq_off[r, s]
        th = kth[r]
        ngt = need[r, 0]
        neq = need[r, 1]
        for i in range(s * items, min(s * items + items, n)):
            key = keys[r, i]
            if key > th:
                out[r, a] = i
                a += 1
            elif key == th and b < neq:
                out[r, ngt + b] = i
                b += 1


def _grid(n: int) -> int:
    return max(1, min((n + _config["threads"] - 1) // _config["threads"], 1024))


def select(
    bits: Any, wide: bool, is_float: bool, k: int, desc: bool, nanbig: bool, ordered: bool = True
) -> np.ndarray:
    """Best ``k`` positions per row of ``bits`` (a (rows, n) int32/int64 device array).

    Returns host int64 positions ``(rows, kk)`` sorted best first (with
    ``ordered=False`` in the gather's order: no copy of keys, no host sort), and
    the number of valid values per row (NaNs ignored) is checked by the caller.
    """
    rows, n = bits.shape
    tpb = _config["threads"]
    keys = cuda.device_array((rows, n), np.uint64)
    kern = _keys64 if wide else _keys32
    kern[(_grid(n), rows), tpb](bits, keys, is_float, desc, not nanbig)
    # the k-th largest key of each row, one 8-bit digit at a time
    prefix = np.zeros(rows, np.uint64)
    remaining = np.full(rows, k, np.int64)
    valid = None
    top = 64
    low = 32 if not wide else 0
    for shift in range(top - 8, low - 8, -8):
        mask = np.uint64((0xFFFFFFFFFFFFFFFF << (shift + 8)) & 0xFFFFFFFFFFFFFFFF)
        hist = cuda.to_device(np.zeros((rows, 256), np.int64))
        _hist[(_grid(n), rows), tpb](keys, cuda.to_device(prefix), mask, np.uint64(shift), hist)
        h = hist.copy_to_host()
        if valid is None:
            # key 0 marks an ignored NaN: it is below every valid key
            zeros = _count_zero(keys, rows) if is_float and not nanbig else np.zeros(rows, np.int64)
            valid = n - zeros
            remaining = np.minimum(remaining, valid)
        for r in range(rows):
            if remaining[r] <= 0:
                continue
            c = 0
            for d in range(255, -1, -1):
                if c + h[r, d] >= remaining[r]:
                    remaining[r] -= c
                    prefix[r] |= np.uint64(d) << np.uint64(shift)
                    break
                c += h[r, d]
    if not wide:
        prefix |= np.uint64(1)  # the low valid bit
    assert valid is not None
    kk = int(valid.min()) if rows else 0
    if rows and int(valid.max()) != kk and kk < k:
        raise ValueError(
            f"rows of x hold different numbers of non-NaN values ({kk} to {int(valid.max())}) "
            f"and k={k}; with nan='ignore' the result would be ragged: pass nan='largest' "
            "(torch's convention) or a smaller k"
        )
    kk = min(k, kk)
    if kk == 0:
        return np.zeros((rows, 0), np.int64)
    # gather: keys above the k-th, then the smallest indices among equal ones
    items = _config["items"]
    segs = (n + items - 1) // items
    kth = cuda.to_device(prefix)
    gt = cuda.device_array((rows, segs), np.int64)
    eq = cuda.device_array((rows, segs), np.int64)
    sgrid = max(1, (segs + tpb - 1) // tpb)
    _count[(sgrid, rows), tpb](keys, kth, items, gt, eq)
    g, e = gt.copy_to_host(), eq.copy_to_host()
    gt_off = np.cumsum(g, axis=1) - g
    eq_off = np.cumsum(e, axis=1) - e
    ngt = g.sum(axis=1)
    need = np.stack([ngt, kk - ngt], axis=1).astype(np.int64)
    out = cuda.device_array((rows, kk), np.int64)
    _gather[(sgrid, rows), tpb](
        keys, kth, items, cuda.to_device(gt_off), cuda.to_device(eq_off), cuda.to_device(need), out
    )
    pos = out.copy_to_host()
    if not ordered:
        return pos  # as gathered: those above the k-th key, then ties, each by index
    # sort the winners: key descending, index ascending
    hk = keys.copy_to_host() if rows * n <= 4 * kk * rows else None
    result = np.empty_like(pos)
    for r in range(rows):
        kr = hk[r, pos[r]] if hk is not None else _keys_at(keys, r, pos[r])
        order = np.lexsort((pos[r], ~kr))
        result[r] = pos[r][order]
    return result


def _count_zero(keys: Any, rows: int) -> np.ndarray:
    out = cuda.to_device(np.zeros(rows, np.int64))
    _zeros[(_grid(keys.shape[1]), rows), _config["threads"]](keys, out)
    return out.copy_to_host()  # type: ignore[no-any-return]


@cuda.jit
def _zeros(keys, out):  # type: ignore[no-untyped-def]
    r = cuda.blockIdx.y
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    c = 0
    while i < keys.shape[1]:
        if keys[r, i] == uint64(0):
            c += 1
        i += cuda.gridDim.x * cuda.blockDim.x
    if c:
        cuda.atomic.add(out, r, c)


@cuda.jit
def _take(keys, r, pos, out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < pos.shape[0]:
        out[i] = keys[r, pos[i]]


def _keys_at(keys: Any, r: int, pos: np.ndarray) -> np.ndarray:
    out = cuda.device_array(pos.shape[0], np.uint64)
    tpb = _config["threads"]
    _take[max(1, (pos.shape[0] + tpb - 1) // tpb), tpb](keys, r, cuda.to_device(pos), out)
    return out.copy_to_host()  # type: ignore[no-any-return]


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
        return torch.gather(t, ax, idx.movedim(-1, ax)), idx.movedim(-1, ax)
    x2 = xm.reshape(rows, n)
    is_float = x2.dtype.is_floating_point
    if x2.dtype in (torch.float16, torch.bfloat16):
        x2 = x2.float()
    elif x2.dtype in (torch.bool, torch.uint8, torch.int8, torch.int16):
        x2 = x2.to(torch.int32)
    elif not is_float and x2.dtype not in (torch.int32, torch.int64):
        x2 = x2.to(torch.int64)
    x2 = x2.contiguous()
    wide = x2.element_size() == 8
    bits = x2.view(torch.int64 if wide else torch.int32)
    pos = select(cuda.as_cuda_array(bits), wide, is_float, kk, largest, nanbig, ordered)
    idx = torch.from_numpy(pos).to(t.device).reshape(lead + (pos.shape[1],)).movedim(-1, ax)
    return torch.gather(t, ax, idx), idx
