"""torch tensors: same types out, zero-copy CPU kernel, autograd through the generic path."""

import numpy as np
import pytest

import propopt as pp

torch = pytest.importorskip("torch")


def linrec(x, y):
    return (x[0] * y[0], y[0] * x[1] + y[1])


def test_cpu_tensors_in_tensors_out():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(257, 3, generator=g, dtype=torch.float32) * 0.1 + 0.9
    b = torch.randn(257, 3, generator=g, dtype=torch.float32)
    for method in ("auto", "tiled", "generic"):
        out = pp.associative_scan(pp.linear_recurrence, (a, b), method=method, reverse=True)
        assert all(isinstance(o, torch.Tensor) and o.dtype == torch.float32 for o in out)
        ref = pp.associative_scan(
            pp.linear_recurrence,
            (a.double().numpy(), b.double().numpy()),
            reverse=True,
            method="reference",
        )
        np.testing.assert_allclose(out[1].numpy(), ref[1], rtol=2e-4, atol=1e-5)


def test_requires_grad_uses_the_differentiable_path():
    a = (torch.rand(20, dtype=torch.float64) * 0.5 + 0.5).requires_grad_()
    b = torch.randn(20, dtype=torch.float64, requires_grad=True)
    _, h = pp.associative_scan(pp.linear_recurrence, (a, b))
    assert h.requires_grad
    # the compiled kernels ('tiled', which 'auto' runs) give generic's gradient
    grads = [
        torch.autograd.grad(pp.associative_scan(pp.linear_recurrence, (a, b), method=m)[1].sum(),
                            (a, b))
        for m in ("tiled", "generic")
    ]  # fmt: skip
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("n", [1, 2, 7, 33])
@pytest.mark.parametrize("reverse", [False, True])
def test_gradcheck_generic_linear_recurrence(n, reverse):
    a = (torch.rand(n, 2, dtype=torch.float64) * 0.5 + 0.5).requires_grad_()
    b = torch.randn(n, 2, dtype=torch.float64, requires_grad=True)

    def f(a, b):
        return pp.associative_scan(linrec, (a, b), reverse=reverse)[1]

    assert torch.autograd.gradcheck(f, (a, b))

    def g(a, b):  # the built-in monoid, torch ops, exclusive
        return pp.associative_scan(pp.linear_recurrence, (a, b), exclusive=True)[1]

    assert torch.autograd.gradcheck(g, (a, b))


def test_gradient_matches_sequential_loop():
    a0 = torch.rand(50, dtype=torch.float64) * 0.5 + 0.5
    b0 = torch.randn(50, dtype=torch.float64)
    a1, b1 = a0.clone().requires_grad_(), b0.clone().requires_grad_()
    _, h = pp.associative_scan(linrec, (a1, b1))
    h.square().sum().backward()
    a2, b2 = a0.clone().requires_grad_(), b0.clone().requires_grad_()
    hs, state = [], torch.zeros((), dtype=torch.float64)
    for t in range(50):
        state = a2[t] * state + b2[t]
        hs.append(state)
    torch.stack(hs).square().sum().backward()
    torch.testing.assert_close(a1.grad, a2.grad)
    torch.testing.assert_close(b1.grad, b2.grad)
