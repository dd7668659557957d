"""associative_scan against np.cumsum, a copy, and jax.lax.associative_scan.

Targets at N = 2^24 float32 on the 2-core development machine:
* add: at most 2x the time of np.copy, at least 3x faster than np.cumsum;
* linear recurrence: at least 8x faster than jax (jitted, warm), at most 3x
  the copy time of its input;
* generic path with the recurrence written as NumPy ops: at least 1.5x
  faster than jax.
"""

from __future__ import annotations

import numpy as np

import propopt as pp
from propopt_case_studies.capstone.peers import sequential_recurrence

from .common import Benchmark, ratio


def _linrec_numpy(x, y):
    return (x[0] * y[0], y[0] * x[1] + y[1])


def _jax_scans():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:  # jax lives in the bench extra
        return None
    add = jax.jit(lambda v: jax.lax.associative_scan(jnp.add, v))
    lin = jax.jit(lambda a, b: jax.lax.associative_scan(_linrec_numpy, (a, b)))
    return jnp, add, lin


class ScanAdd(Benchmark):
    """Cumulative sum of float32."""

    params = [2**16, 2**20]
    param_names = ["n"]

    def setup(self, n):
        self.x = np.random.default_rng(0).normal(size=n).astype(np.float32)
        pp.associative_scan(pp.add, self.x)  # compile
        self.jax = _jax_scans()
        if self.jax is not None:
            self.jx = self.jax[0].asarray(self.x)
            self.jax[1](self.jx).block_until_ready()

    def time_np_copy(self, n):
        np.copy(self.x)

    def time_np_cumsum(self, n):
        np.cumsum(self.x)

    def time_propopt_cpu(self, n):
        pp.associative_scan(pp.add, self.x)

    def time_jax(self, n):
        if self.jax is None:
            raise NotImplementedError("jax is not installed")
        self.jax[1](self.jx).block_until_ready()

    def track_speedup_vs_cumsum(self, n):
        return ratio(lambda: np.cumsum(self.x), lambda: pp.associative_scan(pp.add, self.x))

    track_speedup_vs_cumsum.unit = "x"

    def track_time_over_copy(self, n):
        return 1.0 / ratio(lambda: np.copy(self.x), lambda: pp.associative_scan(pp.add, self.x))

    track_time_over_copy.unit = "x copy"


class ScanHalf(Benchmark):
    """Cumulative sum of float16 / bfloat16: widened to float32, scanned, rounded once.

    The cost over the float32 scan of the same values is the two casts;
    NumPy's float16 casts are the slow ones.
    """

    params = [[2**20], ["float16", "bfloat16"], ["numpy", "torch"]]
    param_names = ["n", "dtype", "lib"]

    def setup(self, n, dtype, lib):
        # prefix sums stay below float16's largest value (65504)
        x = np.random.default_rng(0).uniform(0.5, 1.5, n) * (32768 / n)
        if lib == "torch":
            try:
                import torch
            except ImportError:
                raise NotImplementedError("torch is not installed") from None
            self.half = torch.from_numpy(x).to(getattr(torch, dtype))
            self.f32 = self.half.float()
        else:
            if dtype == "bfloat16":
                try:
                    import ml_dtypes
                except ImportError:
                    raise NotImplementedError("ml_dtypes is not installed") from None
                self.half = x.astype(ml_dtypes.bfloat16)
            else:
                self.half = x.astype(np.float16)
            self.f32 = self.half.astype(np.float32)
        self.exact = np.cumsum(np.asarray(self.f32, dtype=np.float64))
        pp.associative_scan(pp.add, self.half)  # compile

    def time_propopt_half(self, n, dtype, lib):
        pp.associative_scan(pp.add, self.half)

    def time_propopt_float32(self, n, dtype, lib):
        pp.associative_scan(pp.add, self.f32)

    def track_time_over_float32(self, n, dtype, lib):
        f32 = self.f32
        return 1.0 / ratio(
            lambda: pp.associative_scan(pp.add, f32), lambda: pp.associative_scan(pp.add, self.half)
        )

    track_time_over_float32.unit = "x float32"

    def track_rel_error(self, n, dtype, lib):
        out = pp.associative_scan(pp.add, self.half)
        got = np.asarray(out.float() if lib == "torch" else out, dtype=np.float64)
        return float(np.max(np.abs(got - self.exact) / self.exact))

    track_rel_error.unit = "relative"


