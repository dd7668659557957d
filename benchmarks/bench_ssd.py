"""Mamba-2's SSD scan (propopt_case_studies.mamba.ssd_scan) against ssd_minimal_discrete.

Targets at batch 1, L = 4096, 32 heads of 64 channels, dstate 128, 1 group,
float32 (the Mamba-2 2.7B head shape), 2 cores, measured in one run:
* at least 4x faster than the paper's minimal SSD in pure torch
  (:mod:`benchmarks.ssd_minimal`) at its best torch thread count (1 or 2);
* the GEMM phase (every matrix product of the scan, flops counted as
  ``2 m n k``) at >= 40% of the machine's sgemm roof, measured as NumPy's
  float32 2048^3 product in the same run;
* a packed row of variable-length sequences within 1.2x of an unpacked batch
  with the same number of tokens;
* one layer of a Hugging Face Mamba2-130m prefill (:class:`SsdForwardHfMamba2`:
  L 2048, 24 heads of 64, dstate 128, chunk 256, ``dt`` spanning 1e-7 .. 10)
  in at most 25 ms.
Inputs: :func:`ssd_inputs` (Mamba-2's A and dt).
The two sides of a ratio alternate call by call (:func:`alternating_medians`).
"""

from __future__ import annotations

import time

import numpy as np

from propopt_case_studies.mamba import ssd_scan
from propopt_case_studies.mamba.ssd import gemm_profile

from .common import Benchmark
from .ssd_minimal import ssd_minimal_discrete


def ssd_inputs(
    L: int,
    nheads: int = 32,
    headdim: int = 64,
    dstate: int = 128,
    ngroups: int = 1,
    batch: int = 1,
    seed: int = 0,
) -> dict:
    """Mamba-2 inputs as float32 torch tensors: ``x``, ``dt``, ``A``, ``B``, ``C``.

    As Mamba-2's initialization: ``A = -exp(A_log)`` with ``A`` in [-16, -1]
    on a log scale, ``dt`` log-uniform in [1e-3, 1e-1] (values after the
    softplus, so no ``dt_softplus``), ``x``, ``B``, ``C`` ~ randn.  Negative
    ``A`` keeps the state bounded.  The defaults are the Mamba-2 2.7B head shape.
    """
    import math

    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, L, nheads, headdim, generator=g)
    lo, hi = math.log(1e-3), math.log(1e-1)
    dt = torch.exp(lo + (hi - lo) * torch.rand(batch, L, nheads, generator=g))
    A = -torch.exp(math.log(16.0) * torch.rand(nheads, generator=g))
    B = torch.randn(batch, L, ngroups, dstate, generator=g)
    C = torch.randn(batch, L, ngroups, dstate, generator=g)
    return dict(x=x, dt=dt, A=A, B=B, C=C)


def hf_mamba2_inputs(L: int = 2048, initial_states: bool = False, seed: int = 0) -> dict:
    """One layer's ``ssd_scan`` arguments at a Hugging Face Mamba2-130m prefill, as torch tensors.

    24 heads of 64, dstate 128, one group, chunk 256, float32, batch 1, with
    transformers' initialization of the random-weight model
    (``benchmarks/hf_mamba.py``): ``A = -(1 .. 24)``, ``dt_bias`` the inverse
    softplus of a log-uniform ``dt`` in [1e-3, 1e-1]; the projections' raw
    ``dt`` ~ N(0, 2.75^2), ``z`` ~ N(0, 2.77^2), ``x``, ``B``, ``C`` ~ N(0, 1),
    ``D = 1``, as measured on that model's first layers.  After the softplus
    ``dt`` spans 1e-7 .. 10 (median 0.01): a chunk's decay often underflows.
    """
    import math

    import torch

    H, P, N = 24, 64, 128
    g = torch.Generator().manual_seed(seed)
    lo, hi = math.log(1e-3), math.log(1e-1)
    dt0 = torch.exp(lo + (hi - lo) * torch.rand(H, generator=g))
    d = dict(
        x=torch.randn(1, L, H, P, generator=g),
        dt=2.75 * torch.randn(1, L, H, generator=g),
        A=-torch.arange(1.0, H + 1),
        B=torch.randn(1, L, 1, N, generator=g),
        C=torch.randn(1, L, 1, N, generator=g),
        chunk_size=256,
        D=torch.ones(H),
        z=2.77 * torch.randn(1, L, H, P, generator=g),
        dt_bias=dt0 + torch.log(-torch.expm1(-dt0)),
        initial_states=None,
        dt_softplus=True,
        dt_limit=(0.0, float("inf")),
        return_final_states=True,
    )
    if initial_states:
        d["initial_states"] = 0.1 * torch.randn(1, H, P, N, generator=g)
    return d


