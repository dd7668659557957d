"""The lane form of the CPU scan prefetches the next tile (``_cpu_prefetch.py``), with
results that do not change, and a short scan takes the direct path of ``_cpu._scan``."""

import re

import numpy as np
import pytest

import propopt as pp
from propopt.associativity import _cpu

from .test_scan import RTOL, draw, reference

F32 = np.dtype(np.float32)


def _x86() -> bool:
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name() not in ("generic", "") and "x86" in llvm.get_process_triple()


@pytest.mark.skipif(not _x86(), reason="reads x86 assembly")
@pytest.mark.parametrize(
    ("m", "reads", "writes"),
    [(pp.add, True, False), (pp.linear_recurrence, True, True)],
    ids=["add", "linear_recurrence"],
)
def test_the_lane_pass_prefetches_the_next_tile(m, reads, writes):
    """``prefetcht0`` for the inputs, ``prefetchw`` for the outputs of multi-component elements."""
    mod = _cpu.inspectable(m, F32, tree=False)
    n = 2 * _cpu.tile_elements(m.arity, 4, False) + 3
    elems = draw(m, (n,), F32, np.random.default_rng(0))
    outs = [np.empty(n, F32) for _ in elems]
    ident = _cpu.identity(m, F32)
    N = np.int64(n)
    mod._block(*elems, *outs, np.int64(0), N, N, False, False, *ident, *ident, True)
    asm = mod._block.inspect_asm(mod._block.signatures[0])
    assert bool(re.search(r"\bprefetcht0\b", asm)) == reads
    assert bool(re.search(r"\bprefetchw\b", asm)) == writes
    for o, r in zip(outs, reference(m, elems)):
        np.testing.assert_allclose(o, r, rtol=RTOL[np.float32], atol=1e-37)


@pytest.mark.skipif(not _x86(), reason="reads x86 assembly")
def test_eight_byte_elements_are_not_prefetched():
    """float64 lanes ran slower with the prefetch (``_cpu_lanes.lane_lines``)."""
    f64 = np.dtype(np.float64)
    mod = _cpu.inspectable(pp.linear_recurrence, f64, tree=False)
    n = 2 * _cpu.tile_elements(2, 8, False) + 3
    elems = draw(pp.linear_recurrence, (n,), f64, np.random.default_rng(2))
    outs = [np.empty(n, f64) for _ in elems]
    ident = _cpu.identity(pp.linear_recurrence, f64)
    N = np.int64(n)
    mod._block(*elems, *outs, np.int64(0), N, N, False, False, *ident, *ident, True)
    asm = mod._block.inspect_asm(mod._block.signatures[0])
    assert not re.search(r"\bprefetch", asm)
    for o, r in zip(outs, reference(pp.linear_recurrence, elems)):
        np.testing.assert_allclose(o, r, rtol=RTOL[np.float64], atol=1e-300)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_reverse_scan_that_prefetches_before_its_start_is_right(reverse):
    """A reverse scan prefetches below index 0 (an address that is never read)."""
    m = pp.linear_recurrence
    n = 3 * _cpu.tile_elements(2, 4, False) + 11
    elems = draw(m, (n,), F32, np.random.default_rng(1))
    with pp.set_num_threads(1):
        got = pp.associative_scan(m, elems, reverse=reverse)
    for g, r in zip(got, reference(m, elems, reverse=reverse)):
        np.testing.assert_allclose(g, r, rtol=RTOL[np.float32], atol=1e-37)


@pytest.mark.parametrize("n", [1, 16, 1000])
def test_short_scans_on_the_direct_path_match_the_fold(n):
    """1-D scans short enough for one call of the block kernel, every direction."""
    rng = np.random.default_rng(n)
    for m in (pp.add, pp.linear_recurrence):
        elems = draw(m, (n,), F32, rng)
        for reverse in (False, True):
            for exclusive in (False, True):
                got = pp.associative_scan(m, elems, reverse=reverse, exclusive=exclusive)
                want = reference(m, elems, reverse=reverse, exclusive=exclusive)
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w, rtol=RTOL[np.float32], atol=1e-37)
