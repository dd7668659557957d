"""Problem 3 of the chapter: gravity of N bodies, against the exact sum and pytreegrav."""

from __future__ import annotations

import numpy as np

from propopt import direct_gravity
from propopt.threads import usable_cpus
from propopt_case_studies.nbody import Octree, fmm, fmm_parameters, plummer_sphere
from propopt_case_studies.nbody.fmm import GUESS

from ..measure import compare
from ..progress import Progress
from ..rows import Row, row
from .common import cpu_device, gpu_rows, median_rel

SIZES = {"small": 20_000, "default": 50_000, "large": 1_000_000}
"""Bodies of a Plummer sphere (G = M = a = 1) per size."""

DIRECT_MAX = 100_000
"""Above this many bodies the exact sum is timed on ``SAMPLE`` targets (which
cannot halve) and scaled by the bodies and by the halving factor measured
at ``DIRECT_MAX``: its cost per target is exactly linear in the sources."""
SAMPLE = 2_000
EPS = 1e-3
SPLINE = 2.8
"""pytreegrav's cubic-spline softening length with the force of Plummer ``EPS``."""
ROUNDS = {"small": 5, "default": 3, "large": 3}
PLAN_S = {"small": 4.0, "default": 10.0, "large": 120.0}
TICKS = {size: 2 * r for size, r in ROUNDS.items()}

WHAT = ("O(N^2) all pairs", "separability + locality")
TREE = "octree on Morton order, quadrupole far field, grouped walk"
FMM_TOL = 3e-2
"""The FMM's ``tol`` in the race: its median error (~1e-4 on Plummer spheres)
is below the tree's at theta 0.7 (~5e-4), the row's accuracy."""


def compile_peers() -> None:
    """Compile pytreegrav's tree in this process, ahead of the timed run.

    Its octree is a numba jitclass, which numba cannot cache, so every
    process compiles it anew (about 25 s on 2 cores).  Above 4000 bodies its
    ``Accel`` takes the tree path the review times.
    """
    try:
        import pytreegrav
    except ImportError:  # in the bench extra
        return
    pos, _, m = plummer_sphere(5_000, seed=1)
    pytreegrav.Accel(pos, m, np.full(len(m), SPLINE * EPS), parallel=True)


def _fastest(pos, m, idx, exact):  # type: ignore[no-untyped-def]
    """The faster of the tree and the FMM among those at the row's accuracy, and its name.

    The row's accuracy is the tree's median error at its default theta; the
    FMM competes at ``FMM_TOL`` when its median error is no larger.  Each is
    timed once after a warm-up call (a coarse race: the row's rounds follow).
    """
    from ..measure import median_seconds

    def tree() -> np.ndarray:
        return Octree.build(pos, m, eps=EPS).field()[0]  # defaults, as the peer's

    def multipole() -> np.ndarray:
        return fmm(pos, m, eps=EPS, tol=FMM_TOL)[0]

    p, theta = fmm_parameters(min(GUESS * FMM_TOL, 0.1))  # fmm's first guess
    cands = [(median_seconds(tree, 1), tree, TREE)]
    if median_rel(multipole()[idx], exact) <= median_rel(tree()[idx], exact):
        how = f"fast multipole method, tol {FMM_TOL:g} (order {p}, theta <= {theta})"
        cands.append((median_seconds(multipole, 1), multipole, how))
    _, fn, how = min(cands, key=lambda c: c[0])
    return fn, how


def per_body_core(ms: float, n: int) -> str:
    """Core time per body of a field evaluation of ``n`` bodies that took ``ms`` on this
    machine's usable cores: comparable between machines with different core counts."""
    return f"{ms * 1e3 * usable_cpus() / n:.2f} µs"


def review(size: str, progress: Progress) -> list[Row]:
    """The fastest method at the row's accuracy (tree or FMM, named in the row) against the
    exact halved sum (or its scaled sample) and pytreegrav's defaults."""
    n = SIZES[size]
    rounds = ROUNDS[size]
    pos, _, m = plummer_sphere(n, seed=1)
    dev = cpu_device()
    problem = f"N-body, Plummer sphere, N={n:,}"

    idx = np.random.default_rng(0).choice(n, min(SAMPLE, n), replace=False)
    exact = direct_gravity(pos, m, eps=EPS, targets=pos[idx])[0]
    tree, how = _fastest(pos, m, idx, exact)
    if n <= DIRECT_MAX:
        peer = "exact sum, each pair once (propopt.direct_gravity)"
        c = compare(
            lambda: direct_gravity(pos, m, eps=EPS),
            tree,
            rounds=rounds,
            tick=progress.tick,
            baseline_compiles=True,
        )
    else:
        c, exact = _sampled_direct(pos, m, idx, tree, rounds, progress)
        peer = f"exact sum on {len(idx)} targets, scaled to N and by the measured halving factor"
    rows = [
        row(problem, size, *WHAT, how, peer, c, median_rel(tree()[idx], exact), "median rel", dev)
    ]
    try:
        import pytreegrav
    except ImportError:  # in the bench extra
        pytreegrav = None
    if pytreegrav is not None:
        h = np.full(n, SPLINE * EPS)

        def ptg() -> np.ndarray:
            return pytreegrav.Accel(pos, m, h, parallel=True)

        c = compare(ptg, tree, rounds=rounds, tick=progress.tick)
        rows.append(
            row(
                problem,
                size,
                *WHAT,
                f"{how}; {per_body_core(c.optimized_ms, n)} a body per core (pytreegrav "
                f"{per_body_core(c.baseline_ms, n)})",
                "pytreegrav.Accel defaults (theta 0.7, monopole, parallel)",
                c,
                median_rel(tree()[idx], exact),
                "median rel",
                dev,
            )
        )

    def on_gpu(device: str) -> list[Row]:
        def fast() -> np.ndarray:
            return Octree.build(pos, m, eps=EPS).field(device="cuda")[0]

        cg = compare(
            lambda: direct_gravity(pos, m, eps=EPS, targets=pos[idx], device="cuda"),
            fast,
            rounds=rounds,
        )
        cg = cg.baseline_scaled(n / len(idx))
        return [
            row(
                problem,
                size,
                *WHAT,
                TREE + ", a GPU thread per target",
                f"tiled exact sum on the GPU, {len(idx)} targets scaled to N",
                cg,
                median_rel(fast()[idx], exact),
                "median rel",
                device,
            )
        ]

    return rows + gpu_rows("N-body", on_gpu)


def _sampled_direct(pos, m, idx, tree, rounds, progress):  # type: ignore[no-untyped-def]
    """The exact sum timed on ``idx`` as targets, scaled to all bodies and halved.

    A sum at separate targets computes each pair once per target, so it
    cannot halve; the halving factor is measured on the first
    :data:`DIRECT_MAX` bodies (all pairs once, against the same bodies as
    separate targets) and applied to the scaled time.
    """
    from ..measure import median_seconds

    n, k = pos.shape[0], DIRECT_MAX
    sub, msub = pos[:k], m[:k]
    halving = median_seconds(
        lambda: direct_gravity(sub, msub, eps=EPS, targets=sub), repeats=1
    ) / median_seconds(lambda: direct_gravity(sub, msub, eps=EPS), repeats=1)
    c = compare(
        lambda: direct_gravity(pos, m, eps=EPS, targets=pos[idx]),
        tree,
        rounds=rounds,
        tick=progress.tick,
        baseline_compiles=True,
    )
    c = c.baseline_scaled(n / len(idx) / halving)
    exact = direct_gravity(pos, m, eps=EPS, targets=pos[idx])[0]
    return c, exact
