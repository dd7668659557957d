"""N-body accuracy tables and speed comparison: ``python -m benchmarks.nbody_accuracy``.

One process, one command.  Three distributions (``propopt_case_studies.nbody.distributions``:
Plummer sphere, two clusters plus a thin disc, uniform cube), each code
measured against the exact sum *with its own softening* at a random sample
of targets (the exact sum there is :func:`propopt.direct_gravity`, all
sources, float64):

* propopt's FMM (``propopt_case_studies.nbody.fmm``) at several ``tol``, Plummer
  softening ``EPS``, and its mutual method at several ``tol`` on the median;
* propopt's Barnes-Hut tree at its defaults (theta 0.7, quadrupole, float32 loops);
* pytreegrav 1.x ``Accel(pos, m, h, parallel=True)`` at its defaults (theta
  0.7, monopole), spline softening ``h = 2.8 EPS`` (the Plummer-equivalent
  length), exact sum with the same spline kernel;
* fmm3dpy ``lfmm3d(eps=..., sources, charges, pg=2)`` (FMM3D's Laplace FMM,
  one thread), unsoftened; its kernel carries ``1/(4 pi)``, undone here.

Then the speed comparisons, each pair timed in interleaved rounds
(:func:`propopt_case_studies.capstone.measure.compare`): the FMM against pytreegrav at errors at
or below pytreegrav's, against fmm3dpy at a median error <= 3e-5 (both
unsoftened, same bodies), and the FMM's time against N.  ``--write``
replaces the block between the markers in docs/nbody.md; ``--calibrate``
sweeps ``(p, theta)`` for :data:`propopt_case_studies.nbody.fmm.TOL_TABLE`.
"""

from __future__ import annotations

import argparse
import importlib
import re
import time
from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np

import propopt as pp
from propopt.files import write_text
from propopt_case_studies.capstone.measure import compare
from propopt_case_studies.nbody import THETA, barnes_hut, fmm, fmm_parameters
from propopt_case_studies.nbody.distributions import DISTRIBUTIONS

EPS = 1e-3
TREE_THETAS = (0.8, 0.75, 0.72, 0.7, 0.65, 0.6, 0.5)
"""Opening angles tried, largest first, for the tree against pytreegrav."""
TOLS = (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7)
MUTUAL_MEDIAN_TOLS = (1e-2, 1e-3, 1e-4)
"""Median tolerances of the accuracy tables' rows with ``quantile=0.5`` (the mutual method)."""
DOC = Path(__file__).resolve().parents[1] / "docs" / "nbody.md"
START, END = "<!-- nbody_accuracy:start -->", "<!-- nbody_accuracy:end -->"


def _errors(a: np.ndarray, a0: np.ndarray) -> np.ndarray:
    return np.linalg.norm(a - a0, axis=1) / np.linalg.norm(a0, axis=1)


def _stats(e: np.ndarray) -> tuple[float, float, float]:
    return float(np.median(e)), float(np.quantile(e, 0.99)), float(e.max())


