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
        a, p = direct_gravity(
            pos, mass, eps=0.05, targets=targets, method="reference", potential=True
        )
        ac, pc = direct_gravity(
            pos, mass, eps=0.05, targets=targets, device="cuda", tile=4, potential=True
        )
        assert np.allclose(ac, a, rtol=0, atol=1e-12 * np.abs(a).max())
        assert np.allclose(pc, p, rtol=0, atol=1e-12 * np.abs(p).max())


def test_device_arrays_are_accepted():
    rng = np.random.default_rng(1)
    pos = rng.normal(size=(10, 3))
    a, _ = direct_gravity(cuda.to_device(pos), eps=0.1, device="cuda", tile=4)
    assert np.allclose(a, direct_gravity(pos, eps=0.1)[0])


class DeviceOnly:
    """A device array that, like a torch CUDA tensor, refuses to become a NumPy array."""

    def __init__(self, a):
        self.a = cuda.to_device(np.ascontiguousarray(a))
        self.shape, self.dtype, self.ndim = a.shape, a.dtype, a.ndim

    @property
    def __cuda_array_interface__(self):  # marks a CUDA array; the simulator's arrays lack it
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (0, False), "version": 3}

    def __len__(self):
        return self.shape[0]

    def copy_to_host(self):
        return self.a.copy_to_host()

    def __array__(self, *args, **kwargs):
        raise TypeError("can't convert a device array to numpy; copy it to the host first")


def test_masses_and_lengths_may_live_on_the_device():
    rng = np.random.default_rng(2)
    pos, m, e = rng.normal(size=(10, 3)), rng.uniform(1, 2, 10), rng.uniform(0.1, 0.2, 10)
    tgt, te = rng.normal(size=(4, 3)), rng.uniform(0.1, 0.2, 4)
    a0, p0 = direct_gravity(pos, m, eps=e, method="reference", potential=True)
    a, p = direct_gravity(
        *map(DeviceOnly, (pos, m)), eps=DeviceOnly(e), device="cuda", tile=4, potential=True
    )
    assert np.allclose(a, a0, rtol=0, atol=1e-12 * np.abs(a0).max())
    assert np.allclose(p, p0, rtol=0, atol=1e-12 * np.abs(p0).max())
    a0, _ = direct_gravity(pos, m, eps=e, targets=tgt, target_eps=te, method="reference")
    a, _ = direct_gravity(*map(DeviceOnly, (pos, m)), eps=DeviceOnly(e), targets=DeviceOnly(tgt),
                          target_eps=DeviceOnly(te), device="cuda", tile=4)  # fmt: skip
    assert np.allclose(a, a0, rtol=0, atol=1e-12 * np.abs(a0).max())
    w = pairwise_sum(spring_2d, DeviceOnly(pos[:, :2]), DeviceOnly(m), symmetry=SPRING,
                     args=(0.7,), device="cuda", tile=4)  # fmt: skip
    ref = pairwise_sum(spring_2d, pos[:, :2], m, symmetry=SPRING, args=(0.7,), method="reference")
    assert np.allclose(w, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
