"""The in-block scan's machine code for other hosts: AVX-512 with 512-bit and with 256-bit vectors.

numba compiles for the CPU that ``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES``
name, so a child process with those set compiles each built-in monoid's
block kernel (for ``logaddexp``, the tile of its own scan) for an AMD Zen 4
(``znver4``: LLVM uses all 512 bits) and an Intel Rocket Lake
(``rocketlake``: LLVM prefers 256-bit vectors there), and reads its assembly.
Nothing compiled for the other host is run.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

AVX512 = ",".join(
    "+" + f
    for f in (
        "64bit sse sse2 sse3 ssse3 sse4.1 sse4.2 popcnt avx avx2 fma f16c bmi bmi2 lzcnt movbe "
        "avx512f avx512cd avx512bw avx512dq avx512vl"
    ).split()
)

CHILD = textwrap.dedent(
    """
    import json, re, sys
    import numba, numpy as np
    import propopt as pp
    from propopt.associativity import _cpu, _cpu_logsum as L

    OPS = {"add": "vaddp", "mul": "vmulp", "max": "vmaxp|vcmp", "min": "vminp|vcmp",
           "logaddexp": "vfn?m(add|sub)\\\\d*p|vmulp",
           "linear_recurrence": "vfn?m(add|sub)\\\\d*p|vmulp",
           "matmul2x2": "vfn?m(add|sub)\\\\d*p|vmulp"}
    counts = {}
    for m in (pp.add, pp.mul, pp.maximum, pp.minimum, pp.logaddexp, pp.linear_recurrence,
              pp.matmul2x2):
        for dt in (np.dtype(np.float32), np.dtype(np.float64)):
            arr, s = numba.typeof(np.empty(4, dt)), numba.typeof(dt.type(0))
            i64, b = numba.int64, numba.boolean
            if m is pp.logaddexp:  # its own scan: the tile of _cpu_logsum.py
                kernel = numba.njit(nogil=True, fastmath=L.FM)(L._tile.py_func)
                consts = [numba.typeof(v) for v in L._consts(dt)]
                sig = (arr, arr, i64, s, s, arr, *consts, i64)  # the last: chunks
            else:
                kernel = _cpu.inspectable(m, dt)._block
                sig = (*[arr] * (2 * m.arity), i64, i64, i64, b, b, *[s] * (2 * m.arity), b)
            kernel.compile(sig)
            asm = kernel.inspect_asm(kernel.signatures[0])
            op = OPS[str(m.name)]
            lines = [ln for ln in asm.splitlines() if re.search(op, ln)]
            counts[f"{m.name}-{dt.name}"] = {
                reg: sum(f"%{reg}" in ln for ln in lines) for reg in ("zmm", "ymm")
            }
            # the logaddexp tile rescales each chunk's carry by one scalar exp
            libm = r"\\$(log1?p?f?)\\b" if m is pp.logaddexp else r"\\$(expf?|log1?p?f?)\\b"
            counts[f"{m.name}-{dt.name}"]["libm"] = bool(re.search(libm, asm))
    print(json.dumps(counts))
    """
)


def _compile_for(cpu: str, tmp_path) -> dict:
    env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=AVX512,
               NUMBA_CACHE_DIR=str(tmp_path / "numba"))  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize(("cpu", "reg"), [("znver4", "zmm"), ("rocketlake", "ymm")])
def test_every_builtin_block_kernel_combines_whole_vectors(cpu, reg, tmp_path):
    """Every built-in monoid, float32 and float64: its combine's instruction on ``reg``."""
    counts = _compile_for(cpu, tmp_path)
    assert len(counts) == 14
    scalar = {k: v for k, v in counts.items() if v[reg] < 2}
    assert not scalar, f"{cpu}: block kernels without a {reg} combine: {scalar}"
    calls = [k for k, v in counts.items() if v["libm"]]
    assert not calls, f"{cpu}: a libm exp/log1p call is left in {calls}"