def _timed(fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    r = fn()
    return r, time.perf_counter() - t


class Exact:
    """Exact sums at a sample of targets, per softening, computed once."""

    def __init__(self, pos: np.ndarray, m: np.ndarray, sample: int, seed: int = 0) -> None:
        self.pos, self.m = pos, m
        n = len(pos)
        self.idx = np.sort(np.random.default_rng(seed).choice(n, min(sample, n), replace=False))
        self._cache: dict[tuple[str, float], np.ndarray] = {}

    def __call__(self, softening: str = "plummer", eps: float = EPS) -> np.ndarray:
        key = (softening, eps)
        if key not in self._cache:
            self._cache[key] = pp.direct_gravity(
                self.pos, self.m, eps=eps, targets=self.pos[self.idx], softening=softening
            )[0]
        return self._cache[key]

    def err(self, a: np.ndarray, softening: str = "plummer", eps: float = EPS) -> np.ndarray:
        return _errors(a[self.idx], self(softening, eps))


def _ptg(pos: np.ndarray, m: np.ndarray) -> np.ndarray:
    import pytreegrav

    return pytreegrav.Accel(pos, m, np.full(len(pos), 2.8 * EPS), parallel=True)


def _f3d(pos: np.ndarray, m: np.ndarray, eps: float) -> np.ndarray:
    import fmm3dpy

    out = fmm3dpy.lfmm3d(eps=eps, sources=np.ascontiguousarray(pos.T), charges=m, pg=2)
    return 4 * np.pi * out.grad.T  # grad of sum q / (4 pi r): the acceleration / (4 pi)


def _fmm(pos: np.ndarray, m: np.ndarray, **kwargs) -> np.ndarray:  # type: ignore[no-untyped-def]
    # accelerations only (fmm returns the pair (acc, None))
    return fmm(pos, m, **kwargs)[0]


def _bh(pos: np.ndarray, m: np.ndarray, theta: float = THETA) -> np.ndarray:
    # accelerations only, as pytreegrav.Accel
    return barnes_hut(pos, m, eps=EPS, theta=theta, precision="float32", potential=False)[0]


def _per_body_core(ms: float, n: int, cores: int) -> str:
    """Core time per body: ``ms`` on ``cores`` cores for ``n`` bodies (compares machines)."""
    return f"{ms * 1e3 * cores / n:.2f} µs"


def tree_vs_pytreegrav(sizes: tuple[int, ...], sample: int, rounds: int) -> list[str]:
    """propopt's tree against pytreegrav on Plummer spheres, at errors at or below pytreegrav's.

    The largest ``theta`` of :data:`TREE_THETAS` whose median and 99th
    percentile are both at or below pytreegrav's (each code against the exact
    sum with its own softening), then both timed in ``rounds`` interleaved
    rounds (medians), both on numba's full thread count (pytreegrav always
    uses it; propopt's load-based thread policy is pinned to it here).
    """
    import numba

    from propopt_case_studies.capstone.machine import cpu_model

    lines = [
        "",
        f"Barnes-Hut against pytreegrav ({cpu_model()}, {pp.threads.usable_cpus()} cores, "
        f"numba threads {numba.get_num_threads()}, medians of {rounds} interleaved rounds):",
        "",
        "| N | pytreegrav error (median / p99) | propopt tree | its error | pytreegrav "
        "| propopt | ratio (IQR) | µs a body per core (pytreegrav / propopt) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    cores = numba.get_num_threads()
    for n in sizes:
        pos, m = DISTRIBUTIONS["plummer"](n, seed=1)
        ex = Exact(pos, m, sample)
        _bh(pos[:3000], m[:3000])
        ep = ex.err(_ptg(pos, m), "spline", 2.8 * EPS)
        pm, p99 = float(np.median(ep)), float(np.quantile(ep, 0.99))
        for theta in TREE_THETAS:
            e = ex.err(_bh(pos, m, theta))
            if np.median(e) <= pm and np.quantile(e, 0.99) <= p99:
                break
        else:
            continue
        with pp.threads.set_num_threads(numba.get_num_threads()):
            c = compare(partial(_ptg, pos, m), partial(_bh, pos, m, theta), rounds=rounds)
        lines.append(
            f"| {n:,} | {pm:.1e} / {p99:.1e} | theta {theta:g}, quadrupole, float32 loops, "
            "no potentials | "
            f"{np.median(e):.1e} / {np.quantile(e, 0.99):.1e} | {c.baseline_ms / 1e3:.2f} s | "
            f"{c.optimized_ms / 1e3:.3f} s | **{c.ratio:.1f}x** ({c.ratio_lo:.1f} - "
            f"{c.ratio_hi:.1f}) | {_per_body_core(c.baseline_ms, n, cores)} / "
            f"{_per_body_core(c.optimized_ms, n, cores)} |"
        )
        print(lines[-1], flush=True)
    return lines


def accuracy_tables(n: int, sample: int, f3d_eps: tuple[float, ...]) -> list[str]:
    lines = []
    for name, sampler in DISTRIBUTIONS.items():
        pos, m = sampler(n, seed=1)
        ex = Exact(pos, m, sample)
        rows = []
        fmm(pos[:3000], m[:3000], tol=TOLS[0])  # compile (from numba's cache) outside the timings
        fmm(pos[:3000], m[:3000], tol=TOLS[-1])
        _bh(pos[:3000], m[:3000])
        for tol in TOLS:
            a, t = _timed(partial(_fmm, pos, m, eps=EPS, tol=tol))
            rows.append((f"propopt FMM, tol {tol:g}", *_stats(ex.err(a)), t))
        for tol in MUTUAL_MEDIAN_TOLS:  # self-gravity on the median: the mutual method
            _fmm(pos[:3000], m[:3000], eps=EPS, tol=tol, quantile=0.5)  # compiled
            a, t = _timed(partial(_fmm, pos, m, eps=EPS, tol=tol, quantile=0.5))
            rows.append((f"propopt FMM, tol {tol:g} on the median", *_stats(ex.err(a)), t))
        a, t = _timed(partial(_bh, pos, m))
        rows.append(("propopt Barnes-Hut, theta 0.7, quadrupole", *_stats(ex.err(a)), t))
        try:
            _ptg(pos, m)  # pytreegrav compiles its large-N paths on first use
            a, t = _timed(partial(_ptg, pos, m))
            rows.append(
                (
                    "pytreegrav, theta 0.7 (spline h = 2.8 eps)",
                    *_stats(ex.err(a, "spline", 2.8 * EPS)),
                    t,
                )
            )
        except ImportError:
            pass
        try:
            for e in f3d_eps:
                a, t = _timed(partial(_f3d, pos, m, e))
                rows.append(
                    (
                        f"fmm3dpy, eps {e:g} (unsoftened, 1 thread)",
                        *_stats(ex.err(a, "plummer", 0.0)),
                        t,
                    )
                )
        except ImportError:
            pass
        lines += [
            "",
            f"**{name}**, N = {n:,}, errors at {len(ex.idx)} random bodies:",
            "",
            "| code | median | 99th percentile | max | time |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {r[0]} | {r[1]:.1e} | {r[2]:.1e} | {r[3]:.1e} | {r[4]:.2f} s |" for r in rows]
        print("\n".join(lines[-len(rows) - 4 :]), flush=True)
    return lines


def speed(
    sizes: tuple[int, ...],
    sample: int,
    f3d_sizes: tuple[int, ...],
    growth: tuple[int, ...],
    rounds: int,
) -> list[str]:
    lines = [
        "",
        "| comparison (Plummer) | N | errors (median / p99) | times | ratio | µs a body per core |",
        "|---|---|---|---|---|---|",
    ]
    cores = pp.threads.usable_cpus()
    for n in sizes:
        pos, m = DISTRIBUTIONS["plummer"](n, seed=1)
        ex = Exact(pos, m, sample)
        ep = ex.err(_ptg(pos, m), "spline", 2.8 * EPS)
        pm, p99 = float(np.median(ep)), float(np.quantile(ep, 0.99))
        tol = choice = None
        for tol in TOLS:  # the loosest tol whose errors are at or below pytreegrav's
            e = ex.err(_fmm(pos, m, eps=EPS, tol=tol))
            if np.median(e) <= pm and np.quantile(e, 0.99) <= p99:
                choice = (tol, float(np.median(e)), float(np.quantile(e, 0.99)))
                break
        if choice is None:
            continue
        tol = choice[0]
        c = compare(partial(_ptg, pos, m), partial(_fmm, pos, m, eps=EPS, tol=tol), rounds=rounds)
        lines.append(
            f"| pytreegrav (theta 0.7, 2 threads) vs FMM tol {tol:g} | {n:,} | "
            f"{pm:.1e} / {p99:.1e} vs {choice[1]:.1e} / {choice[2]:.1e} | "
            f"{c.baseline_ms / 1e3:.2f} s vs {c.optimized_ms / 1e3:.3f} s | **{c.ratio:.1f}x** | "
            f"{_per_body_core(c.baseline_ms, n, cores)} vs "
            f"{_per_body_core(c.optimized_ms, n, cores)} |"
        )
        c = compare(partial(_ptg, pos, m), partial(_bh, pos, m), rounds=rounds)
        eb = ex.err(_bh(pos, m))
        lines.append(
            f"| pytreegrav vs propopt Barnes-Hut (theta 0.7, quadrupole) | {n:,} | "
            f"{pm:.1e} / {p99:.1e} vs {np.median(eb):.1e} / {np.quantile(eb, 0.99):.1e} | "
            f"{c.baseline_ms / 1e3:.2f} s vs {c.optimized_ms / 1e3:.3f} s | **{c.ratio:.1f}x** | "
            f"{_per_body_core(c.baseline_ms, n, cores)} vs "
            f"{_per_body_core(c.optimized_ms, n, cores)} |"
        )
        print("\n".join(lines[-2:]), flush=True)
    for n in f3d_sizes:
        pos, m = DISTRIBUTIONS["plummer"](n, seed=1)
        ex = Exact(pos, m, sample)
        f3 = None
        for e in (1e-2, 3e-3, 1e-3, 1e-4):  # the loosest eps with median <= 3e-5
            err = ex.err(_f3d(pos, m, e), "plummer", 0.0)
            if np.median(err) <= 3e-5:
                f3 = (e, float(np.median(err)), float(np.quantile(err, 0.99)))
                break
        mine = None
        for tol in TOLS:  # tol on the median (quantile=0.5): the error compared here
            err = ex.err(_fmm(pos, m, tol=tol, quantile=0.5), "plummer", 0.0)
            if np.median(err) <= 3e-5:
                mine = (tol, float(np.median(err)), float(np.quantile(err, 0.99)))
                break
        if f3 is None or mine is None:
            continue
        with pp.threads.set_num_threads(1):
            t1 = min(_timed(partial(_fmm, pos, m, tol=mine[0], quantile=0.5))[1] for _ in range(2))
        c = compare(
            partial(_f3d, pos, m, f3[0]),
            partial(_fmm, pos, m, tol=mine[0], quantile=0.5),
            rounds=max(1, rounds // 3 if n >= 10**6 else rounds),
        )
        lines.append(
            f"| fmm3dpy eps {f3[0]:g} (1 thread) vs FMM tol {mine[0]:g} on the median, "
            f"unsoftened | {n:,} | "
            f"{f3[1]:.1e} / {f3[2]:.1e} vs {mine[1]:.1e} / {mine[2]:.1e} | "
            f"{c.baseline_ms / 1e3:.2f} s vs {c.optimized_ms / 1e3:.3f} s (1 thread: "
            f"{t1:.3f} s) | **{c.ratio:.1f}x** (per core {c.baseline_ms / 1e3 / t1:.1f}x) |"
        )
        print(lines[-1], flush=True)
    if growth:
        tol = 1e-3
        ts = []
        for n in growth:
            pos, m = DISTRIBUTIONS["plummer"](n, seed=1)
            fmm(pos, m, eps=EPS, tol=tol)
            ts.append(
                float(
                    np.median(
                        [_timed(partial(_fmm, pos, m, eps=EPS, tol=tol))[1] for _ in range(3)]
                    )
                )
            )
        k = np.polyfit(np.log(growth), np.log(ts), 1)[0]
        lines += [
            "",
            f"FMM time against N (Plummer, tol {tol:g}, median of 3): "
            + ", ".join(f"{n:,}: {t:.2f} s" for n, t in zip(growth, ts, strict=True))
            + f"; fitted exponent **{k:.2f}** (time ~ N^{k:.2f}).",
        ]
        print(lines[-1], flush=True)
    return lines


def _sweep_point(res: dict, key: tuple[int, float], ex: Exact, run, times: int,  # type: ignore[no-untyped-def]
                 label: str) -> None:  # fmt: skip
    """One ``(p, theta)`` of a sweep: its p99 and median error and its best time of ``times``,
    appended to ``res[key]``, and a line."""
    a, t = _timed(run)
    for _ in range(times - 1):
        t = min(t, _timed(run)[1])
    e = ex.err(a)
    res.setdefault(key, []).append((float(np.quantile(e, 0.99)), float(np.median(e)), t))
    print(f"{label}: median {np.median(e):.1e} p99 {np.quantile(e, 0.99):.1e} {t:.3f} s",
          flush=True)  # fmt: skip


def calibrate(sizes: tuple[int, ...], sample: int) -> None:
    """Sweep (p, theta): median and 99th-percentile error and time per distribution and size;
    then the cheapest (p, theta) for each tol, by the 99th percentile and by the median.

    The sweep runs every ``(p, theta)`` with a float64 near field (the expansions' own error,
    whichever table a pair would land in), as the tables were calibrated."""
    with mock.patch.object(
        importlib.import_module("propopt_case_studies.nbody.fmm"), "NEAR32_TOL", np.inf
    ):
        _calibrate(sizes, sample)


def _calibrate(sizes: tuple[int, ...], sample: int) -> None:
    res: dict[tuple[int, float], list[tuple[float, float, float]]] = {}
    for n in sizes:
        for name, sampler in DISTRIBUTIONS.items():
            pos, m = sampler(n, seed=3)
            ex = Exact(pos, m, sample)
            fmm(pos[:3000], m[:3000])
            for p in range(2, 14):
                for th in (0.4, 0.5, 0.6, 0.7, 0.8):
                    run = partial(_fmm, pos, m, eps=EPS, order=p, theta=th)
                    _sweep_point(res, (p, th), ex, run, 1, f"{name} N {n} p {p} theta {th}")
    for q, col in (("p99", 0), ("median", 1)):
        print(f"\n(tol, p, theta): cheapest with {q} <= tol / 1.5 on every distribution and size")
        for tol in (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7):
            ok = [
                (sum(r[2] for r in v), k)
                for k, v in res.items()
                if len(v) == len(DISTRIBUTIONS) * len(sizes) and max(r[col] for r in v) <= tol / 1.5
            ]
            if ok:
                t, (p, th) = min(ok)
                print(f"    ({tol:g}, {p}, {th}),  # {t:.2f} s in all", flush=True)


MUTUAL_ORDERS = range(1, 7)
MUTUAL_THETAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
CALIBRATED_TOLS = (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7)


def calibrate_mutual(sizes: tuple[int, ...], sample: int) -> None:
    """Sweep ``(p, theta)`` of the mutual method (self-gravity) and time the one-way method's
    rows beside it, in one run: for each ``tol`` of either quantile, the cheapest mutual
    ``(p, theta)`` whose error stays at or below ``tol / 1.5`` on every distribution and
    size, and the rows where it takes less time than the one-way row
    (:data:`propopt_case_studies.nbody.fmm.MUTUAL_TOL_TABLE`)."""
    mod = importlib.import_module("propopt_case_studies.nbody.fmm")
    res: dict[tuple[int, float], list[tuple[float, float, float]]] = {}
    oneway: dict[tuple[float, float], float] = {}
    for n in sizes:
        for name, sampler in DISTRIBUTIONS.items():
            pos, m = sampler(n, seed=3)
            ex = Exact(pos, m, sample)
            with mock.patch.object(mod, "_FORCE_MUTUAL", False):
                for q in (0.99, 0.5):
                    for tol in CALIBRATED_TOLS:
                        p, th = fmm_parameters(tol, q)
                        if p > max(MUTUAL_ORDERS) + 2:
                            continue
                        _fmm(pos[:3000], m[:3000], eps=EPS, tol=tol, quantile=q)  # compiled
                        t = min(_timed(partial(_fmm, pos, m, eps=EPS, tol=tol, quantile=q))[1]
                                for _ in range(2))  # fmt: skip
                        oneway[(q, tol)] = oneway.get((q, tol), 0.0) + t
            with mock.patch.object(mod, "_FORCE_MUTUAL", True):
                for p in MUTUAL_ORDERS:
                    _fmm(pos[:3000], m[:3000], eps=EPS, order=p, theta=0.5)  # compiled
                    for th in MUTUAL_THETAS:
                        run = partial(_fmm, pos, m, eps=EPS, order=p, theta=th)
                        label = f"{name} N {n} mutual p {p} theta {th}"
                        _sweep_point(res, (p, th), ex, run, 2, label)
    for q, col in ((0.99, 0), (0.5, 1)):
        print(f"\nquantile {q}: (tol, p, theta), the cheapest mutual with error <= tol / 1.5")
        for tol in CALIBRATED_TOLS:
            ok = [
                (sum(r[2] for r in v), k)
                for k, v in res.items()
                if len(v) == len(DISTRIBUTIONS) * len(sizes) and max(r[col] for r in v) <= tol / 1.5
            ]
            if not ok:
                continue
            t, (p, th) = min(ok)
            one = oneway.get((q, tol))
            verdict = "mutual" if one is not None and t < one else "one-way"
            print(f"    {tol:g}: ({p}, {th}),  # {t:.2f} s in all, one-way row "
                  f"{fmm_parameters(tol, q)} {one if one is None else round(one, 2)} s: {verdict}",
                  flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--n", default="100000", help="bodies of the accuracy tables (of the calibration: a list)"
    )
    ap.add_argument("--sample", type=int, default=2000, help="targets of the exact sums")
    ap.add_argument("--sizes", default="100000,1000000", help="N of the pytreegrav comparison")
    ap.add_argument("--f3d-sizes", default="100000,1000000", help="N of the fmm3dpy comparison")
    ap.add_argument("--growth", default="100000,300000,1000000,2000000,4000000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="write the tables into docs/nbody.md")
    ap.add_argument("--calibrate", action="store_true", help="sweep (p, theta) instead")
    ap.add_argument(
        "--mutual", action="store_true", help="with --calibrate: the mutual method's sweep"
    )
    ap.add_argument(
        "--tree",
        default="",
        help="only the tree against pytreegrav at these N (e.g. 1e6): "
        "python -m benchmarks.nbody_accuracy --tree 1e6",
    )
    args = ap.parse_args()

    def ints(s: str) -> tuple[int, ...]:
        return tuple(int(float(v)) for v in s.split(",") if v)

    if args.calibrate and args.mutual:
        calibrate_mutual(ints(args.n), args.sample)
        return
    if args.calibrate:
        calibrate(ints(args.n), args.sample)
        return
    if args.tree:
        tree_vs_pytreegrav(ints(args.tree), args.sample, args.rounds)
        return
    import numba

    head = [
        f"Measured by `python -m benchmarks.nbody_accuracy --write` on {pp.threads.usable_cpus()} "
        f"cores (numba threads {numba.get_num_threads()}), eps = {EPS:g}; exact sums at a random "
        "sample of bodies (all sources, float64); times include building the trees.",
    ]
    lines = head + accuracy_tables(ints(args.n)[0], args.sample, (1e-3,))
    lines += speed(
        ints(args.sizes), args.sample, ints(args.f3d_sizes), ints(args.growth), args.rounds
    )
    if args.write:
        text = DOC.read_text()
        block = START + "\n" + "\n".join(lines) + "\n" + END
        if START in text:
            text = re.sub(
                re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S
            )
        else:
            text += "\n" + block + "\n"
        write_text(DOC, text)
        print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
