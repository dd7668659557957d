"""Top-k of float32 scores: propopt.topk against the memory floor and peers.

Targets at n = 10^8 float32, k = 1000 on the 2-core development machine:
* at most 1.3x the time of one multi-threaded pass computing the maximum of
  the same array (``propopt_case_studies.capstone.machine.read_pass``: the memory-bandwidth floor);
* at least 10x faster than ``np.argpartition``, at least 30x faster than
  ``torch.topk``;
* streamed as 100 chunks of 10^6 through ``TopK.update``: within 1.5x of
  the in-memory figure.
The chapter's baselines (heapq loop, sort everything) are reference rows at
n <= 10^6 (a Python step per element: 10^8 would take minutes).
"""

from __future__ import annotations

import heapq

import numpy as np

import propopt as pp
from propopt.redundancy import MisraGries
from propopt_case_studies.capstone.machine import read_pass
from propopt_case_studies.streaming_topk import heapq_loop, sort_everything

from .common import Benchmark, median_seconds, ratio

K = 1000


def _streamed(x: np.ndarray, chunks: int) -> pp.TopK:
    s = pp.TopK.empty(K, x.dtype)
    for c in np.array_split(x, chunks):
        s.update(c)
    return s


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


class TopKFloat32(Benchmark):
    """k = 1000 largest of n random float32."""

    params = [10**6, 10**7]
    param_names = ["n"]

    def setup(self, n):
        self.x = np.random.default_rng(0).random(n, dtype=np.float32)
        assert read_pass(self.x) == self.x.max()
        self.chunks = 100
        pp.topk(self.x, K)
        _streamed(self.x, self.chunks)
        torch = _torch()
        self.tx = None if torch is None else torch.from_numpy(self.x)

    def time_max_pass(self, n):
        read_pass(self.x)

    def time_propopt_topk(self, n):
        pp.topk(self.x, K)

    def time_propopt_streamed(self, n):
        _streamed(self.x, self.chunks)

    def time_np_argpartition(self, n):
        np.argpartition(self.x, n - K)

    def time_torch_topk(self, n):
        if self.tx is None:
            raise NotImplementedError("torch is not installed")
        _torch().topk(self.tx, K)

    def track_time_over_max_pass(self, n):
        return 1.0 / ratio(lambda: read_pass(self.x), lambda: pp.topk(self.x, K))

    track_time_over_max_pass.unit = "x max pass"

    def track_speedup_vs_argpartition(self, n):
        return ratio(lambda: np.argpartition(self.x, n - K), lambda: pp.topk(self.x, K), 3)

    track_speedup_vs_argpartition.unit = "x"

    def track_speedup_vs_torch(self, n):
        if self.tx is None:
            raise NotImplementedError("torch is not installed")
        torch = _torch()
        return ratio(lambda: torch.topk(self.tx, K), lambda: pp.topk(self.x, K), 3)

    track_speedup_vs_torch.unit = "x"

    def track_streamed_over_in_memory(self, n):
        return 1.0 / ratio(lambda: pp.topk(self.x, K), lambda: _streamed(self.x, self.chunks))

    track_streamed_over_in_memory.unit = "x in-memory"


class TopKUnsorted(Benchmark):
    """``sorted=False`` against the default best-first order: one row, or rows of 10^5.

    The same pairs either way; unsorted skips the sort of each row's winners
    (and of each thread's piece of a long row).
    """

    params = [[10**7], [100, 10**4], [1, 100]]
    param_names = ["n", "k", "rows"]

    def setup(self, n, k, rows):
        x = np.random.default_rng(4).random(n, dtype=np.float32)
        self.x = x.reshape(rows, -1) if rows > 1 else x
        pp.topk(self.x, k)
        pp.topk(self.x, k, sorted=False)

    def time_sorted(self, n, k, rows):
        pp.topk(self.x, k)

    def time_unsorted(self, n, k, rows):
        pp.topk(self.x, k, sorted=False)

    def track_sorted_over_unsorted(self, n, k, rows):
        return ratio(lambda: pp.topk(self.x, k), lambda: pp.topk(self.x, k, sorted=False), 5)

    track_sorted_over_unsorted.unit = "x"


class TopKRows(Benchmark):
    """Many rows of 10^7 float32 in all (k = 10), random or ascending rows, against torch.topk.

    Rows of at least 256 elements and 16k start from a threshold sampled from
    themselves (``topk._order.ROW_SEED_*``).
    """

    params = [[10**4, 100], ["random", "ascending"]]
    param_names = ["rows", "order"]
    K = 10

    def setup(self, rows, order):
        x = np.random.default_rng(5).random(10**7, dtype=np.float32).reshape(rows, -1)
        self.x = np.sort(x, axis=1) if order == "ascending" else x
        pp.topk(self.x, self.K)
        torch = _torch()
        self.tx = None if torch is None else torch.from_numpy(self.x)

    def time_propopt_topk(self, rows, order):
        pp.topk(self.x, self.K)

    def track_speedup_vs_torch(self, rows, order):
        if self.tx is None:
            raise NotImplementedError("torch is not installed")
        torch = _torch()
        return ratio(lambda: torch.topk(self.tx, self.K), lambda: pp.topk(self.x, self.K), 3)

    track_speedup_vs_torch.unit = "x"


