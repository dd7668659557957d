"""The large sizes of ``benchmarks/``: same suites, parameters that take minutes.

``asv run --config asv.large.conf.json --python=same`` runs them; the
default configuration (``asv.conf.json``) runs the small and medium sizes.
"""

from __future__ import annotations

import sys
from pathlib import Path as _Path
from typing import Any as _Any

# asv.large.conf.json names this folder as its benchmark_dir and imports it as
# the package "large" from benchmarks/, which leaves the repository root, and so
# the quick suites' package, off the path.
if "benchmarks" not in sys.modules:
    sys.path.insert(0, str(_Path(__file__).resolve().parents[2]))

from benchmarks import (
    bench_associativity as _assoc,
    bench_locality as _loc,
    bench_mamba as _mamba,
    bench_nbody as _nbody,
    bench_separability as _sep,
    bench_ssd as _ssd,
    bench_topk as _topk,
)

#: Each large suite: the quick suite it repeats, and its sizes.
LARGE: dict[str, tuple[type, list[_Any]]] = {
    "ScanAdd": (_assoc.ScanAdd, [2**24]),
    "ScanLinearRecurrence": (_assoc.ScanLinearRecurrence, [2**24]),
    "Roofline": (_loc.Roofline, [1 << 24]),
    "MambaForward": (_mamba.MambaForward, [2048]),
    "MambaForwardBackward": (_mamba.MambaForwardBackward, [2048]),
    "MambaScaling": (_mamba.MambaScaling, [512, 2048, 4096]),
    "BarnesHut": (_nbody.BarnesHut, [100_000, 1_000_000]),
    "VsPytreegrav": (_nbody.VsPytreegrav, [100_000, 1_000_000]),
    "Accuracy": (_nbody.Accuracy, [[0.3, 0.5, 0.7, 1.0], [False, True]]),
    "FMM": (_nbody.FMM, [[100_000, 1_000_000], [3e-2, 1e-3, 1e-5, 1e-7]]),
    # a dense SVD of 4000 x 4000 takes 15-30 s; the suite calls it 6 times
    "LowRank": (_sep.LowRank, [4000]),
    "MultipoleField": (_sep.MultipoleField, [[100_000], [2, 3]]),
    "SsdForward": (_ssd.SsdForward, [2048]),
    "SsdForward2p7B": (_ssd.SsdForward2p7B, [[4096], [64, 128, 256]]),
    "SsdPacked": (_ssd.SsdPacked, [4096]),
    "SsdForwardBackward": (_ssd.SsdForwardBackward, [1024]),
    "TopKFloat32": (_topk.TopKFloat32, [10**8]),
    "TopKUnsorted": (_topk.TopKUnsorted, [[10**8], [100, 10**4], [1, 1000]]),
    "TopKCuda": (_topk.TopKCuda, [10**8]),
}

# The quick suite (asv.conf.json, benchmark_dir "benchmarks") walks into this
# package too; there, as benchmarks.large.bench_large, the large sizes are left
# undefined.  Under asv.large.conf.json it is large.bench_large.
_QUICK_DISCOVERY = __name__.startswith("benchmarks.") and "asv_runner" in sys.modules

if not _QUICK_DISCOVERY:
    for _name, (_base, _params) in LARGE.items():
        globals()[_name] = type(_name, (_base,), {"params": _params, "__module__": __name__})
