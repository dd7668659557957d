"""Gradients of ``associative_scan`` on the CPU: forward, forward+backward, jax, a torch loop.

Run as ``python -m benchmarks.scan_grad [--sizes 20 24] [--rounds 7]``.  For
the built-in :data:`propopt.linear_recurrence` and an affine
:class:`propopt.Monoid` of one's own (no ``array_combine``), float32, with
``a`` and ``b`` requiring grad, it times in interleaved rounds (each round
calls every variant once, in a rotated order; the figure is the median):

* ``forward``: the scan alone, no grad;
* ``fwd+bwd h``: the scan and ``torch.autograd.grad(h.sum(), (a, b))``;
* ``fwd+bwd h+A``: the same with the loss ``h.sum() + A.sum()``;
* ``generic``: ``fwd+bwd h`` by ``method='generic'`` (torch ops of the
  combine, differentiated by torch: the path taken before the kernels were
  differentiable), up to ``2^20`` and for the built-in only;
* ``jax``: ``jax.jit(jax.grad(loss, (0, 1)))`` of ``jax.lax.associative_scan``
  with the same combine (its arguments are on the device before the rounds,
  it is compiled and run once before them, and each call ends with
  ``jax.block_until_ready``).

Both monoids' backward is the kernel generated from the traced combine
(``propopt/associativity/scan/_grad_traced.py``): the affine monoid's
combine is the built-in's arithmetic, so one generated module serves both
rows' backward.

torch is imported first, then jax; torch runs on 1 thread or on propopt's
grant (:func:`propopt.get_num_threads`), whichever is faster here. The torch
loop (``h = a_t h + b_t`` in Python, then ``backward``) runs once at
``2^14``, and its time per element is printed. The machine is printed too
(``lscpu`` model name and LLVM's name for the host CPU), with the load of
other processes during the rounds.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import time
from collections.abc import Callable

import torch  # first, as the project's comparisons do

import jax  # isort: skip
import jax.numpy as jnp  # isort: skip
import numpy as np

from propopt import Monoid, associative_scan, linear_recurrence
from propopt.threads import LoadMeter, get_num_threads


def _affine(a1, b1, a2, b2):  # type: ignore[no-untyped-def]
    return a1 * a2, a2 * b1 + b2


AFFINE = Monoid(_affine, identity=(1.0, 0.0), name="affine", kinds="f")


def _jax_loss(with_a: bool) -> Callable[..., float]:
    def comb(x, y):  # type: ignore[no-untyped-def]
        return x[0] * y[0], y[0] * x[1] + y[1]

    def loss(a, b):  # type: ignore[no-untyped-def]
        A, h = jax.lax.associative_scan(comb, (a, b))
        return h.sum() + (A.sum() if with_a else 0.0)

    return jax.jit(jax.grad(loss, argnums=(0, 1)))


#: the generic path is timed up to this size (at 2^24 one call takes tens of seconds)
GENERIC_UP_TO = 1 << 20


def _torch_threads() -> int:
    """1 or propopt's grant, whichever runs a torch sum and product faster here."""
    x = torch.rand(1 << 22)
    best: tuple[float, int] = (math.inf, 1)
    for t in dict.fromkeys((1, get_num_threads())):
        torch.set_num_threads(t)
        start = time.perf_counter()
        for _ in range(5):
            (x * x).sum()
        best = min(best, (time.perf_counter() - start, t))
    return best[1]


def _variants(monoid: Monoid, n: int) -> dict[str, Callable[[], object]]:
    g = torch.Generator().manual_seed(0)
    a0 = 0.5 + 0.5 * torch.rand(n, generator=g)
    b0 = torch.randn(n, generator=g)
    a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
    ja, jb = jnp.asarray(a0.numpy()), jnp.asarray(b0.numpy())
    jh, jha = _jax_loss(False), _jax_loss(True)

    def fb(method: str = "auto", with_a: bool = False) -> Callable[[], object]:
        def run() -> object:
            A, h = associative_scan(monoid, (a, b), method=method)
            return torch.autograd.grad(h.sum() + (A.sum() if with_a else 0.0), (a, b))

        return run

    calls = {
        "forward": lambda: associative_scan(monoid, (a0, b0)),
        "fwd+bwd h": fb(),
        "fwd+bwd h+A": fb(with_a=True),
        "generic": fb("generic"),
        "jax": lambda: jax.block_until_ready(jh(ja, jb)),
        "jax h+A": lambda: jax.block_until_ready(jha(ja, jb)),
    }
    if monoid is AFFINE or n > GENERIC_UP_TO:
        # no array_combine: the generic path cannot take torch autograd; or too slow
        del calls["generic"]
    return calls


def _rounds(calls: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    for f in calls.values():  # compile and warm up
        f()
    names = list(calls)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            t = time.perf_counter()
            calls[k]()
            times[k].append(time.perf_counter() - t)
    return {k: 1e3 * float(np.median(v)) for k, v in times.items()}


def _torch_loop_ms_per_element(n: int = 1 << 14) -> float:
    a = (0.5 + 0.5 * torch.rand(n)).requires_grad_()
    b = torch.randn(n, requires_grad=True)
    t = time.perf_counter()
    h, hs = torch.zeros(()), []
    for i in range(n):
        h = a[i] * h + b[i]
        hs.append(h)
    torch.stack(hs).sum().backward()
    return 1e3 * (time.perf_counter() - t) / n


def _machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                      if ln.startswith("Model name")), "?")  # fmt: skip
    except OSError:
        model = "?"
    import llvmlite.binding as llvm

    return f"{model} (LLVM host CPU {llvm.get_host_cpu_name()})"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[20, 24], help="log2 of n")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    threads = _torch_threads()
    torch.set_num_threads(threads)
    print(f"machine: {_machine()}; torch threads {threads}, jax {jax.__version__}, "
          f"torch {torch.__version__}")  # fmt: skip
    loop = _torch_loop_ms_per_element()
    for e in args.sizes:
        n = 1 << e
        for monoid in (linear_recurrence, AFFINE):
            with LoadMeter() as load:
                ms = _rounds(_variants(monoid, n), args.rounds)
            f = ms["forward"]
            print(
                f"2^{e} float32 {monoid.name}: forward {f:.2f} ms, fwd+bwd h {ms['fwd+bwd h']:.2f} "
                f"({ms['fwd+bwd h'] / f:.1f}x forward), fwd+bwd h+A {ms['fwd+bwd h+A']:.2f} "
                f"({ms['fwd+bwd h+A'] / f:.1f}x); generic {ms.get('generic', math.nan):.2f}; jax "
                f"{ms['jax']:.2f} ({ms['jax'] / ms['fwd+bwd h']:.1f}x ours), jax h+A "
                f"{ms['jax h+A']:.2f} ({ms['jax h+A'] / ms['fwd+bwd h+A']:.1f}x ours); torch loop "
                f"{loop * n:.0f} ms (from {loop * 1e3:.2f} us/element at 2^14); other load "
                f"{load.cores:.1f} cores"
            )


if __name__ == "__main__":
    main()
