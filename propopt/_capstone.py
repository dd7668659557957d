"""The capstone's review table, measured on this machine.

Each problem of the capstone chapter is a *review function*: ``review(size)``
returns rows (dicts with the fields of :class:`Row`) measuring the
optimized tool beside its baseline at that size: one on the CPU and, when
torch sees a CUDA GPU, one on the GPU (:func:`gpu_rows`).  The
associativity primitives live here; the three case studies provide theirs
in ``case_studies.<name>.review``.
"""

from __future__ import annotations

import importlib
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, TextIO

import numpy as np

SIZES = ("small", "default", "large")

SCAN_LENGTH = {"small": 1 << 20, "default": 1 << 24, "large": 1 << 26}
"""Lengths of the associativity rows (float32).  At 2^22 a scan takes 1-3 ms
and its time swung 2x with the state of the process; from 2^24 on the work
dominates (the length the associativity benchmarks use)."""

REPEATS = 15
"""Timed calls per scan row: the median of 15 shrugs off a stall of the
two-thread barrier that a median of 5 can report."""

WARMUP_S = 0.5
"""Seconds of untimed calls before each timed series (see :func:`run`)."""

PROBLEMS = {
    "scan": "propopt._capstone:review_scan",
    "mamba": "case_studies.mamba.review:review",
    "topk": "case_studies.streaming_topk.review:review",
    "nbody": "case_studies.nbody.review:review",
}
"""Review function of each problem, by import path, in the order they are run."""


@dataclass
class Row:
    """One line of the review table."""

    problem: str
    bottleneck: str
    key_property: str
    technique: str
    baseline: str
    baseline_ms: float
    optimized_ms: float
    speedup: float
    rel_error: float
    device: str
    size: str = "default"
    flops: float | None = None
    bytes: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any], size: str) -> Row:
        optional = ("size", "flops", "bytes")
        names = [f.name for f in fields(cls) if f.name not in optional]
        missing = [n for n in names if n not in d]
        if missing:
            raise ValueError(f"review row {d.get('problem', d)!r} lacks the fields {missing}")
        row = cls(**{n: d[n] for n in names}, size=size)
        row.flops = None if d.get("flops") is None else float(d["flops"])
        row.bytes = None if d.get("bytes") is None else float(d["bytes"])
        for n in ("baseline_ms", "optimized_ms", "speedup", "rel_error"):
            setattr(row, n, float(getattr(row, n)))
        return row


class Progress:
    """A one-line progress bar on a stream (a line per step when not a terminal)."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 24) -> None:
        self.total, self.done, self.width = max(total, 1), 0, width
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()

    def step(self, label: str) -> None:
        """Announce the step about to run."""
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        text = f"[{bar}] {self.done}/{self.total} {time.perf_counter() - self.t0:5.0f}s  {label}"
        if self.tty:
            self.stream.write("\r\033[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def advance(self) -> None:
        self.done += 1

    def close(self) -> None:
        self.done = self.total
        self.step("done")
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()


def resolve(path: str) -> Callable[..., Any]:
    """Import ``module:attribute``."""
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def gpu_name() -> str | None:
    """Name of the CUDA GPU torch can use, or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name(0))


def median_ms(
    fn: Callable[[], Any],
    repeats: int = 5,
    sync: Callable[[], Any] = lambda: None,
    warmup_s: float | None = None,
) -> float:
    """Median wall time of ``repeats`` calls of ``fn`` in ms, after a warm-up.

    The warm-up calls ``fn`` at least once (JIT compilation, caches) and
    until ``warmup_s`` seconds have passed: the first parallel regions of a
    process that has loaded torch run up to 15x slower for a few hundred ms.
    ``sync`` runs after every call (``torch.cuda.synchronize`` for GPU work,
    which is asynchronous).  ``warmup_s`` defaults to :data:`WARMUP_S`.
    """
    t_end = time.perf_counter() + (WARMUP_S if warmup_s is None else warmup_s)
    while True:
        fn()
        sync()
        if time.perf_counter() >= t_end:
            break
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts))


def review_row(
    problem: str,
    bottleneck: str,
    key_property: str,
    technique: str,
    baseline: str,
    baseline_ms: float,
    optimized_ms: float,
    rel_error: float,
    device: str,
    **extra: Any,
) -> dict[str, Any]:
    """A review function's row (the fields of :class:`Row`); speedup = baseline / optimized."""
    return dict(
        problem=problem,
        bottleneck=bottleneck,
        key_property=key_property,
        technique=technique,
        baseline=baseline,
        baseline_ms=baseline_ms,
        optimized_ms=optimized_ms,
        speedup=baseline_ms / optimized_ms,
        rel_error=rel_error,
        device=device,
        **extra,
    )


