"""Does ``fmm``'s ``tol`` hold?  ``python -m benchmarks.fmm_tol``.

For each of nine distributions (:data:`CASES`), each ``tol`` and each
``quantile`` (0.5, 0.99), one call of :func:`propopt_case_studies.nbody.fmm`
on ``--n`` bodies, and the achieved quantile of the relative force error
``|a - a_exact| / |a_exact|`` at ``--sample`` random bodies against a float64
direct sum written here (NumPy, chunked; it shares no code with propopt).
Prints, per case, the achieved quantile over ``tol`` and its sampling range:
the order statistics of the sample that bracket the quantile with 95%
confidence (the binomial ranks ``S q -+ 1.96 sqrt(S q (1 - q))``).

``--base DIR`` instead runs this checkout's ``fmm`` beside another
checkout's (its ``case_studies`` loaded by path, so that the editable install
of this one does not shadow it) on the same bodies, interleaved, and prints
both times (medians of ``--rounds`` rounds; the machine may be shared), both
achieved errors and the ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Bodies = tuple[np.ndarray, np.ndarray]


# ------------------------------------------------------------------ distributions
def _plummer_pos(rng: np.random.Generator, n: int, a: float = 1.0) -> np.ndarray:
    """Plummer sphere positions of scale ``a`` by the inverse mass profile (cut at 0.999)."""
    u = rng.uniform(0.0, 0.999, n)
    r = a / np.sqrt(u ** (-2.0 / 3.0) - 1.0)
    v = rng.standard_normal((n, 3))
    return r[:, None] * v / np.linalg.norm(v, axis=1, keepdims=True)


def _unit(n: int) -> np.ndarray:
    return np.full(n, 1.0 / n)


def plummer(n: int, seed: int) -> Bodies:
    return _plummer_pos(np.random.default_rng(seed), n), _unit(n)


def cube(n: int, seed: int) -> Bodies:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (n, 3)), _unit(n)


def two_clusters(n: int, seed: int) -> Bodies:
    """Two Plummer spheres of scale 1, 1000 apart."""
    p = _plummer_pos(np.random.default_rng(seed), n)
    p[: n // 2, 0] += 1000.0
    return p, _unit(n)


def mass_decades(n: int, seed: int) -> Bodies:
    """A Plummer sphere whose masses are log-uniform over 6 decades."""
    rng = np.random.default_rng(seed)
    m = 10.0 ** rng.uniform(-6.0, 0.0, n)
    return _plummer_pos(rng, n), m / m.sum()


def line(n: int, seed: int) -> Bodies:
    p = np.zeros((n, 3))
    p[:, 0] = np.random.default_rng(seed).uniform(-1.0, 1.0, n)
    return p, _unit(n)


def disk(n: int, seed: int) -> Bodies:
    """An exponential disk of scale length 1 and Gaussian thickness 1e-3."""
    rng = np.random.default_rng(seed)
    r = rng.exponential(1.0, n)
    phi = rng.uniform(0.0, 2.0 * np.pi, n)
    z = 1e-3 * rng.standard_normal(n)
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1), _unit(n)


def hernquist(n: int, seed: int) -> Bodies:
    """A Hernquist cusp (density ~ 1/r at the centre), scale 1: ``M(<r) = r^2 / (r + 1)^2``."""
    rng = np.random.default_rng(seed)
    s = np.sqrt(rng.uniform(0.0, 0.999, n))
    r = s / (1.0 - s)
    v = rng.standard_normal((n, 3))
    return r[:, None] * v / np.linalg.norm(v, axis=1, keepdims=True), _unit(n)


def nested(n: int, seed: int) -> Bodies:
    """Three concentric Plummer spheres of scales 1, 1e-3 and 1e-6, a third of the bodies each."""
    rng = np.random.default_rng(seed)
    k = n // 3
    parts = [_plummer_pos(rng, k, 1e-6), _plummer_pos(rng, k, 1e-3), _plummer_pos(rng, n - 2 * k)]
    return np.concatenate(parts), _unit(n)


def speck(n: int, seed: int) -> Bodies:
    """All bodies within a cube of side 1e-9 at ``(1, 1, 1)``."""
    return 1.0 + 1e-9 * np.random.default_rng(seed).random((n, 3)), _unit(n)


CASES: dict[str, Callable[[int, int], Bodies]] = {
    "plummer": plummer,
    "cube": cube,
    "two clusters 1000 apart": two_clusters,
    "masses over 6 decades": mass_decades,
    "line": line,
    "disk": disk,
    "hernquist cusp": hernquist,
    "nested 1e-6/1e-3/1": nested,
    "within 1e-9": speck,
}
"""Name -> ``(n, seed) -> (pos, mass)``: the distributions ``tol`` must hold on (total mass 1,
unsoftened)."""
TOLS = (1e-2, 1e-3, 1e-4, 1e-5)
QUANTILES = (0.5, 0.99)


# ------------------------------------------------------------------ the reference
def exact(pos: np.ndarray, m: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Unsoftened accelerations (G = 1) at the bodies ``idx``, float64, ``j = i`` left out.

    Differences are taken in float64 from the given positions; ``d / |d|^3`` as
    ``(d / s) / s^2`` so that bodies 1e-9 apart neither overflow nor lose digits.
    """
    pos = np.asarray(pos, np.float64)
    out = np.zeros((idx.shape[0], 3))
    step = max(1, min(64, (1 << 22) // max(pos.shape[0], 1)))  # ~100 MB of temporaries
    for i0 in range(0, idx.shape[0], step):
        rows = idx[i0 : i0 + step]
        d = pos[None, :, :] - pos[rows, None, :]
        s = np.sqrt((d * d).sum(axis=2))
        s[np.arange(rows.shape[0]), rows] = np.inf  # the body itself
        s[s == 0.0] = np.inf  # coincident bodies pull nowhere
        out[i0 : i0 + step] = np.einsum("tj,tjk->tk", m[None, :] / (s * s), d / s[..., None])
    return out


def sample(n: int, size: int, seed: int = 0) -> np.ndarray:
    """``size`` distinct random bodies of ``n``, sorted."""
    return np.sort(np.random.default_rng(seed).choice(n, min(size, n), replace=False))


def achieved(a: np.ndarray, a0: np.ndarray, q: float) -> tuple[float, float, float]:
    """The sample's ``q``-quantile of the relative error and its 95% range ``(lo, hi)``.

    The range is the pair of order statistics whose ranks bracket ``S q`` by
    1.96 binomial standard deviations: the true quantile lies between them
    with about 95% confidence.
    """
    den = np.linalg.norm(a0, axis=1)
    e = np.sort(np.linalg.norm(a - a0, axis=1) / np.where(den > 0, den, 1.0))
    s = e.shape[0]
    half = 1.96 * math.sqrt(s * q * (1.0 - q))
    lo = e[max(math.floor(s * q - half) - 1, 0)]
    hi = e[min(math.ceil(s * q + half) - 1, s - 1)]
    return float(np.quantile(e, q)), float(lo), float(hi)


# ------------------------------------------------------------------ the runs
def load_fmm(root: str | None) -> Callable[..., Any]:
    """``fmm`` of this checkout, or of the checkout at ``root`` (loaded by path, so that an
    editable install of this one does not shadow it)."""
    if root is None:
        from propopt_case_studies.nbody import fmm

        return fmm
    pkg = Path(root) / "case_studies"
    name = "base_case_studies"
    spec = importlib.util.spec_from_file_location(
        name, pkg / "__init__.py", submodule_search_locations=[str(pkg)]
    )
    if spec is None or spec.loader is None:
        raise ValueError(f"--base={root!r}: no case_studies package there")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return importlib.import_module(f"{name}.nbody").fmm


def table(n: int, size: int, tols: tuple[float, ...], quantiles: tuple[float, ...],
          names: list[str], fmm: Callable[..., Any], seed: int = 1) -> list[dict]:  # fmt: skip
    """One row per (distribution, tol, quantile): achieved quantile, its range, the time."""
    rows = []
    for name in names:
        pos, m = CASES[name](n, seed)
        idx = sample(n, size)
        a0 = exact(pos, m, idx)
        for q in quantiles:
            for tol in tols:
                t = time.perf_counter()
                a, _ = fmm(pos, m, tol=tol, quantile=q)
                dt = time.perf_counter() - t
                got, lo, hi = achieved(a[idx], a0, q)
                rows.append(dict(case=name, tol=tol, q=q, err=got, lo=lo, hi=hi, time=dt))
                print(
                    f"{name:26s} q {q:<4g} tol {tol:<6g} achieved {got:.2e} "
                    f"[{lo:.2e}, {hi:.2e}] = {got / tol:6.3f} tol  {dt:6.2f} s",
                    flush=True,
                )
    return rows


def side_by_side(n: int, size: int, tols: tuple[float, ...], quantiles: tuple[float, ...],
                 names: list[str], fmm: Callable[..., Any], base: Callable[..., Any],
                 rounds: int, seed: int = 1) -> None:  # fmt: skip
    """This checkout's ``fmm`` against ``base``, interleaved: median times, achieved errors."""
    for name in names:
        pos, m = CASES[name](n, seed)
        idx = sample(n, size)
        a0 = exact(pos, m, idx)
        for q in quantiles:
            for tol in tols:
                times: dict[str, list[float]] = {"new": [], "base": []}
                errs = {}
                for _ in range(rounds):
                    for key, fn in (("base", base), ("new", fmm)):
                        t = time.perf_counter()
                        a, _ = fn(pos, m, tol=tol, quantile=q)
                        times[key].append(time.perf_counter() - t)
                        errs[key] = achieved(a[idx], a0, q)
                tn, tb = float(np.median(times["new"])), float(np.median(times["base"]))
                print(
                    f"{name:26s} n {n} q {q:<4g} tol {tol:<6g} base {tb:7.3f} s "
                    f"({errs['base'][0] / tol:.3f} tol)  new {tn:7.3f} s "
                    f"({errs['new'][0] / tol:.3f} tol, range {errs['new'][1] / tol:.3f}-"
                    f"{errs['new'][2] / tol:.3f})  new/base {tn / tb:.2f}",
                    flush=True,
                )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--sample", type=int, default=1000)
    ap.add_argument("--tols", default=",".join(map(str, TOLS)))
    ap.add_argument("--quantiles", default="0.5,0.99")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated names of CASES")
    ap.add_argument("--base", default=None, help="another checkout's root, for its fmm")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds with --base")
    args = ap.parse_args(argv)
    names = [c for c in args.cases.split(",") if c]
    for c in names:
        if c not in CASES:
            raise SystemExit(f"--cases: {c!r} is not one of {', '.join(CASES)}")
    tols = tuple(float(t) for t in args.tols.split(","))
    qs = tuple(float(q) for q in args.quantiles.split(","))
    if args.base is not None:
        side_by_side(args.n, args.sample, tols, qs, names, load_fmm(None), load_fmm(args.base),
                     args.rounds)  # fmt: skip
        return
    rows = table(args.n, args.sample, tols, qs, names, load_fmm(None))
    worst: dict[str, float] = {}
    for r in rows:
        worst[r["case"]] = max(worst.get(r["case"], 0.0), r["err"] / r["tol"])
    print("\nworst achieved / tol per distribution:")
    for c, w in worst.items():
        print(f"  {c:26s} {w:.3f}")


if __name__ == "__main__":
    main()
