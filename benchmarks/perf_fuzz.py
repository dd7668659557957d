"""Every public verb over the inputs users bring: its time over its floor, per input distribution.

``python -m benchmarks.perf_fuzz`` times each verb on a table of input
distributions (decays near 0 and near 1, huge and tiny magnitudes, NaN- and
inf-heavy data, sorted and constant data, clustered bodies, tiny and huge
chunks) and, right beside each call, the verb's floor on the same input:

* scans, top-K, Mamba and SSD: a copy of the inputs (``np.copy`` of each
  array, allocating its output as the verbs do), or one parallel read pass
  for top-K, which reads its input and writes almost nothing;
* N-body: the same call on a Plummer sphere of the same size, the
  distribution the tree was tuned on (there is no bandwidth floor to speak of);
* the linear recurrence also against the sequential loop ``h = a h + b``
  (numba, one thread), on two threads and on one.

A cliff is a distribution whose time over the floor is far above the
others'.  Each verb's line ends with its worst over its best distribution;
``benchmarks/bench_perf_fuzz.py`` tracks that figure in asv, so a new cliff
shows as a regression.  The table and its causes are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import propopt as pp
from propopt.files import write_text
from propopt_case_studies.capstone.machine import cpu_model, read_pass
from propopt_case_studies.capstone.measure import median_seconds
from propopt_case_studies.capstone.peers import sequential_recurrence

Inputs = Any
Maker = Callable[[np.random.Generator, int], Inputs]

#: Problem sizes: ``small`` for asv and the tests, ``default`` for the docs' table.
SIZES = {
    "small": {"scan": 1 << 18, "topk": 1 << 20, "mamba": 256, "nbody": 5_000, "chunks": 1 << 16},
    "default": {
        "scan": 1 << 22,
        "topk": 10**7,
        "mamba": 2048,
        "nbody": 100_000,
        "chunks": 1 << 22,
    },
}


@dataclass
class Verb:
    """One public verb: its call, its floor, its inputs, and its extra yardsticks."""

    name: str
    run: Callable[[Inputs], Any]
    floor: Callable[[Inputs], Any]
    floor_name: str
    size_key: str
    inputs: dict[str, Maker]
    extra: dict[str, Callable[[Inputs], Any]] = field(default_factory=dict)


@dataclass
class Row:
    verb: str
    distribution: str
    seconds: float
    floor_seconds: float
    #: the times of the verb's extra yardsticks (``Verb.extra``), in seconds
    extra: dict[str, float]

    @property
    def over_floor(self) -> float:
        return self.seconds / self.floor_seconds


# ------------------------------------------------------------- the inputs
F32 = np.float32


def _u(lo: float, hi: float) -> Maker:
    return lambda rng, n: rng.uniform(lo, hi, n).astype(F32)


def _const(v: float) -> Maker:
    return lambda rng, n: np.full(n, v, F32)


def _normal(scale: float = 1.0) -> Maker:
    return lambda rng, n: (scale * rng.standard_normal(n)).astype(F32)


def _with(fraction: float, value: float, base: Maker) -> Maker:
    def make(rng: np.random.Generator, n: int) -> np.ndarray:
        x = base(rng, n)
        x[rng.random(n) < fraction] = value
        return x

    return make


#: The decays of ``h_t = a_t h_{t-1} + b_t`` (``b ~ U(0, 1)``) and of ``mul``.
DECAYS: dict[str, Maker] = {
    "U(0, 1)": _u(0.0, 1.0),
    "U(0.5, 1)": _u(0.5, 1.0),
    "U(0.9, 1)": _u(0.9, 1.0),
    "U(0.999, 1)": _u(0.999, 1.0),
    "ones": _const(1.0),
    "N(0, 1)": _normal(),
    "0.9": _const(0.9),
    "0.99": _const(0.99),
    "1e-30 * U(0, 1)": lambda rng, n: (1e-30 * rng.random(n)).astype(F32),
    "half NaN": _with(0.5, math.nan, _u(0.5, 1.0)),
    "half inf": _with(0.5, math.inf, _u(0.5, 1.0)),
}

#: What a cumulative sum (or max, or log-sum-exp) is fed.
VALUES: dict[str, Maker] = {
    "N(0, 1)": _normal(),
    "sorted": lambda rng, n: np.sort(rng.standard_normal(n)).astype(F32),
    "constant": _const(1.0),
    "1e30 * N(0, 1)": _normal(1e30),
    "1e-40 * N(0, 1)": lambda rng, n: (1e-40 * rng.standard_normal(n)).astype(F32),
    "half NaN": _with(0.5, math.nan, _normal()),
    "half inf": _with(0.5, math.inf, _normal()),
    "mostly -inf": _with(0.99, -math.inf, _normal()),
}

#: What a top-K is fed.
TOPK_INPUTS: dict[str, Maker] = {
    "N(0, 1)": _normal(),
    "sorted": lambda rng, n: np.sort(rng.standard_normal(n)).astype(F32),
    "reversed": lambda rng, n: np.sort(rng.standard_normal(n))[::-1].astype(F32),
    "constant": _const(1.0),
    "ties (8 values)": lambda rng, n: rng.integers(0, 8, n).astype(F32),
    "half NaN": _with(0.5, math.nan, _normal()),
    "mostly -inf": _with(0.99, -math.inf, _normal()),
}


def _pair(decay: Maker) -> Maker:
    return lambda rng, n: (decay(rng, n), rng.random(n, dtype=F32))


def _copy(*arrays: np.ndarray) -> list[np.ndarray]:
    return [np.copy(a) for a in arrays]


def _mamba(dt: float, A: float) -> Maker:
    def make(rng: np.random.Generator, L: int) -> dict[str, Any]:
        import torch

        d, n = 256, 16
        g = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
        return dict(
            u=torch.randn(1, d, L, generator=g),
            delta=torch.full((1, d, L), dt),
            A=torch.full((d, n), A),
            B=torch.randn(1, n, L, generator=g),
            C=torch.randn(1, n, L, generator=g),
        )

    return make


def _ssd(dt: float, A: float) -> Maker:
    def make(rng: np.random.Generator, L: int) -> dict[str, Any]:
        import torch

        h, p, n = 8, 32, 32
        g = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
        return dict(
            x=torch.randn(1, L, h, p, generator=g),
            dt=torch.full((1, L, h), dt),
            A=torch.full((h,), A),
            B=torch.randn(1, L, 1, n, generator=g),
            C=torch.randn(1, L, 1, n, generator=g),
        )

    return make


MAMBA_INPUTS = {
    f"dt {dt:g}, A {A:g}": (dt, A) for dt in (1e-4, 1e-2, 1.0, 10.0) for A in (-1e-3, -1.0, -1e3)
}


def _bodies(kind: str) -> Maker:
    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        from propopt_case_studies.nbody import plummer_sphere

        m = np.full(n, 1.0 / n)
        if kind == "Plummer":
            return plummer_sphere(n, seed=int(rng.integers(1 << 31)))[0], m
        if kind == "uniform":
            return rng.uniform(-1, 1, (n, 3)), m
        if kind == "Hernquist cusp":
            # r = a sqrt(u) / (1 - sqrt(u)) inverts M(<r) = r^2 / (r + a)^2
            s = np.sqrt(rng.uniform(0, 0.999, n))
            r = s / (1 - s)
            v = rng.standard_normal((n, 3))
            return v / np.linalg.norm(v, axis=1, keepdims=True) * r[:, None], m
        if kind == "two far clusters":
            p = plummer_sphere(n, seed=int(rng.integers(1 << 31)))[0]
            p[: n // 2, 0] += 1000.0
            return p, m
        if kind == "disk":
            r = rng.exponential(1.0, n)
            phi = rng.uniform(0, 2 * np.pi, n)
            return np.stack([r * np.cos(phi), r * np.sin(phi), 1e-3 * rng.standard_normal(n)], 1), m
        if kind == "line":
            p = np.zeros((n, 3))
            p[:, 0] = rng.uniform(-1, 1, n)
            return p, m
        if kind == "all within 1e-9":
            return 1.0 + 1e-9 * rng.random((n, 3)), m
        raise ValueError(kind)

    return make


BODIES = (
    "Plummer",
    "uniform",
    "Hernquist cusp",
    "two far clusters",
    "disk",
    "line",
    "all within 1e-9",
)


# --------------------------------------------------------------- the verbs
def verbs() -> list[Verb]:
    """The table: every public verb with its inputs and floor."""
    import propopt_case_studies.mamba as mamba
    from propopt_case_studies.nbody import field

    scan = pp.associative_scan

    def one_thread(fn: Callable[[Inputs], Any]) -> Callable[[Inputs], Any]:
        def run(x: Inputs) -> Any:
            with pp.set_num_threads(1):
                return fn(x)

        return run

    rec = lambda ab: scan(pp.linear_recurrence, ab)  # noqa: E731
    return [
        Verb(
            "associative_scan(linear_recurrence)",
            rec,
            lambda ab: _copy(*ab),
            "copy of a and b",
            "scan",
            {k: _pair(v) for k, v in DECAYS.items()},
            extra={
                "loop": lambda ab: sequential_recurrence(*ab),
                "1 thread": one_thread(rec),
            },
        ),
        Verb(
            "associative_scan(mul)",
            lambda x: scan(pp.mul, x),
            _copy,
            "copy",
            "scan",
            DECAYS,
        ),
        Verb("associative_scan(add)", lambda x: scan(pp.add, x), _copy, "copy", "scan", VALUES),
        Verb(
            "associative_scan(maximum)",
            lambda x: scan(pp.maximum, x),
            _copy,
            "copy",
            "scan",
            VALUES,
        ),
        Verb(
            "associative_scan(logaddexp)",
            lambda x: scan(pp.logaddexp, x),
            _copy,
            "copy",
            "scan",
            VALUES,
        ),
        Verb(
            "topk(k=1000)", lambda x: pp.topk(x, 1000), read_pass, "read pass", "topk", TOPK_INPUTS
        ),
        Verb(
            "TopK.update, chunks of 1000",
            lambda x: _stream(x, 1000),
            read_pass,
            "read pass",
            "topk",
            {"N(0, 1)": _normal(), "sorted": TOPK_INPUTS["sorted"]},
        ),
        Verb(
            "TopK.update, one chunk",
            lambda x: _stream(x, x.shape[0]),
            read_pass,
            "read pass",
            "topk",
            {"N(0, 1)": _normal(), "sorted": TOPK_INPUTS["sorted"]},
        ),
        Verb(
            "selective_scan",
            lambda d: mamba.selective_scan(**d),
            lambda d: (d["u"].clone(), d["delta"].clone()),
            "copy of u and delta",
            "mamba",
            {k: _mamba(*v) for k, v in MAMBA_INPUTS.items()},
        ),
        Verb(
            "ssd_scan",
            lambda d: mamba.ssd_scan(**d, chunk_size=64),
            lambda d: (d["x"].clone(), d["dt"].clone()),
            "copy of x and dt",
            "mamba",
            {k: _ssd(*v) for k, v in MAMBA_INPUTS.items()},
        ),
        Verb(
            "field (N-body defaults)",
            lambda pm: field(pm[0], pm[1], eps=1e-3),
            _PlummerFloor(lambda pm: field(pm[0], pm[1], eps=1e-3)),
            "same call on a Plummer sphere",
            "nbody",
            {k: _bodies(k) for k in BODIES},
        ),
        Verb(
            "associative_scan(add), dask",
            lambda xd: scan(pp.add, xd[1]).compute(scheduler="threads"),
            lambda xd: _copy(xd[0]),
            "copy",
            "chunks",
            {"one chunk": _dask_chunks(None), "chunks of 4096": _dask_chunks(4096)},
        ),
    ]


class _PlummerFloor:
    """The N-body floor: the same call on a Plummer sphere of the same size."""

    def __init__(self, run: Callable[[Inputs], Any]) -> None:
        self.run = run
        self._inputs: dict[int, Any] = {}

    def __call__(self, pm: Inputs) -> Any:
        n = len(pm[1])
        if n not in self._inputs:
            self._inputs[n] = _bodies("Plummer")(np.random.default_rng(1), n)
        return self.run(self._inputs[n])


def _stream(x: np.ndarray, chunk: int) -> Any:
    s = pp.TopK.empty(1000, x.dtype)
    for i in range(0, x.shape[0], chunk):
        s = s.update(x[i : i + chunk], offset=i)
    return s.result()


def _dask_chunks(chunk: int | None) -> Maker:
    def make(rng: np.random.Generator, n: int) -> Any:
        import dask.array as da

        x = rng.standard_normal(n).astype(F32)
        return x, da.from_array(x, chunks=n if chunk is None else chunk)

    return make


# ---------------------------------------------------------------- running
def measure(
    size: str = "default",
    only: Iterable[str] | None = None,
    repeats: int = 5,
    seed: int = 0,
) -> list[Row]:
    """Time every (verb, distribution) beside its floor; rows in table order."""
    sizes = SIZES[size]
    rows = []
    wanted = None if only is None else list(only)
    for verb in verbs():
        if wanted is not None and not any(w in verb.name for w in wanted):
            continue
        n = sizes[verb.size_key]
        for dist, make in verb.inputs.items():
            x = make(np.random.default_rng(seed), n)
            t = median_seconds(lambda: verb.run(x), repeats)  # noqa: B023
            f = median_seconds(lambda: verb.floor(x), repeats)  # noqa: B023
            extra = {k: median_seconds(lambda: fn(x), repeats) for k, fn in verb.extra.items()}  # noqa: B023
            rows.append(Row(verb.name, dist, t, f, extra))
    return rows


def worst_over_best(rows: list[Row], verb: str) -> float:
    """The verb's worst distribution's time over its floor, over its best one's."""
    r = [row.over_floor for row in rows if row.verb == verb]
    return max(r) / min(r)


