"""The capstone table's rows for Problem 3 (``propopt`` CLI, ``_capstone.PROBLEMS``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from propopt import direct_gravity
from propopt._capstone import gpu_rows, median_ms, review_row

from .barnes_hut import Octree
from .plummer import plummer

#: (bodies, sampled targets for the direct sum) per size.
SIZES = {"small": (20_000, 200), "default": (200_000, 1000), "large": (1_000_000, 1000)}
EPS = 1e-3
THETA = 0.65


def _row(n: int, s: int, t_exact: float, t_fast: float, err: np.ndarray, technique: str,
         device: str) -> dict[str, Any]:  # fmt: skip
    return review_row(
        f"N-body (Plummer, N={n:,})", "O(N^2) all-pairs", "separability + locality", technique,
        f"exact direct sum, timed on {s} targets and scaled to N", t_exact, t_fast,
        float(np.median(err)), device,
    )  # fmt: skip


def _errors(a: np.ndarray, a0: np.ndarray) -> np.ndarray:
    return np.asarray(np.linalg.norm(a - a0, axis=1) / np.linalg.norm(a0, axis=1))


def gpu_row(pos: np.ndarray, m: np.ndarray, idx: np.ndarray, repeats: int,
            device: str) -> dict[str, Any]:  # fmt: skip
    """Both sides on the GPU: the tree walk (a thread per target) and the exact sum.

    The tree is built on the CPU and copied over in each timed call; the
    direct sum (tiled, :func:`propopt.direct_gravity` with ``method='cuda'``)
    runs at ``pos[idx]`` and is scaled to all bodies.
    """
    n, s = pos.shape[0], idx.shape[0]

    def fast() -> np.ndarray:
        tree = Octree.build(pos, m, eps=EPS)
        return tree.field(theta=THETA, quadrupole=True, method="cuda")[0]

    def exact() -> np.ndarray:
        return direct_gravity(pos, m, eps=EPS, targets=pos[idx], method="cuda")[0]

    t_fast = median_ms(fast, repeats, warmup_s=0)
    t_exact = median_ms(exact, repeats, warmup_s=0) * n / s
    err = _errors(fast()[idx], exact())
    return _row(n, s, t_exact, t_fast, err, "octree on Morton order, quadrupole far field, "
                "a GPU thread per target", device)  # fmt: skip


def review(size: str = "default") -> list[dict[str, Any]]:
    """Barnes-Hut (quadrupole, theta 0.65, float32 loops) beside the exact sum, Plummer sphere.

    ``size``: 'small' (N = 2 10^4), 'default' (2 10^5) or 'large' (10^6)
    bodies, softening 1e-3.  The direct sum (:func:`propopt.direct_gravity`,
    threads) is timed on a random sample of targets and scaled to all N
    targets (its cost is exactly linear in the number of targets).
    ``rel_error`` is the median relative acceleration error at the sampled
    targets.  With a CUDA GPU a second row runs both on it (:func:`gpu_row`).
    """
    import numba

    if size not in SIZES:
        raise ValueError(f"size={size!r} is not one of {', '.join(map(repr, SIZES))}")
    n, s = SIZES[size]
    pos, _, m = plummer(n, seed=1)
    idx = np.random.default_rng(0).choice(n, s, replace=False)

    def fast() -> np.ndarray:
        tree = Octree.build(pos, m, eps=EPS)
        return tree.field(theta=THETA, quadrupole=True, precision="float32")[0]

    def exact() -> np.ndarray:
        return direct_gravity(pos, m, eps=EPS, targets=pos[idx])[0]

    repeats = 3 if size != "large" else 1
    t_fast = median_ms(fast, repeats, warmup_s=0)
    t_exact = median_ms(exact, repeats, warmup_s=0) * n / s
    cpu = _row(n, s, t_exact, t_fast, _errors(fast()[idx], exact()),
               "octree on Morton order, quadrupole far field, grouped walk",
               f"cpu ({numba.get_num_threads()} threads)")  # fmt: skip
    return [cpu, *gpu_rows("N-body", lambda device: [gpu_row(pos, m, idx, repeats, device)])]
