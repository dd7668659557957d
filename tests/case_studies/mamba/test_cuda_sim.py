"""The numba.cuda kernel on the simulator (tiny shapes) against the reference."""

import numpy as np
import pytest

from propopt_case_studies.mamba import reference
from propopt_case_studies.mamba.scan import _host

from ._data import inputs


@pytest.mark.parametrize(
    "b_kind, c_kind, dtype, dim, L, N",
    [
        ("step", "group", np.float32, 4, 6, 3),
        ("shared", "step", np.float64, 4, 6, 3),
        # 3 blocks of 8 channels x 16 states, tokens in 3 (float32) or 5 chunks
        ("step", "group", np.float32, 12, 37, 16),
        ("group", "shared", np.float64, 12, 37, 16),
    ],
)
def test_cuda_kernel_matches_reference(b_kind, c_kind, dtype, dim, L, N):
    from propopt_case_studies.mamba.scan import _cuda

    d = inputs(batch=2, dim=dim, L=L, N=N, b_kind=b_kind, c_kind=c_kind, dtype=dtype)
    p = _host.prepare(**d, softplus=True, scale_b=True, dtype=np.dtype(dtype))
    out = np.empty(d["u"].shape, dtype)
    last = np.empty(d["initial_state"].shape, dtype)
    _cuda.launch(p.u, p.delta, p.A, p.Bg, p.Cg, p.Dv, p.z, p.bias, p.softplus, p.has_z,
                 p.scale_b, p.h0, out, last, np.dtype(dtype).name)  # fmt: skip
    ref_out, ref_last = reference(**{k: v.astype(np.float64) for k, v in d.items()},
                                  delta_softplus=True)  # fmt: skip
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, ref_out, rtol=tol, atol=tol * np.abs(ref_out).max())
    np.testing.assert_allclose(last, ref_last, rtol=tol, atol=tol * np.abs(ref_last).max())


def test_cuda_rejects_too_large_state():
    from propopt_case_studies.mamba.scan import _cuda

    a = np.zeros((1, 1, 1), np.float32)
    with pytest.raises(ValueError, match="d_state=300: the CUDA kernel holds at most 256"):
        _cuda.launch(a, a, np.zeros((1, 300), np.float32), *([a] * 5), False, False, True,
                     a, a, a, "float32")  # fmt: skip