class TopKAdversarial(Benchmark):
    """Ascending input: every element beats the threshold (a heap's worst case)."""

    params = [10**6, 10**7]
    param_names = ["n"]

    def setup(self, n):
        self.random = np.random.default_rng(1).random(n, dtype=np.float32)
        self.ascending = np.sort(self.random)
        pp.topk(self.ascending, K)

    def time_random(self, n):
        pp.topk(self.random, K)

    def time_ascending(self, n):
        pp.topk(self.ascending, K)

    def track_ascending_over_random(self, n):
        """A constant factor (admitting and compacting), not a log k or log n one."""
        return 1.0 / ratio(lambda: pp.topk(self.random, K), lambda: pp.topk(self.ascending, K))

    track_ascending_over_random.unit = "x random"

    def track_ascending_ns_per_element(self, n):
        return 1e9 * median_seconds(lambda: pp.topk(self.ascending, K), 3) / n

    track_ascending_ns_per_element.unit = "ns"


class TopKChapterBaselines(Benchmark):
    """The chapter's heapq loop and sort-everything, on a Python list of scores."""

    params = [10**5, 10**6]
    param_names = ["n"]

    def setup(self, n):
        self.x = np.random.default_rng(2).random(n, dtype=np.float32)
        self.events = self.x.tolist()
        pp.topk(self.x, K)

    def time_sort_everything(self, n):
        sort_everything(self.events, K, key=None)

    def time_heapq_loop(self, n):
        heapq_loop(self.events, K, key=None)

    def time_heapq_nlargest(self, n):
        heapq.nlargest(K, self.events)

    def time_propopt_topk(self, n):
        pp.topk(self.x, K)

    def track_speedup_vs_heapq_loop(self, n):
        return ratio(lambda: heapq_loop(self.events, K, key=None), lambda: pp.topk(self.x, K), 3)

    track_speedup_vs_heapq_loop.unit = "x"

    def track_speedup_vs_sort_everything(self, n):
        return ratio(
            lambda: sort_everything(self.events, K, key=None), lambda: pp.topk(self.x, K), 3
        )

    track_speedup_vs_sort_everything.unit = "x"


class HeavyHitters(Benchmark):
    """Misra-Gries (batched NumPy) against datasketches.frequent_items_sketch, equal counters."""

    params = [10**5, 10**6]
    param_names = ["n"]
    LG = 10  # datasketches map of 1024 slots: up to 768 counters

    def setup(self, n):
        try:
            import datasketches
        except ImportError as exc:
            raise NotImplementedError("datasketches is not installed") from exc
        self.ds = datasketches
        self.items = np.random.default_rng(3).zipf(1.2, n) % 100_000
        self.list = self.items.tolist()
        self.keys, self.true = np.unique(self.items, return_counts=True)

    def _ours(self):
        s = MisraGries(768)
        for c in np.array_split(self.items, 10):
            s.update(c)
        return s

    def _theirs(self):
        sk = self.ds.frequent_items_sketch(self.LG)
        for v in self.list:
            sk.update(v)
        return sk

    def time_misra_gries(self, n):
        self._ours()

    def time_datasketches(self, n):
        self._theirs()

    def track_speedup_vs_datasketches(self, n):
        return ratio(self._theirs, self._ours, 3)

    track_speedup_vs_datasketches.unit = "x"

    def track_max_error_over_n(self, n):
        """Largest count error / n (ours; the bound is 1/769 = 1.3e-3)."""
        err = self.true - self._ours().estimate(self.keys)
        return max(float(err.max()) / n, 1e-300)  # 0 when every count is exact

    track_max_error_over_n.unit = "fraction of n"

    def track_datasketches_max_error_over_n(self, n):
        sk = self._theirs()
        est = np.array([sk.get_estimate(int(k)) for k in self.keys])
        return max(float(np.abs(self.true - est).max()) / n, 1e-300)

    track_datasketches_max_error_over_n.unit = "fraction of n"


class TopKCuda(Benchmark):
    """propopt.topk on a torch CUDA tensor against torch.topk (needs a GPU)."""

    params = [10**6, 10**7]
    param_names = ["n"]

    def setup(self, n):
        torch = _torch()
        if torch is None or not torch.cuda.is_available():
            raise NotImplementedError("needs torch with a CUDA GPU")
        self.torch = torch
        self.x = torch.rand(n, device="cuda")
        pp.topk(self.x, K)
        torch.cuda.synchronize()

    def time_propopt_cuda(self, n):
        pp.topk(self.x, K)
        self.torch.cuda.synchronize()

    def time_torch_topk(self, n):
        self.torch.topk(self.x, K)
        self.torch.cuda.synchronize()

    def track_speedup_vs_torch(self, n):
        sync = self.torch.cuda.synchronize
        return ratio(
            lambda: (self.torch.topk(self.x, K), sync()), lambda: (pp.topk(self.x, K), sync()), 3
        )

    track_speedup_vs_torch.unit = "x"