def table(rows: list[Row]) -> str:
    """A Markdown table: one line per (verb, distribution), and each verb's spread."""
    out = [
        "| verb | input | time (ms) | over its floor | other ratios |",
        "|---|---|---|---|---|",
    ]
    floors = {v.name: v.floor_name for v in verbs()}
    seen: list[str] = []
    for row in rows:
        if row.verb not in seen:
            seen.append(row.verb)
        other = ""
        if "loop" in row.extra:  # the recurrence against the sequential loop
            loop = row.extra["loop"]
            other = f"{row.seconds / loop:.2f}x the loop"
            if "1 thread" in row.extra:
                other += f", on one thread {row.extra['1 thread'] / loop:.2f}x"
        out.append(
            f"| {row.verb} | {row.distribution} | {1e3 * row.seconds:.2f} | "
            f"{row.over_floor:.2f}x the {floors[row.verb]} | {other} |"
        )
    out.append("")
    for verb in seen:
        out.append(f"- {verb}: worst over best distribution {worst_over_best(rows, verb):.2f}x")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    import llvmlite.binding as llvm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    ap.add_argument("--only", nargs="*", help="verbs whose name contains one of these")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    print(f"{cpu_model()}; llvmlite host CPU {llvm.get_host_cpu_name()}; size {args.size}")
    rows = measure(args.size, args.only, args.repeats)
    print(table(rows))
    if args.json:
        write_text(args.json, json.dumps([r.__dict__ for r in rows], indent=1))


if __name__ == "__main__":
    main()
