"""Mamba selective scan (propopt_case_studies.mamba) against the chapter's loop and mambapy.

Targets at batch 1, L = d_model = 2048, d_state = 16, float32, 2 cores:
* forward >= 20x faster than the chapter's sequential loop (a Python loop of
  torch ops, timed as written) and >= 30x faster than mambapy's pscan path;
* forward + backward >= 5x faster than mambapy's pscan path under autograd;
* peak memory of the forward <= 2x inputs + outputs;
* tokens/s flat in L (linear time) for L in 256..4096.
Inputs: :func:`propopt_case_studies.capstone.workloads.chapter_inputs` (negative A).
"""

from __future__ import annotations

import tracemalloc

import numpy as np

from propopt_case_studies.capstone.workloads import (
    chapter_inputs,
    mamba_inputs,
    mambapy_selective_scan,
)
from propopt_case_studies.mamba import chapter_scan, naive, selective_scan

from .common import Benchmark, median_seconds, ratio


def _mambapy():
    try:
        import mambapy  # noqa: F401
    except ImportError:  # mambapy lives in the bench extra
        return False
    return True


class MambaForward(Benchmark):
    """Forward pass at L = d_model = n, d_state 16, batch 1 (float32)."""

    params = [128]
    param_names = ["n"]

    def setup(self, n):
        import torch

        torch.set_num_threads(2)
        self.chapter = chapter_inputs(n, n)
        self.mamba = mamba_inputs(n, n)
        x, A, B, C, delta = self.chapter
        self.mpy = (x, delta, A, B, C)
        chapter_scan(*self.chapter)  # compile
        selective_scan(**self.mamba)
        chapter_scan(*self.chapter, method="parallel")

    def time_naive_loop(self, n):
        naive(*self.chapter)

    def time_parallel_scan_path(self, n):
        chapter_scan(*self.chapter, method="parallel")

    def time_fused_cpu(self, n):
        chapter_scan(*self.chapter)

    def time_fused_cpu_mamba_layout(self, n):
        selective_scan(**self.mamba)

    def time_mambapy_pscan(self, n):
        if not _mambapy():
            raise NotImplementedError("mambapy is not installed")
        mambapy_selective_scan(*self.mpy)

    def track_speedup_vs_naive_loop(self, n):
        return ratio(lambda: naive(*self.chapter), lambda: chapter_scan(*self.chapter), 5)

    track_speedup_vs_naive_loop.unit = "x"

    def track_speedup_vs_mambapy(self, n):
        if not _mambapy():
            raise NotImplementedError("mambapy is not installed")
        return ratio(
            lambda: mambapy_selective_scan(*self.mpy), lambda: selective_scan(**self.mamba), 3
        )

    track_speedup_vs_mambapy.unit = "x"

    def track_rel_error(self, n):
        import torch

        exact = naive(*(v.to(torch.float64) for v in self.chapter)).numpy()
        got = chapter_scan(*self.chapter).numpy().astype(np.float64)
        # Floored: float32 rounding makes an exact 0 impossible in practice.
        return max(float(np.abs(got - exact).max() / np.abs(exact).max()), 1e-300)

    track_rel_error.unit = "max |err| / max |y|"

    def track_peak_memory_ratio(self, n):
        """tracemalloc peak of the forward on numpy inputs over inputs + outputs.

        tracemalloc sees every numpy allocation (the output, B and C in
        token-major copies); numba's per-thread tile buffers (a few KiB) are
        outside it.
        """
        d = {k: v.numpy() for k, v in self.mamba.items()}
        inputs = sum(v.nbytes for v in d.values())
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            out = selective_scan(**d)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return (inputs + peak) / (inputs + out.nbytes)

    track_peak_memory_ratio.unit = "x (inputs + outputs)"


class MambaForwardBackward(Benchmark):
    """Forward + backward (sum of outputs) under torch autograd, float32."""

    params = [128]
    param_names = ["n"]

    def setup(self, n):
        import torch

        torch.set_num_threads(2)
        self.ours = {k: v.requires_grad_() for k, v in mamba_inputs(n, n).items()}
        x, A, B, C, delta = chapter_inputs(n, n)
        self.mpy = [v.requires_grad_() for v in (x, delta, A, B, C)]
        self.fused()

    def fused(self):
        selective_scan(**self.ours).sum().backward()

    def mambapy(self):
        mambapy_selective_scan(*self.mpy).sum().backward()

    def time_fused_cpu_fwd_bwd(self, n):
        self.fused()

    def time_mambapy_fwd_bwd(self, n):
        if not _mambapy():
            raise NotImplementedError("mambapy is not installed")
        self.mambapy()

    def track_speedup_fwd_bwd_vs_mambapy(self, n):
        if not _mambapy():
            raise NotImplementedError("mambapy is not installed")
        return ratio(self.mambapy, self.fused, 3)

    track_speedup_fwd_bwd_vs_mambapy.unit = "x"


class MambaScaling(Benchmark):
    """Tokens per second of the fused forward at d_model 2048: flat in L = linear time."""

    params = [256, 1024]
    param_names = ["L"]

    def setup(self, L):
        self.mamba = mamba_inputs(L, 2048)
        selective_scan(**self.mamba)

    def time_fused_cpu(self, L):
        selective_scan(**self.mamba)

    def track_tokens_per_s(self, L):
        return L / median_seconds(lambda: selective_scan(**self.mamba), 5)

    track_tokens_per_s.unit = "tokens/s"


class MambaPacked(Benchmark):
    """Four sequences of unequal length packed in one row (seq_idx) vs a batch of 4.

    Target: packed within 1.2x of the batch (the same tokens), d_model 256,
    d_state 16, float32.  ``python -m benchmarks.packed_report`` gives the
    larger shapes and the backward.
    """

    params = [1024]
    param_names = ["tokens"]

    def setup(self, tokens):
        q = tokens // 4
        lengths = [q + q // 2, q // 2, q - q // 4, q + q // 4]
        self.seq_idx = np.repeat(np.arange(4), lengths)[None]
        self.packed = {k: v.numpy() for k, v in mamba_inputs(tokens, 256).items()}
        self.batch = dict(self.packed)
        for k in ("u", "delta", "B", "C"):  # (1, c, tokens) -> (4, c, q)
            v = self.packed[k]
            self.batch[k] = np.ascontiguousarray(v.reshape(v.shape[1], 4, q).transpose(1, 0, 2))
        self.run_packed()
        self.run_batch()

    def run_packed(self):
        return selective_scan(**self.packed, seq_idx=self.seq_idx)

    def run_batch(self):
        return selective_scan(**self.batch)

    def time_packed(self, tokens):
        self.run_packed()

    def track_packed_over_batch(self, tokens):
        return 1.0 / ratio(self.run_packed, self.run_batch)

    track_packed_over_batch.unit = "x (time packed / time batched)"
