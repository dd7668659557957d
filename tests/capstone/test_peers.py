"""The peers written from their published definitions equal the float64 reference."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from propopt_case_studies.capstone.peers import (  # noqa: E402
    hf_mixer_scan,
    selective_scan_ref,
    sequential_recurrence,
)
from propopt_case_studies.capstone.workloads import mamba_inputs  # noqa: E402
from propopt_case_studies.mamba import reference  # noqa: E402


@pytest.mark.parametrize("peer", [selective_scan_ref, hf_mixer_scan])
def test_mamba_peers_match_the_reference(peer):
    m = {k: v.double() for k, v in mamba_inputs(40, 8, d_state=4, batch=2).items()}
    D = torch.linspace(-1, 1, 8, dtype=torch.float64)
    z = torch.randn(2, 8, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    bias = torch.full((8,), 0.1, dtype=torch.float64)
    got = peer(**m, D=D, z=z, delta_bias=bias, delta_softplus=True)
    want, _ = reference(**m, D=D, z=z, delta_bias=bias, delta_softplus=True)
    np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-12, atol=1e-12)
    assert got.dtype == torch.float64 and got.shape == (2, 8, 40)


def test_sequential_recurrence_is_the_loop():
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 1.0, 100), rng.normal(size=100)
    h, want = 0.0, []
    for t in range(100):
        h = a[t] * h + b[t]
        want.append(h)
    np.testing.assert_allclose(sequential_recurrence(a, b), want, rtol=1e-14)
