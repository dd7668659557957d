"""Registers and spills of the CUDA scan kernels, from ptxas (no GPU needed).

    CUDA_HOME=<toolkit with nvvm/> python ci/cuda_registers.py [ptxas]

(A development check beside CI, not a benchmark: it reads propopt's private
kernel generator.)

Registers per thread decide how many blocks a multiprocessor holds, and
unlike a timing they do not depend on the machine's load.  The kernels are
compiled to PTX for sm_90 by numba (NVVM and NVRTC from ``CUDA_HOME``, e.g.
the ``nvidia-cuda-nvcc-cu12`` and ``nvidia-cuda-nvrtc-cu12`` wheels) and
assembled by ``ptxas -v``.  Without a GPU, numba is told that the current
device has compute capability 9.0 (it asks when typing device functions).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import types

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"

import numpy as np
from numba import boolean, complex64, complex128, cuda, float32, float64, int8, int32, int64


def _pretend_sm90() -> None:
    import numba.cuda.api as api
    import numba.cuda.dispatcher as dispatcher

    fake = types.SimpleNamespace(compute_capability=(9, 0), id=0)
    dispatcher.get_current_device = lambda: fake  # type: ignore[attr-defined]
    api.get_current_device = lambda: fake


def ptxas_report(ptx: str, ptxas: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        # an older ptxas reads newer PTX of the same instructions
        f.write(re.sub(r"^\.version \d+\.\d+", ".version 8.0", ptx, flags=re.M))
    out = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90", f.name, "-o", os.devnull],
                         capture_output=True, text=True, check=True)  # fmt: skip
    os.unlink(f.name)
    regs = re.search(r"Used (\d+) registers", out.stderr)
    spill = re.search(r"(\d+) bytes spill stores", out.stderr)
    return (
        f"{regs.group(1) if regs else '?'} registers, {spill.group(1) if spill else '?'} B spilled"
    )


def main() -> None:
    import propopt as pp
    from propopt import _jit
    from propopt.associativity.scan import _cuda

    ptxas = sys.argv[1] if len(sys.argv) > 1 else "ptxas"
    _pretend_sm90()
    cases = (
        (pp.add, float32),
        (pp.linear_recurrence, float32),
        (pp.add, float64),
        (pp.matmul2x2, float64),
        (pp.add, int32),
        (pp.add, int8),
        (pp.add, complex64),
    )
    for monoid, nbty in cases:
        dtype = np.dtype(str(nbty))
        tpb, items = _cuda._shape(monoid.arity, dtype.itemsize)
        spliced = _jit.splice(monoid.scalar, "_py_combine", "cuda.jit(device=True)")
        k = monoid.arity
        arr = nbty[:, :, ::1]
        ns: dict = dict(spliced.namespace or {})
        src = _cuda._source(k, dtype, tpb, items, spliced.source, False, monoid.flush)
        exec(compile("from numba import cuda\n" + src, f"<{monoid.name}>", "exec"), ns)
        real = float32 if nbty is complex64 else (float64 if nbty is complex128 else nbty)
        flat = real[::1]
        sigs = {
            "scan_tiles": (*[arr] * (2 * k), *[flat] * (2 * k), int32[::1], int64, int64,
                           boolean, boolean, *[nbty] * k),
        }  # fmt: skip
        for name, sig in sigs.items():
            fn = ns[name].py_func
            ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
            print(f"{monoid.name:18s} {dtype.name:9s} {name:12s} {ptxas_report(ptx, ptxas)}")


if __name__ == "__main__":
    main()