def alternating_medians(fns: dict[str, object], rounds: int = 5) -> dict[str, float]:
    """Median seconds of each callable over ``rounds`` rounds that call each once, in turn."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()  # warm-up
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


def with_threads(n: int, fn):  # type: ignore[no-untyped-def]
    """``fn`` run with ``n`` torch threads (restored afterwards)."""
    import torch

    def run():  # type: ignore[no-untyped-def]
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            return fn()
        finally:
            torch.set_num_threads(before)

    return run


def minimal_args(d: dict, block_len: int) -> tuple:
    """The paper's arguments: ``X = x dt``, ``A dt``, B and C expanded to the heads."""
    b, L, h, _ = d["x"].shape
    n = d["B"].shape[-1]
    rep = h // d["B"].shape[2]
    B = d["B"].repeat_interleave(rep, 2) if rep > 1 else d["B"].expand(b, L, h, n)
    C = d["C"].repeat_interleave(rep, 2) if rep > 1 else d["C"].expand(b, L, h, n)
    return (d["x"] * d["dt"][..., None], d["A"] * d["dt"], B, C, block_len)


def sgemm_roof(n: int = 2048, repeats: int = 3) -> float:
    """FLOP/s of NumPy's float32 ``n^3`` matrix product (best of ``repeats``)."""
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    a @ a
    best = min(_timed(lambda: a @ a) for _ in range(repeats))
    return 2.0 * n**3 / best


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def gemm_phase(fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(seconds, flops) of the GEMMs issued by one call of ``fn``."""
    with gemm_profile() as log:
        fn()
    return sum(t for t, _ in log), sum(f for _, f in log)


class SsdForward(Benchmark):
    """Forward at a small head shape (8 heads of 32, dstate 32), chunk 64, float32."""

    params = [256]
    param_names = ["L"]

    def setup(self, L):
        self.d = ssd_inputs(L, nheads=8, headdim=32, dstate=32)
        self.ref_args = minimal_args(self.d, 64)
        self.ours()

    def ours(self):
        return ssd_scan(**self.d, chunk_size=64)

    def time_ssd_scan(self, L):
        self.ours()

    def time_ssd_minimal(self, L):
        ssd_minimal_discrete(*self.ref_args)

    def track_speedup_vs_minimal(self, L):
        t = alternating_medians(
            {"ref": lambda: ssd_minimal_discrete(*self.ref_args), "ours": self.ours}
        )
        return t["ref"] / t["ours"]

    track_speedup_vs_minimal.unit = "x"

    def track_rel_error(self, L):
        import torch

        exact = ssd_scan(
            **{k: v.to(torch.float64) for k, v in self.d.items()}, chunk_size=64, method="reference"
        )
        got = self.ours().to(torch.float64)
        # Floored: float32 rounding makes an exact 0 impossible in practice.
        return max(float((got - exact).abs().max() / exact.abs().max()), 1e-300)

    track_rel_error.unit = "max |err| / max |y|"


class SsdForward2p7B(Benchmark):
    """Mamba-2 2.7B head shape: 32 heads of 64, dstate 128, 1 group, float32, batch 1."""

    params = [[256], [64, 256]]
    param_names = ["L", "chunk_size"]

    def setup(self, L, chunk_size):
        self.d = ssd_inputs(L)
        self.ref_args = minimal_args(self.d, min(chunk_size, L))
        self.ours()

    def ours(self):
        return ssd_scan(**self.d, chunk_size=self.ref_args[-1])

    def ref(self):
        return ssd_minimal_discrete(*self.ref_args)

    def time_ssd_scan(self, L, chunk_size):
        self.ours()

    def time_ssd_minimal_1_thread(self, L, chunk_size):
        with_threads(1, self.ref)()

    def time_ssd_minimal_2_threads(self, L, chunk_size):
        with_threads(2, self.ref)()

    def track_speedup_vs_minimal_best_threads(self, L, chunk_size):
        t = alternating_medians(
            {
                "ref1": with_threads(1, self.ref),
                "ref2": with_threads(2, self.ref),
                "ours": self.ours,
            },
            rounds=3,
        )
        return min(t["ref1"], t["ref2"]) / t["ours"]

    track_speedup_vs_minimal_best_threads.unit = "x"

    def track_gemm_gflops(self, L, chunk_size):
        secs, flops = gemm_phase(self.ours)
        return flops / secs / 1e9

    track_gemm_gflops.unit = "GFLOP/s"

    def track_gemm_fraction_of_sgemm_roof(self, L, chunk_size):
        # The roof is measured before and after the scan; the larger counts.
        before = sgemm_roof()
        secs, flops = min((gemm_phase(self.ours) for _ in range(3)), key=lambda sf: sf[0])
        return flops / secs / max(before, sgemm_roof())

    track_gemm_fraction_of_sgemm_roof.unit = "fraction"


class SsdForwardHfMamba2(Benchmark):
    """One layer of a Hugging Face Mamba2-130m prefill, as ``propopt_case_studies.mamba.hf``
    calls it.

    L 2048, 24 heads of 64, dstate 128, 1 group, chunk 256, float32, the
    softplus of ``dt + dt_bias``, ``D``, the gate ``z`` and the final state;
    inputs :func:`hf_mamba2_inputs`, with and without an initial state.  The
    model adds 24 of these to its prefill.
    """

    params = [[2048], [False, True]]
    param_names = ["L", "initial_states"]

    def setup(self, L, initial_states):
        self.d = hf_mamba2_inputs(L, initial_states)
        self.ours()

    def ours(self):
        return ssd_scan(**self.d)

    def torch_method(self):
        return ssd_scan(**self.d, method="ops")

    def time_ssd_scan(self, L, initial_states):
        self.ours()

    def track_speedup_vs_torch_method(self, L, initial_states):
        t = alternating_medians({"torch": self.torch_method, "ours": self.ours}, rounds=3)
        return t["torch"] / t["ours"]

    track_speedup_vs_torch_method.unit = "x"

    def track_rel_error(self, L, initial_states):
        import torch

        d64 = {k: v.to(torch.float64) if torch.is_tensor(v) else v for k, v in self.d.items()}
        exact, _ = ssd_scan(**d64, method="reference")
        got = self.ours()[0].to(torch.float64)
        return max(float((got - exact).abs().max() / exact.abs().max()), 1e-300)

    track_rel_error.unit = "max |err| / max |y|"


class SsdPacked(Benchmark):
    """Four sequences of unequal length packed in one row (cu_seqlens) vs a batch of 4."""

    params = [1024]
    param_names = ["tokens"]

    def setup(self, tokens):
        q = tokens // 4
        lengths = [q + q // 2 + 3, q - q // 3, q - 3, tokens - (3 * q + q // 2 - q // 3)]
        self.cu = np.concatenate([[0], np.cumsum(lengths)])
        self.packed = ssd_inputs(tokens, batch=1)
        self.batch = {
            k: (v.reshape(4, q, *v.shape[2:]) if v.ndim > 1 else v) for k, v in self.packed.items()
        }
        self.run_packed()

    def run_packed(self):
        return ssd_scan(**self.packed, chunk_size=64, cu_seqlens=self.cu)

    def run_batch(self):
        return ssd_scan(**self.batch, chunk_size=64)

    def time_packed(self, tokens):
        self.run_packed()

    def time_batch(self, tokens):
        self.run_batch()

    def track_packed_over_batch(self, tokens):
        t = alternating_medians({"packed": self.run_packed, "batch": self.run_batch})
        return t["packed"] / t["batch"]

    track_packed_over_batch.unit = "x (time packed / time batched)"


class SsdForwardBackward(Benchmark):
    """Forward + backward (sum of outputs) under autograd, small head shape, chunk 64."""

    params = [256]
    param_names = ["L"]

    def setup(self, L):
        self.d = {
            k: v.requires_grad_() for k, v in ssd_inputs(L, nheads=8, headdim=32, dstate=32).items()
        }
        self.ours()

    def ours(self):
        ssd_scan(**self.d, chunk_size=64).sum().backward()

    def ref(self):
        ssd_minimal_discrete(*minimal_args(self.d, 64))[0].sum().backward()

    def time_ssd_scan_fwd_bwd(self, L):
        self.ours()

    def time_ssd_minimal_fwd_bwd(self, L):
        self.ref()

    def track_speedup_fwd_bwd_vs_minimal(self, L):
        t = alternating_medians({"ref": self.ref, "ours": self.ours}, rounds=3)
        return t["ref"] / t["ours"]

    track_speedup_fwd_bwd_vs_minimal.unit = "x"