class ScanLinearRecurrence(Benchmark):
    """h_t = a_t h_{t-1} + b_t in float32, as a pair (a, b)."""

    params = [2**16, 2**20]
    param_names = ["n"]

    def setup(self, n):
        rng = np.random.default_rng(0)
        self.a = rng.uniform(0.9, 1.0, n).astype(np.float32)
        self.b = rng.normal(size=n).astype(np.float32)
        pp.associative_scan(pp.linear_recurrence, (self.a, self.b))
        pp.associative_scan(_linrec_numpy, (self.a, self.b))
        self.jax = _jax_scans()
        if self.jax is not None:
            self.ja, self.jb = self.jax[0].asarray(self.a), self.jax[0].asarray(self.b)
            self._jax_run()

    def _jax_run(self):
        import jax

        jax.block_until_ready(self.jax[2](self.ja, self.jb))

    def _cpu(self):
        return pp.associative_scan(pp.linear_recurrence, (self.a, self.b))

    def _generic(self):
        return pp.associative_scan(_linrec_numpy, (self.a, self.b))

    def time_copy_inputs(self, n):
        np.copy(self.a)
        np.copy(self.b)

    def time_sequential_loop_numba(self, n):
        _sequential(self.a, self.b)

    def time_propopt_cpu(self, n):
        self._cpu()

    def time_propopt_generic(self, n):
        self._generic()

    def time_jax(self, n):
        if self.jax is None:
            raise NotImplementedError("jax is not installed")
        self._jax_run()

    def track_speedup_cpu_vs_jax(self, n):
        if self.jax is None:
            raise NotImplementedError("jax is not installed")
        return ratio(self._jax_run, self._cpu)

    track_speedup_cpu_vs_jax.unit = "x"

    def track_speedup_generic_vs_jax(self, n):
        if self.jax is None:
            raise NotImplementedError("jax is not installed")
        return ratio(self._jax_run, self._generic, repeats=5)

    track_speedup_generic_vs_jax.unit = "x"

    def track_time_over_copy_inputs(self, n):
        return 1.0 / ratio(lambda: (np.copy(self.a), np.copy(self.b)), self._cpu)

    track_time_over_copy_inputs.unit = "x copy"

    def track_speedup_cpu_vs_sequential(self, n):
        return ratio(lambda: _sequential(self.a, self.b), self._cpu)

    track_speedup_cpu_vs_sequential.unit = "x"


def _sequential(a, b):
    return sequential_recurrence(a, b)


class ScanLogaddexp(Benchmark):
    """The running log-sum-exp (``logaddexp``): one row against a copy and
    ``torch.logcumsumexp``, and for short ``n`` 256 rows against it."""

    params = [1000, 2**20]
    param_names = ["n"]

    def setup(self, n):
        g = np.random.default_rng(0)
        self.x = g.normal(size=n).astype(np.float32)
        self.rows = g.normal(size=(256, n)).astype(np.float32) if n <= 4096 else None
        pp.associative_scan(pp.logaddexp, self.x)  # compile
        try:
            import torch
        except ImportError:
            self.torch = None
        else:
            self.torch = torch
            self.tx = torch.from_numpy(self.x)
            self.trows = None if self.rows is None else torch.from_numpy(self.rows)

    def time_np_copy(self, n):
        np.copy(self.x)

    def time_propopt_cpu(self, n):
        pp.associative_scan(pp.logaddexp, self.x)

    def time_propopt_rows(self, n):
        if self.rows is None:
            raise NotImplementedError("rows only for short n")
        pp.associative_scan(pp.logaddexp, self.rows, axis=1)

    def time_torch_logcumsumexp(self, n):
        if self.torch is None:
            raise NotImplementedError("torch is not installed")
        self.torch.logcumsumexp(self.tx, dim=0)

    def time_torch_rows(self, n):
        if self.torch is None or self.rows is None:
            raise NotImplementedError("torch is not installed, or n is long")
        self.torch.logcumsumexp(self.trows, dim=1)

    def track_time_over_copy(self, n):
        return 1.0 / ratio(
            lambda: np.copy(self.x), lambda: pp.associative_scan(pp.logaddexp, self.x)
        )

    track_time_over_copy.unit = "x copy"
