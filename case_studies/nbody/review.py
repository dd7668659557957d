"""The capstone table's row for Problem 3 (``propopt`` CLI, ``_capstone.PROBLEMS``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from propopt import direct_gravity

from .barnes_hut import Octree
from .plummer import plummer

#: (bodies, sampled targets for the direct sum) per size.
SIZES = {"small": (20_000, 200), "default": (200_000, 1000), "large": (1_000_000, 1000)}
EPS = 1e-3
THETA = 0.65


def _median_s(fn: Callable[[], Any], repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def review(size: str = "default") -> dict[str, Any]:
    """Barnes-Hut (quadrupole, theta 0.65, float32 loops) beside the exact sum, Plummer sphere.

    ``size``: 'small' (N = 2 10^4), 'default' (2 10^5) or 'large' (10^6)
    bodies, softening 1e-3.  The direct sum (:func:`propopt.direct_gravity`,
    threads) is timed on a random sample of targets and scaled to all N
    targets (its cost is exactly linear in the number of targets).
    ``rel_error`` is the median relative acceleration error at the sampled
    targets.
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

    Octree.build(pos[:2000], m[:2000], eps=EPS).field(precision="float32")  # JIT warm-up
    direct_gravity(pos[:100], m[:100], eps=EPS, targets=pos[:10])
    repeats = 3 if size != "large" else 1
    t_fast = _median_s(fast, repeats)
    t_exact = _median_s(exact, repeats) * n / s
    a = fast()[idx]
    a0 = exact()
    err = np.linalg.norm(a - a0, axis=1) / np.linalg.norm(a0, axis=1)
    return dict(
        problem=f"N-body (Plummer, N={n:,})",
        bottleneck="O(N^2) all-pairs",
        key_property="separability + locality",
        technique="octree on Morton order, quadrupole far field, grouped walk",
        baseline=f"exact direct sum (threads), timed on {s} targets and scaled to N",
        baseline_ms=1e3 * t_exact,
        optimized_ms=1e3 * t_fast,
        speedup=t_exact / t_fast,
        rel_error=float(np.median(err)),
        device=f"cpu ({numba.get_num_threads()} threads)",
    )