def gpu_rows(problem: str, make: Callable[[str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The rows ``make(device)`` measures on the GPU when torch sees one, else ``[]``.

    ``device`` names the GPU for the table, e.g. ``'cuda (NVIDIA H100)'``.
    A GPU row that fails (a driver or toolkit the kernels cannot use) is
    reported as a warning naming the problem and the error; the CPU rows
    stand.
    """
    name = gpu_name()
    if name is None:
        return []
    try:
        return make(f"cuda ({name})")
    except Exception as e:  # reported below; the CPU rows stand
        warnings.warn(
            f"{problem}: the GPU row failed on {name} ({type(e).__name__}: {e}); "
            "the table has the CPU rows only",
            RuntimeWarning,
            stacklevel=2,
        )
        return []


def _rel_error(got: Any, exact: np.ndarray) -> float:
    got = np.asarray(got.cpu() if hasattr(got, "cpu") else got, dtype=np.float64)
    scale = float(np.max(np.abs(exact))) or 1.0
    return float(np.max(np.abs(got - exact)) / scale)


def review_scan(size: str = "default") -> list[dict[str, Any]]:
    """Rows for the associativity primitives: prefix sum and linear recurrence.

    Float32 of length ``SCAN_LENGTH[size]``; errors are against float64.  With
    a CUDA GPU, the same two scans on torch CUDA tensors are added.
    """
    import numba

    import propopt as pp
    from propopt.associativity._reference import linear_recurrence_loop

    n = SCAN_LENGTH[size]
    rng = np.random.default_rng(0)
    x = rng.normal(size=n).astype(np.float32)
    a = rng.uniform(0.9, 1.0, n).astype(np.float32)
    cpu = f"cpu ({numba.get_num_threads()} threads)"
    sum_exact = np.cumsum(x.astype(np.float64))
    loop = linear_recurrence_loop()
    rec_exact = loop(a.astype(np.float64), x.astype(np.float64))

    def row(
        problem: str,
        bottleneck: str,
        technique: str,
        baseline: str,
        base: float,
        fast: float,
        err: float,
        device: str,
    ) -> dict[str, Any]:
        # minimum traffic and flops per element, for the roofline chart:
        # add reads and writes one float32 (1 flop), the recurrence two (3 flops)
        flops, nbytes = (n, 8 * n) if problem == "prefix sum" else (3 * n, 16 * n)
        return review_row(
            problem, bottleneck, "associativity", technique, baseline, base, fast, err, device,
            flops=flops, bytes=nbytes,
        )  # fmt: skip

    sum_row = ("prefix sum", "one dependency chain", "3-phase parallel scan")
    rec_row = (
        "linear recurrence (Mamba's core)",
        "sequential loop over time",
        "scan of affine maps (a, b)",
    )
    rows = [
        row(
            *sum_row,
            "np.cumsum",
            median_ms(lambda: np.cumsum(x), REPEATS),
            median_ms(lambda: pp.associative_scan(pp.add, x), REPEATS),
            _rel_error(pp.associative_scan(pp.add, x), sum_exact),
            cpu,
        ),
        row(
            *rec_row,
            "sequential numba loop",
            median_ms(lambda: loop(a, x), REPEATS),
            median_ms(lambda: pp.associative_scan(pp.linear_recurrence, (a, x)), REPEATS),
            _rel_error(pp.associative_scan(pp.linear_recurrence, (a, x))[1], rec_exact),
            cpu,
        ),
    ]

    def on_gpu(device: str) -> list[dict[str, Any]]:
        import torch

        xg, ag = torch.from_numpy(x).cuda(), torch.from_numpy(a).cuda()
        sync = torch.cuda.synchronize
        return [
            row(
                *sum_row,
                "torch.cumsum",
                median_ms(lambda: torch.cumsum(xg, 0), REPEATS, sync),
                median_ms(lambda: pp.associative_scan(pp.add, xg), REPEATS, sync),
                _rel_error(pp.associative_scan(pp.add, xg), sum_exact),
                device,
            ),
            row(
                *rec_row,
                "sequential numba loop (cpu)",
                rows[1]["baseline_ms"],
                median_ms(
                    lambda: pp.associative_scan(pp.linear_recurrence, (ag, xg)), REPEATS, sync
                ),
                _rel_error(pp.associative_scan(pp.linear_recurrence, (ag, xg))[1], rec_exact),
                device,
            ),
        ]

    return rows + gpu_rows("scan", on_gpu)


def run(
    problems: Sequence[str],
    sizes: Sequence[str],
    progress: Progress | None = None,
) -> list[Row]:
    """Run the review of each problem at each size; one or more rows each.

    torch (when installed) is imported before anything is measured:
    importing it after numba's OpenMP threads have started stalls the next
    parallel regions (a 3 ms scan measured 45 ms for ten calls); the first
    parallel regions after it is loaded are slow too, hence the warm-up in
    ``median_ms``.  Each problem runs at all its sizes, largest first,
    before the next one starts (a parallel scan right after the small rows'
    serial kernels measured 2x slower); rows come back ordered by size, then
    problem.
    """
    gpu_name()
    found: dict[tuple[str, str], list[Row]] = {}
    for name in problems:
        for size in reversed(sizes):  # largest first: see above
            if progress is not None:
                progress.step(f"{name} ({size})")
            out = resolve(PROBLEMS[name])(size)
            found[name, size] = [
                Row.from_dict(d, size) for d in ([out] if isinstance(out, dict) else out)
            ]
            if progress is not None:
                progress.advance()
    return [row for size in sizes for name in problems for row in found[name, size]]


def table(rows: Iterable[Row]) -> str:
    """The review table as aligned text."""
    head = [
        "problem",
        "bottleneck",
        "property",
        "technique",
        "baseline",
        "base ms",
        "opt ms",
        "speedup",
        "rel err",
        "device",
    ]
    body = [
        [
            r.problem,
            r.bottleneck,
            r.key_property,
            r.technique,
            r.baseline,
            f"{r.baseline_ms:.1f}",
            f"{r.optimized_ms:.1f}",
            f"{r.speedup:.1f}x",
            f"{r.rel_error:.1e}",
            r.device,
        ]
        for r in rows
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
