"""torch bfloat16 and float16 points and weights: accepted, equal to the same values in float32."""

import numpy as np
import pytest

import propopt as pp
from propopt.audit import check_symmetric

torch = pytest.importorskip("torch")

HALF = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_points_and_weights_widen_exactly(dtype):
    x = torch.rand(200, 3, generator=torch.Generator().manual_seed(0)).to(dtype)
    m = torch.rand(200, generator=torch.Generator().manual_seed(1)).to(dtype)
    x32, m32 = x.float().numpy(), m.float().numpy()
    # every half value is exactly a float32, so both calls see the same numbers
    assert np.array_equal(pp.morton_order(x), pp.morton_order(x32))
    a, phi = pp.direct_gravity(x, m, eps=0.1, potential=True)
    a32, phi32 = pp.direct_gravity(x32, m32, eps=0.1, potential=True)
    np.testing.assert_array_equal(a, a32)
    np.testing.assert_array_equal(phi, phi32)
    mo, mo32 = pp.moments(x, m), pp.moments(x32, m32)
    assert mo.mass == mo32.mass
    np.testing.assert_array_equal(mo.center, mo32.center)


def test_audit_takes_bfloat16_samples():
    x = torch.rand(64, 3, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)

    def newton(xi, xj):
        d = xj - xi
        return d / np.linalg.norm(d, axis=-1, keepdims=True) ** 3

    assert check_symmetric(newton, x, antisymmetric=True)
