"""Neither side slows the other: propopt's kernels beside torch's and jax's, in one process.

Each ``track_`` method measures, in interleaved rounds, one library's work
right after the other's against the same work after a pause of
:data:`PAUSE_S` (no pool left spinning), and reports the ratio (1.0: no
slowdown; the target is at most 1.3):

* ``track_torch_after_propopt``: the chapter's torch loop of small ops (the
  Mamba loop at L = d_model = 512), right after propopt's scans and top-k;
* ``track_autograd_after_propopt``: its backward under torch autograd;
* ``track_propopt_after_torch`` and ``track_propopt_after_jax``: propopt's
  scans and top-k right after torch's loop, or a jitted jax scan.

``benchmarks/neighbours.py`` measures the same with the other work in a
neighbouring process (docs/threads.md).
"""

from __future__ import annotations

import time

import numpy as np

import propopt as pp

from .common import Benchmark

PAUSE_S = 0.2
"""Quiet time before the 'fresh' side of a round: longer than any pool spins."""
ROUNDS = 5


def _median_ratio(after, fresh, before_after, rounds=ROUNDS):  # type: ignore[no-untyped-def]
    """Median of ``t(after | before_after ran just before) / t(fresh | after a pause)``."""
    ratios = []
    for _ in range(rounds):
        time.sleep(PAUSE_S)
        t0 = time.perf_counter()
        fresh()
        t_fresh = time.perf_counter() - t0
        before_after()
        t0 = time.perf_counter()
        after()
        ratios.append((time.perf_counter() - t0) / t_fresh)
    return float(np.median(ratios))


class Neighbours(Benchmark):
    """One library's work right after the other's, over the same work after a pause."""

    params = [1]
    param_names = ["scale"]
    repeat = (1, 1, 120.0)

    def setup(self, scale):
        try:
            import torch
        except ImportError as e:  # in the torch extra
            raise NotImplementedError("torch is not installed") from e
        from propopt_case_studies.capstone.workloads import chapter_inputs
        from propopt_case_studies.mamba import naive

        self.torch = torch
        inputs = chapter_inputs(512 * scale, 512)
        grad_inputs = [t.clone().requires_grad_() for t in chapter_inputs(256, 256)]
        rng = np.random.default_rng(0)
        x = rng.normal(size=1 << 22).astype(np.float32)
        a = rng.uniform(0.9, 1.0, 1 << 22).astype(np.float32)

        def torch_loop():
            with torch.no_grad():
                naive(*inputs)

        self.torch_loop = torch_loop
        self.autograd = lambda: naive(*grad_inputs).sum().backward()
        self.propopt = lambda: (
            pp.associative_scan(pp.add, x),
            pp.associative_scan(pp.linear_recurrence, (a, x)),
            pp.topk(x, 1000),
        )
        for f in (self.torch_loop, self.autograd, self.propopt):
            f()

    def track_torch_after_propopt(self, scale):
        return _median_ratio(self.torch_loop, self.torch_loop, self.propopt)

    track_torch_after_propopt.unit = "x fresh"

    def track_autograd_after_propopt(self, scale):
        return _median_ratio(self.autograd, self.autograd, self.propopt)

    track_autograd_after_propopt.unit = "x fresh"

    def track_propopt_after_torch(self, scale):
        return _median_ratio(self.propopt, self.propopt, self.torch_loop)

    track_propopt_after_torch.unit = "x fresh"

    def track_propopt_after_jax(self, scale):
        try:
            import jax
            import jax.numpy as jnp
        except ImportError as e:  # in the bench extra
            raise NotImplementedError("jax is not installed") from e
        x = jnp.asarray(np.random.default_rng(1).normal(size=1 << 22).astype(np.float32))
        cumsum = jax.jit(lambda v: jax.lax.associative_scan(jnp.add, v))
        cumsum(x).block_until_ready()
        return _median_ratio(self.propopt, self.propopt, lambda: cumsum(x).block_until_ready())

    track_propopt_after_jax.unit = "x fresh"
