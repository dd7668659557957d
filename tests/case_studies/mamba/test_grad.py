"""Gradients of the fused CPU autograd Function: gradcheck, and agreement with autograd."""

import numpy as np
import pytest

from propopt_case_studies.mamba import selective_scan

from ._data import inputs

torch = pytest.importorskip("torch")

NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")


def _tensors(d):
    return [torch.from_numpy(d[k]).requires_grad_() for k in NAMES]


def _fn(method):
    def f(*xs):
        return selective_scan(*xs[:8], delta_softplus=True, return_last_state=True,
                              initial_state=xs[8], method=method)  # fmt: skip

    return f


#: gradcheck runs the backward twice and by default wants the same bits; the
#: backward's float reductions may regroup with the per-call thread count, which
#: follows the machine's load, so two runs may differ in the last bits (once
#: seen: "backward is not reentrant").  The Jacobian check is unchanged.
NONDET = 1e-12


@pytest.mark.parametrize(
    "b_kind, c_kind, dim, L, fast",
    [
        pytest.param("step", "step", 4, 5, False, marks=pytest.mark.slow),
        ("group", "shared", 4, 7, True),
        pytest.param("shared", "group", 2, 1, False, marks=pytest.mark.slow),
    ],
)
def test_gradcheck_float64(b_kind, c_kind, dim, L, fast):
    # Each input element costs two forward calls: shapes stay tiny.
    d = inputs(batch=2, dim=dim, L=L, N=2, b_kind=b_kind, c_kind=c_kind)
    assert torch.autograd.gradcheck(_fn("fused"), _tensors(d), fast_mode=fast, nondet_tol=NONDET)


@pytest.mark.slow
def test_gradcheck_float64_across_chunks():
    # L = 70 crosses a checkpoint (every 64 tokens); fast_mode checks random
    # projections of the Jacobian instead of every column.
    d = inputs(batch=1, dim=2, L=70, N=2, b_kind="step", c_kind="step")
    assert torch.autograd.gradcheck(_fn("fused"), _tensors(d), fast_mode=True, nondet_tol=NONDET)


@pytest.mark.parametrize("L", [1, 65, pytest.param(64, marks=pytest.mark.slow),
                               pytest.param(200, marks=pytest.mark.slow)])  # fmt: skip
def test_gradients_match_autograd_of_the_reference(L):
    # Chunked recomputation (CHUNK = 64) crosses chunk boundaries at L > 64.
    d = inputs(batch=2, dim=16, L=L, N=3, b_kind="group", c_kind="step")
    g = torch.Generator().manual_seed(0)
    w_out = torch.randn(2, 16, L, generator=g, dtype=torch.float64)
    w_last = torch.randn(2, 16, 3, generator=g, dtype=torch.float64)
    grads = {}
    for method in ("fused", "reference", "parallel"):
        xs = _tensors(d)
        out, last = _fn(method)(*xs)
        ((out * w_out).sum() + (last * w_last).sum()).backward()
        grads[method] = [x.grad.numpy() for x in xs]
    for name, a, r, p in zip(NAMES, grads["fused"], grads["reference"], grads["parallel"]):
        scale = np.abs(r).max()
        assert np.abs(a - r).max() <= 1e-11 * scale, name
        assert np.abs(p - r).max() <= 1e-11 * scale, name


def test_gradient_through_the_last_state_only():
    d = inputs(batch=1, dim=3, L=130, N=2)
    xs = _tensors(d)
    _, last = _fn("fused")(*xs)
    last.sum().backward()
    assert all(x.grad is not None for x in xs)
    xs_ref = _tensors(d)
    _, last_ref = _fn("reference")(*xs_ref)
    last_ref.sum().backward()
    for a, r in zip(xs, xs_ref):  # D and z do not reach the state: None in autograd
        want = np.zeros(tuple(a.shape)) if r.grad is None else r.grad.numpy()
        np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_float32_gradients_and_half_dtypes():
    d = inputs(batch=1, dim=16, L=100, N=4, dtype=np.float32)
    xs = [torch.from_numpy(d[k]).to(torch.bfloat16).requires_grad_() for k in NAMES]
    out, _ = _fn("fused")(*xs)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert all(x.grad is not None and x.grad.dtype == torch.bfloat16 for x in xs)
    xs32 = _tensors(d)
    out32, _ = _fn("fused")(*xs32)
    out32.sum().backward()
    xs64 = [torch.from_numpy(d[k].astype(np.float64)).requires_grad_() for k in NAMES]
    _fn("reference")(*xs64)[0].sum().backward()
    for name, a, r in zip(NAMES, xs32, xs64):
        err = (a.grad.double() - r.grad).abs().max() / r.grad.abs().max()
        assert err <= 1e-4, name  # float32 sums over up to L * dim terms


@pytest.mark.slow
def test_chapter_layout_gradients_match_the_chapter_loop():
    from propopt_case_studies.mamba import chapter_scan, naive

    rng = np.random.default_rng(5)
    raw = [rng.normal(size=(2, 70, 32)), -np.exp(rng.normal(size=(32, 4))),
           rng.normal(size=(2, 70, 4)), rng.normal(size=(2, 70, 4)),
           np.abs(rng.normal(size=(2, 70, 32)))]  # fmt: skip
    grads = []
    for fn in (chapter_scan, naive):
        xs = [torch.from_numpy(v).requires_grad_() for v in raw]
        y = fn(*xs)
        assert y.shape == (2, 70, 32)
        (y * torch.from_numpy(raw[0])).sum().backward()
        grads.append([x.grad.numpy() for x in xs])
    for a, r in zip(*grads):
        np.testing.assert_allclose(a, r, rtol=1e-10, atol=1e-10 * np.abs(r).max())
