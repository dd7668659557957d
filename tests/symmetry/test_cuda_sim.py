"""CUDA pair sums in numba's simulator (tiny inputs): same sums as the double loop."""

import numpy as np
import pytest
from numba import cuda

from propopt import direct_gravity, pairwise_sum

from .test_pairs import SPRING, spring_2d

pytestmark = pytest.mark.skipif(not cuda.is_available(), reason="needs CUDA or the simulator")


@pytest.mark.parametrize("n, tile", [(1, 4), (2, 4), (9, 4), (17, 8)])
def test_halved_cuda_matches_reference(n, tile):
    rng = np.random.default_rng(n)
    X, w = rng.normal(size=(n, 2)), rng.uniform(0.5, 2, n)
    ref = pairwise_sum(spring_2d, X, w, symmetry=SPRING, args=(0.7,), method="reference")
    got = pairwise_sum(spring_2d, X, w, symmetry=SPRING, args=(0.7,), device="cuda", tile=tile)
    assert np.allclose(got, ref, rtol=0, atol=1e-12 * max(np.abs(ref).max(), 1))


def test_gravity_cuda_bodies_and_targets():
    rng = np.random.default_rng(0)
    pos, mass = rng.normal(size=(13, 3)), rng.uniform(0.5, 2, 13)
    tgt = rng.normal(size=(6, 3))
    for targets in (None, tgt):
        a, p = direct_gravity(pos, mass, eps=0.05, targets=targets, method="reference")
        ac, pc = direct_gravity(pos, mass, eps=0.05, targets=targets, device="cuda", tile=4)
        assert np.allclose(ac, a, rtol=0, atol=1e-12 * np.abs(a).max())
        assert np.allclose(pc, p, rtol=0, atol=1e-12 * np.abs(p).max())


def test_device_arrays_are_accepted():
    rng = np.random.default_rng(1)
    pos = rng.normal(size=(10, 3))
    a, _ = direct_gravity(cuda.to_device(pos), eps=0.1, device="cuda", tile=4)
    assert np.allclose(a, direct_gravity(pos, eps=0.1)[0])
