"""The fused backward of mul and linear_recurrence scans.

Two kernels take them: the one generated from the traced combine
(``scan/_grad_traced.py``), and the written-out one (``scan/_grad_kernels.py``)
that runs where sympy is missing.  Each test runs on each, the other and
the scan's remaining backward routes patched to fail so that only that
kernel can have produced the gradients.  They are checked against torch
autograd of a float64 sequential loop written here, and at a length that
takes the threaded kernel against a plain Python float64 loop.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import propopt  # noqa: E402
from propopt import associative_scan, linear_recurrence, mul  # noqa: E402
from propopt.associativity.scan import (  # noqa: E402
    _autograd,
    _backends,
    _grad_kernels,
    _grad_traced,
)
from propopt.dispatch import Backend, takes_any  # noqa: E402


@pytest.fixture(params=["traced", "written"])
def fused_only(request, monkeypatch):  # type: ignore[no-untyped-def]
    """The scan runs on the kernels and its backward on one fused kernel alone."""

    def fail(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a backward route other than the fused kernel ran")

    for name in ("_linear", "_general", "_reverse_recurrence"):
        monkeypatch.setattr(_autograd, name, fail)
    if request.param == "traced":
        monkeypatch.setattr(_autograd, "diagonal", fail)
    else:
        monkeypatch.setattr(_grad_traced, "backward", lambda *args, **kwargs: None)
    for key in (("generic", "cpu"), ("reference", "cpu")):
        monkeypatch.setitem(_backends.BACKENDS, key, Backend(takes_any, fail))
    return request.param


def _loop(a, b, reverse, exclusive):  # type: ignore[no-untyped-def]
    """(A, h) of the scan along the last axis by a Python loop of torch ops (b None: mul)."""
    n = a.shape[-1]
    order = range(n - 1, -1, -1) if reverse else range(n)
    As, hs = [None] * n, [None] * n
    accA = acch = None
    for t in order:
        if exclusive:
            As[t] = torch.ones_like(a[..., t]) if accA is None else accA
            hs[t] = torch.zeros_like(a[..., t]) if acch is None else acch
        bt = torch.zeros_like(a[..., t]) if b is None else b[..., t]
        accA = a[..., t] if accA is None else accA * a[..., t]
        acch = bt if acch is None else a[..., t] * acch + bt
        if not exclusive:
            As[t], hs[t] = accA, acch
    return torch.stack(As, -1), torch.stack(hs, -1)


FLAGS = [(False, False), (True, False), (False, True), (True, True)]
SHAPES = [(9,), (3, 9)]  # the scan runs along the last axis


@pytest.mark.parametrize(("reverse", "exclusive"), FLAGS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("loss", ["h", "A", "both"])
def test_linear_recurrence_fused(reverse, exclusive, shape, loss, fused_only):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(7)
    a = (0.6 + 0.5 * torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
    b = torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_()
    wA, wh = (torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(2))
    axis = len(shape) - 1
    A, h = associative_scan(linear_recurrence, (a, b), axis=axis, reverse=reverse,
                            exclusive=exclusive)  # fmt: skip
    Ar, hr = _loop(a, b, reverse, exclusive)
    torch.testing.assert_close(h, hr, rtol=1e-12, atol=1e-12)

    def f(A, h):  # type: ignore[no-untyped-def]
        return {"h": (h * wh).sum(), "A": (A * wA).sum(), "both": (h * wh + A * wA).sum()}[loss]

    got = torch.autograd.grad(f(A, h), (a, b), materialize_grads=True)
    want = torch.autograd.grad(f(Ar, hr), (a, b), materialize_grads=True)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("reverse", "exclusive"), FLAGS)
@pytest.mark.parametrize("shape", SHAPES)
def test_mul_fused(reverse, exclusive, shape, fused_only):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(8)
    a = (0.6 + 0.5 * torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
    w = torch.randn(shape, generator=g, dtype=torch.float64)
    y = associative_scan(mul, a, axis=len(shape) - 1, reverse=reverse, exclusive=exclusive)
    yr, _ = _loop(a, None, reverse, exclusive)
    (got,) = torch.autograd.grad((y * w).sum(), [a])
    (want,) = torch.autograd.grad((yr * w).sum(), [a])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def _oracle(a, b, wA, wh, reverse, exclusive):  # type: ignore[no-untyped-def]
    """(grad_a, grad_b) of sum(A wA + h wh) by plain Python float64 loops."""
    n = len(a)
    idx = list(range(n - 1, -1, -1)) if reverse else list(range(n))
    zA, zh, accA, acch = [], [], 1.0, 0.0
    for t in idx:  # the inclusive scan, in scan order
        accA, acch = accA * a[t], a[t] * acch + b[t]
        zA.append(accA)
        zh.append(acch)
    gA, gh = [0.0] * n, [0.0] * n
    for s in range(n - 1, -1, -1):  # the gradient of the inclusive outputs
        u = s + 1 if exclusive else s
        yA = wA[idx[u]] if u < n else 0.0
        yh = wh[idx[u]] if u < n else 0.0
        c = a[idx[s + 1]] if s + 1 < n else 0.0
        gA[s] = yA + (c * gA[s + 1] if s + 1 < n else 0.0)
        gh[s] = yh + (c * gh[s + 1] if s + 1 < n else 0.0)
    ga, gb = np.empty(n), np.empty(n)
    for s, t in enumerate(idx):
        gb[t] = gh[s]
        ga[t] = gA[s] if s == 0 else zA[s - 1] * gA[s] + zh[s - 1] * gh[s]
    return ga, gb


@pytest.mark.parametrize(("reverse", "exclusive"), [(False, False), (True, True)])
def test_threads_one_and_two(reverse, exclusive, fused_only, monkeypatch):  # type: ignore[no-untyped-def]
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread")
    chunks = []
    if fused_only == "written":
        rows = _grad_kernels._rows

        def spy(*args):  # type: ignore[no-untyped-def]
            chunks.append(args[13])
            return rows(*args)

        monkeypatch.setattr(_grad_kernels, "_rows", spy)
    else:
        monkeypatch.setattr(_grad_traced, "SERIAL_UP_TO", 1 << 16)
        module = _grad_traced._module

        class Spy:
            def __init__(self, mod):  # type: ignore[no-untyped-def]
                self.walk, self.mod = mod.walk, mod

            def chunked(self, *args):  # type: ignore[no-untyped-def]
                chunks.append(args[6])
                return self.mod.chunked(*args)

        monkeypatch.setattr(_grad_traced, "_module", lambda *args: Spy(module(*args)))
    n = 200_003  # above SERIAL_UP_TO (2^16 for the traced kernel here), not a multiple of lanes
    rng = np.random.default_rng(3)
    a0 = 0.5 + 0.5 * rng.random(n)
    b0, wA, wh = rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n)
    grads = []
    for T in (1, 2):
        a = torch.tensor(a0, requires_grad=True)
        b = torch.tensor(b0, requires_grad=True)
        with propopt.set_num_threads(T):
            A, h = associative_scan(linear_recurrence, (a, b), reverse=reverse,
                                    exclusive=exclusive)  # fmt: skip
            loss = (A * torch.from_numpy(wA)).sum() + (h * torch.from_numpy(wh)).sum()
            grads.append([x.numpy() for x in torch.autograd.grad(loss, (a, b))])
    assert chunks == [2]  # two threads cut the row in two; one thread walks it on its own
    want = _oracle(a0.tolist(), b0.tolist(), wA.tolist(), wh.tolist(), reverse, exclusive)
    for one, two, w in zip(*grads, want):
        np.testing.assert_allclose(two, one, rtol=1e-12, atol=1e-12 * np.abs(w).max())
        np.testing.assert_allclose(one, w, rtol=1e-9, atol=1e-9 * np.abs(w).max())


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_gradient_flushed_below_smallest_normal(sign, fused_only):  # type: ignore[no-untyped-def]
    # g decays by 1e-10 a step from the last position: 1e-40 is subnormal in float32
    n = 8
    a = torch.full((n,), 1e-10, dtype=torch.float32, requires_grad=True)
    b = torch.ones(n, dtype=torch.float32, requires_grad=True)
    _, h = associative_scan(linear_recurrence, (a, b))
    (gb,) = torch.autograd.grad(sign * h[-1], [b])
    assert gb[n - 4].item() == pytest.approx(sign * 1e-30, rel=1e-5)
    assert gb[n - 5].item() == 0.0  # a zero of the sign of the gradient
    assert np.signbit(gb[n - 5].item()) == (sign < 0)
    assert (gb[: n - 4] == 0).all()
