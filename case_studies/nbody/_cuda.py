"""The tree walk on the GPU (numba.cuda): one thread per target, stackless.

The pre-order layout makes the walk a loop without a stack: open a node by
going to ``i + 1``, skip it by going to ``next[i]``.  The acceptance test is
the CPU walk's with a group of one target.  Imported lazily.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

_THREADS = 128


@cuda.jit(cache=True)
def _walk_kernel(tgt, src, nodes, nstart, nend, nxt, leaf, th2, quad, out):  # pragma: no cover
    t = cuda.grid(1)
    if t >= tgt.shape[1]:
        return
    tx = tgt[0, t]
    ty = tgt[1, t]
    tz = tgt[2, t]
    te2 = tgt[3, t]
    ax = 0.0
    ay = 0.0
    az = 0.0
    ph = 0.0
    i = 0
    nn = nxt.shape[0]
    while i < nn:
        M = nodes[i, 0]
        if M == 0.0:
            i = nxt[i]
            continue
        dx = tx - nodes[i, 1]
        dy = ty - nodes[i, 2]
        dz = tz - nodes[i, 3]
        d2 = dx * dx + dy * dy + dz * dz
        if d2 > nodes[i, 11] and d2 * th2 > nodes[i, 12]:
            s2 = d2 + 0.5 * (te2 + nodes[i, 10])
            inv = 1.0 / math.sqrt(s2)
            inv2 = inv * inv
            g1 = inv * inv2
            ax -= M * g1 * dx
            ay -= M * g1 * dy
            az -= M * g1 * dz
            ph -= M * inv
            if quad:
                g2 = 3.0 * g1 * inv2
                g3 = 5.0 * g2 * inv2
                sdx = nodes[i, 4] * dx + nodes[i, 5] * dy + nodes[i, 6] * dz
                sdy = nodes[i, 5] * dx + nodes[i, 7] * dy + nodes[i, 8] * dz
                sdz = nodes[i, 6] * dx + nodes[i, 8] * dy + nodes[i, 9] * dz
                dsd = dx * sdx + dy * sdy + dz * sdz
                tr = nodes[i, 4] + nodes[i, 7] + nodes[i, 9]
                ph -= 0.5 * (dsd * g2 - tr * g1)
                c1 = 0.5 * (tr * g2 - dsd * g3)
                ax += c1 * dx + g2 * sdx
                ay += c1 * dy + g2 * sdy
                az += c1 * dz + g2 * sdz
            i = nxt[i]
        elif leaf[i]:
            for j in range(nstart[i], nend[i]):
                ex = src[0, j] - tx
                ey = src[1, j] - ty
                ez = src[2, j] - tz
                s2 = ex * ex + ey * ey + ez * ez + 0.5 * (te2 + src[4, j])
                if s2 > 0.0:
                    inv = 1.0 / math.sqrt(s2)
                    w = src[3, j] * inv
                    g = w * inv * inv
                    ax += g * ex
                    ay += g * ey
                    az += g * ez
                    ph -= w
            i = nxt[i]
        else:
            i += 1
    out[t, 0] = ax
    out[t, 1] = ay
    out[t, 2] = az
    out[t, 3] = ph


def available() -> bool:
    """Whether numba.cuda can run kernels here (a GPU, or the simulator)."""
    try:
        return bool(cuda.is_available())
    except Exception:  # pragma: no cover - driver errors
        return False


def walk_cuda(tree, tgt: np.ndarray, theta: float, quad: bool) -> np.ndarray:
    """``(m, 4)`` ax, ay, az, phi of ``tree`` at the sorted targets ``tgt`` (4, m)."""
    if not available():
        raise RuntimeError("device='cuda' needs a CUDA GPU (or NUMBA_ENABLE_CUDASIM=1)")
    m = tgt.shape[1]
    arrays = (tgt, tree.src, tree.nodes, tree.start, tree.end, tree.next, tree.leaf.view(np.uint8))
    d = [cuda.to_device(np.ascontiguousarray(a)) for a in arrays]
    out = cuda.device_array((m, 4), np.float64)
    blocks = (m + _THREADS - 1) // _THREADS
    _walk_kernel[blocks, _THREADS](*d, theta * theta, bool(quad), out)
    return out.copy_to_host()
