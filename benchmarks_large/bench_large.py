"""The large sizes of ``benchmarks/``: same suites, parameters that take minutes.

``asv run --config asv.large.conf.json --python=same`` runs them; the
default configuration (``asv.conf.json``) runs the small and medium sizes.
"""

from __future__ import annotations

from benchmarks import (
    bench_associativity as _assoc,
    bench_locality as _loc,
    bench_mamba as _mamba,
    bench_nbody as _nbody,
    bench_separability as _sep,
    bench_ssd as _ssd,
    bench_topk as _topk,
)


class ScanAdd(_assoc.ScanAdd):
    params = [2**24]


class ScanLinearRecurrence(_assoc.ScanLinearRecurrence):
    params = [2**24]


class Roofline(_loc.Roofline):
    params = [1 << 24]


class MambaForward(_mamba.MambaForward):
    params = [2048]


class MambaForwardBackward(_mamba.MambaForwardBackward):
    params = [2048]


class MambaScaling(_mamba.MambaScaling):
    params = [512, 2048, 4096]


class BarnesHut(_nbody.BarnesHut):
    params = [100_000, 1_000_000]


class VsPytreegrav(_nbody.VsPytreegrav):
    params = [100_000, 1_000_000]


class Accuracy(_nbody.Accuracy):
    params = [[0.3, 0.5, 0.7, 1.0], [False, True]]


class FMM(_nbody.FMM):
    params = [[100_000, 1_000_000], [3e-2, 1e-3, 1e-5, 1e-7]]


class LowRank(_sep.LowRank):
    params = [4000]  # a dense SVD of 4000 x 4000 takes 15-30 s; the suite calls it 6 times


class MultipoleField(_sep.MultipoleField):
    params = [[100_000], [2, 3]]


class SsdForward(_ssd.SsdForward):
    params = [2048]


class SsdForward2p7B(_ssd.SsdForward2p7B):
    params = [[4096], [64, 128, 256]]


class SsdPacked(_ssd.SsdPacked):
    params = [4096]


class SsdForwardBackward(_ssd.SsdForwardBackward):
    params = [1024]


class TopKFloat32(_topk.TopKFloat32):
    params = [10**8]


class TopKUnsorted(_topk.TopKUnsorted):
    params = [[10**8], [100, 10**4], [1, 1000]]


class TopKCuda(_topk.TopKCuda):
    params = [10**8]
