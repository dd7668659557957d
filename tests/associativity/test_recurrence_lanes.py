"""The linear recurrence's h alone in the lane form of the CPU scan (``_cpu_lanes.py``).

The lanes keep ``A`` in a scratch of one tile and write only ``h``; each
result is held against a float64 loop written here, forward and reverse,
inclusive and exclusive, on one thread and on two cooperating threads, with
zero, inf and NaN decays.  On one thread the lanes group the elements as
the scan writing ``A`` and ``h`` does, so ``h`` is the same to the bit.
"""

import functools

import numpy as np
import pytest

import propopt as pp
from propopt.associativity import _cpu, _cpu_forms

LR = pp.linear_recurrence
RTOL = {np.float32: 1e-3, np.float64: 1e-10}


def _loop(a, b, reverse, exclusive):
    """h of h_t = a_t h_{t-1} + b_t from h = 0, one Python step per element in float64;
    exclusive: the state before each step."""
    a64, b64 = a.astype(np.float64).tolist(), b.astype(np.float64).tolist()
    n = len(a64)
    out = [0.0] * n
    h = 0.0
    for i in range(n - 1, -1, -1) if reverse else range(n):
        if exclusive:
            out[i] = h
        h = a64[i] * h + b64[i]
        if not exclusive:
            out[i] = h
    return np.array(out)


def _agrees(got, want, rtol):
    """Finite values within rounding; NaN where the loop has NaN; an inf of the loop's
    sign or NaN where it has an inf (only a regrouping of infinities differs,
    docs/associativity.md)."""
    finite = np.isfinite(want)
    scale = np.abs(want[finite]).max() if finite.any() else 1.0
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=rtol * scale)
    assert np.isnan(got[np.isnan(want)]).all()
    inf = np.isinf(want)
    assert ((got[inf] == want[inf]) | np.isnan(got[inf])).all()


def _sizes(dtype):
    it = np.dtype(dtype).itemsize
    assert not _cpu.tree_for(LR, it, keep=(1,))  # the lanes serve h alone
    return _cpu.tile_elements(2, it, False), _cpu.block_elements(2, it, False)


@functools.cache
def _case(dtype, reverse, n, special):
    """Decays in U(0.5, 1) and inputs N(0, 1); ``special``: zeros at lane, tile and
    block edges, then (in the order of the scan) an inf and, near the end, a NaN."""
    rng = np.random.default_rng(n + 7 * reverse)
    a = rng.uniform(0.5, 1.0, n)
    b = rng.normal(size=n)
    if special:
        tile, block = _sizes(dtype)
        lane = _cpu_forms.LANE
        at = [0, lane - 1, lane, tile, tile + 2 * lane + 1, block, block + 1]
        at += rng.integers(0, n // 2, 50).tolist()
        a[[i for i in at if i < n]] = 0.0
        a[n - n // 4] = np.inf
        a[n - 40] = np.nan
        if reverse:  # the same places counted from the end
            a = a[::-1].copy()
    a, b = a.astype(dtype), b.astype(dtype)
    return a, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("threads", [1, 2])
def test_h_alone_matches_the_float64_loop(dtype, reverse, exclusive, threads):
    """A row of three super-blocks and a part tile, with zero, inf and NaN decays."""
    tile, block = _sizes(dtype)
    n = 3 * block + 2 * tile + 17  # not a multiple of the tile
    a, b = _case(dtype, reverse, n, True)
    with pp.set_num_threads(threads):
        A, h = _cpu.scan(LR, [a, b], 0, reverse, exclusive, keep=(1,))
    assert A is None and h.dtype == dtype and h.shape == (n,)
    want = _loop(a, b, reverse, exclusive)
    assert np.isnan(want).any() and np.isinf(want).any() and np.isfinite(want).mean() > 0.5
    _agrees(h, want, RTOL[dtype])
    if threads == 1:  # grouped as the scan writing A and h
        with pp.set_num_threads(1):
            _, full = _cpu.scan(LR, [a, b], 0, reverse, exclusive)
        np.testing.assert_array_equal(h, full)
    if not exclusive:
        with pp.set_num_threads(threads):
            np.testing.assert_array_equal(pp.recurrence(a, b, reverse=reverse), h)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
def test_short_rows_and_part_tiles(dtype, reverse, exclusive):
    """Lengths about one lane and one tile, and rows side by side."""
    tile, _ = _sizes(dtype)
    for n in (1, 2, _cpu_forms.LANE + 1, tile - 1, tile, tile + 1, 2 * tile + _cpu_forms.LANE + 3):
        a, b = _case(dtype, reverse, n, False)
        with pp.set_num_threads(1):
            A, h = _cpu.scan(LR, [a, b], 0, reverse, exclusive, keep=(1,))
            _, full = _cpu.scan(LR, [a, b], 0, reverse, exclusive)
        assert A is None
        _agrees(h, _loop(a, b, reverse, exclusive), RTOL[dtype])
        np.testing.assert_array_equal(h, full)
    a, b = _case(dtype, reverse, tile + 9, False)
    a2, b2 = np.stack([a, a[::-1]]), np.stack([b, -b])
    with pp.set_num_threads(2):
        _, h2 = _cpu.scan(LR, [a2, b2], 1, reverse, exclusive, keep=(1,))
    for r in range(2):
        _agrees(h2[r], _loop(a2[r], b2[r], reverse, exclusive), RTOL[dtype])
