"""Torch autograd through ``associative_scan`` on the compiled kernels, for every monoid.

Each gradient is checked against torch autograd of a float64 sequential loop
written here (it shares no code with propopt), and by
``torch.autograd.gradcheck`` (finite differences) in float64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from propopt import (  # noqa: E402
    Monoid,
    add,
    associative_scan,
    linear_recurrence,
    logaddexp,
    matmul2x2,
    maximum,
    mul,
)
from propopt.associativity.scan import _backends  # noqa: E402
from propopt.dispatch import Backend, takes_any  # noqa: E402


def _affine(a1, b1, a2, b2):  # type: ignore[no-untyped-def]
    return a1 * a2, a2 * b1 + b2


def _cmul(a1, b1, a2, b2):  # type: ignore[no-untyped-def]
    # complex multiplication as two reals: a Jacobian that is not diagonal
    return a1 * a2 - b1 * b2, a1 * b2 + b1 * a2


affine = Monoid(_affine, identity=(1.0, 0.0), name="affine", kinds="f")
cmul = Monoid(_cmul, identity=(1.0, 0.0), name="cmul", kinds="f")

#: the combines of the loop below, written with torch ops (earlier element first)
LOOP = {
    "add": lambda a, b: [a[0] + b[0]],
    "mul": lambda a, b: [a[0] * b[0]],
    "logaddexp": lambda a, b: [torch.logaddexp(a[0], b[0])],
    "max": lambda a, b: [torch.maximum(a[0], b[0])],
    "linear_recurrence": lambda a, b: [a[0] * b[0], b[0] * a[1] + b[1]],
    "affine": lambda a, b: [a[0] * b[0], b[0] * a[1] + b[1]],
    "cmul": lambda a, b: [a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]],
    "matmul2x2": lambda x, y: [
        x[0] * y[0] + x[1] * y[2],
        x[0] * y[1] + x[1] * y[3],
        x[2] * y[0] + x[3] * y[2],
        x[2] * y[1] + x[3] * y[3],
    ],
}
IDENTITY = {
    "add": (0.0,),
    "mul": (1.0,),
    "logaddexp": (-math.inf,),
    "max": (-math.inf,),
    "linear_recurrence": (1.0, 0.0),
    "affine": (1.0, 0.0),
    "cmul": (1.0, 0.0),
    "matmul2x2": (1.0, 0.0, 0.0, 1.0),
}
MONOIDS = {m.name: m for m in (add, mul, logaddexp, maximum, linear_recurrence, affine, cmul,
                               matmul2x2)}  # fmt: skip


def loop_scan(name, leaves, axis=0, reverse=False, exclusive=False, reset=None):  # type: ignore[no-untyped-def]
    """The scan as a sequential loop of torch ops (differentiable by torch)."""
    comb, ident = LOOP[name], IDENTITY[name]
    xs = [x.movedim(axis, 0) for x in leaves]
    n = xs[0].shape[0]
    starts = [False] * n if reset is None else [bool(r) for r in reset]
    order = range(n - 1, -1, -1) if reverse else range(n)
    out = [None] * n
    acc = None
    for t in order:
        # a new segment: at a start in index order (reverse: after the segment's end)
        if (not reverse and starts[t]) or (reverse and t + 1 < n and starts[t + 1]):
            acc = None
        e = [x[t] for x in xs]
        if exclusive:
            out[t] = acc if acc is not None else [torch.full_like(v, c) for v, c in zip(e, ident)]
        acc = e if acc is None else comb(acc, e)
        if not exclusive:
            out[t] = acc
    return [torch.stack([o[i] for o in out]).movedim(0, axis) for i in range(len(xs))]


def _inputs(name, shape, dtype, seed=0):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    k = MONOIDS[name].arity
    # away from 0 (mul) and from ties (max): the derivative is smooth there
    return [(0.6 + 0.5 * torch.rand(shape, generator=g, dtype=dtype)).requires_grad_()
            for _ in range(k)]  # fmt: skip


def _grads(outs, leaves, seed=1):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    w = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
    loss = sum((o * wi).sum() for o, wi in zip(outs, w))
    if not loss.requires_grad:  # an exclusive scan of one element: the identity alone
        return [torch.zeros_like(x) for x in leaves]
    return torch.autograd.grad(loss, leaves, materialize_grads=True)


@pytest.fixture
def no_generic(monkeypatch):  # type: ignore[no-untyped-def]
    """The scan must run on the compiled kernels, not the generic path."""

    def refuse(plan):  # type: ignore[no-untyped-def]
        raise AssertionError("the generic path ran")

    for key in (("generic", "cpu"), ("reference", "cpu")):
        monkeypatch.setitem(_backends.BACKENDS, key, Backend(takes_any, refuse))


CASES = [
    # (reverse, exclusive, axis, reset)
    (False, False, 0, None),
    (True, False, 0, None),
    (False, True, 0, None),
    (True, True, 1, None),
    (False, False, 1, [True, False, False, True, False, True, False]),
    (True, True, 1, [True, False, True, False, False, False, True]),
]


def _cases(names, cases, quick):  # type: ignore[no-untyped-def]
    """Every (name, case); those not in ``quick`` are marked slow (each compiles kernels)."""
    return [
        pytest.param(name, *case, marks=() if (name, i) in quick else pytest.mark.slow)
        for name in names
        for i, case in enumerate(cases)
    ]


#: the default suite's share: each route (written-out Jacobians, diagonal ones by
#: autograd, full ones by the matrix scan) with each flag at least once
QUICK_LOOP = {("linear_recurrence", 0), ("affine", 3), ("add", 4), ("cmul", 5), ("matmul2x2", 1),
              ("mul", 2), ("logaddexp", 0)}  # fmt: skip
QUICK_GRADCHECK = {("linear_recurrence", 1), ("affine", 2), ("matmul2x2", 0), ("add", 3)}


@pytest.mark.parametrize(("name", "reverse", "exclusive", "axis", "reset"),
                         _cases(list(MONOIDS), CASES, QUICK_LOOP))  # fmt: skip
def test_matches_loop(name, reverse, exclusive, axis, reset, no_generic):  # type: ignore[no-untyped-def]
    shape = (3, 7, 2) if axis == 1 else (7, 3)
    xs = _inputs(name, shape, torch.float64)
    r = None if reset is None else np.array(reset)
    outs = associative_scan(MONOIDS[name], tuple(xs), axis=axis, reverse=reverse,
                            exclusive=exclusive, reset=r)  # fmt: skip
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    want = loop_scan(name, xs, axis, reverse, exclusive, reset)
    for got, exp in zip(outs, want):
        torch.testing.assert_close(got, exp, rtol=1e-12, atol=1e-12)
    for got, exp in zip(_grads(outs, xs), _grads(want, xs)):
        torch.testing.assert_close(got, exp, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    ("name", "reverse", "exclusive", "axis", "reset"),
    _cases(["add", "mul", "logaddexp", "linear_recurrence", "affine", "matmul2x2"],
           CASES[:2] + CASES[3:5], QUICK_GRADCHECK),
)  # fmt: skip
def test_gradcheck(name, reverse, exclusive, axis, reset, no_generic):  # type: ignore[no-untyped-def]
    shape = (2, 7, 2) if axis == 1 else (7, 2)
    xs = _inputs(name, shape, torch.float64, seed=3)
    r = None if reset is None else np.array(reset)

    def f(*leaves):  # type: ignore[no-untyped-def]
        out = associative_scan(MONOIDS[name], tuple(leaves), axis=axis, reverse=reverse,
                               exclusive=exclusive, reset=r)  # fmt: skip
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        # an exclusive logaddexp starts at -inf, where finite differences give nan
        return tuple(torch.nan_to_num(o, neginf=0.0) for o in out)

    assert torch.autograd.gradcheck(f, tuple(xs), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_affine_monoid_matches_builtin_float32(no_generic):  # type: ignore[no-untyped-def]
    # a Monoid of its own (no array_combine: its scalar combine runs on tensors)
    # against the built-in, whose Jacobians are written out; loss on h and on A
    g = torch.Generator().manual_seed(5)
    n = 5000
    a = 0.5 + 0.5 * torch.rand(n, generator=g)
    b = torch.randn(n, generator=g)
    grads = []
    for m in (linear_recurrence, affine):
        x = [a.clone().requires_grad_(), b.clone().requires_grad_()]
        A, h = associative_scan(m, tuple(x))
        grads.append(torch.autograd.grad((h * h).sum() + A.sum(), x))
    for got, exp in zip(*grads):
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5 * float(exp.abs().max()))


def test_loss_on_one_output_and_one_leaf(no_generic):  # type: ignore[no-untyped-def]
    # b alone requires grad, and only h is used: the other gradients are never formed
    a = 0.5 + 0.5 * torch.rand(9, dtype=torch.float64)
    b = torch.randn(9, dtype=torch.float64, requires_grad=True)
    for m in (linear_recurrence, affine):
        _, h = associative_scan(m, (a, b))
        (gb,) = torch.autograd.grad(h.sum(), [b])
        _, hr = loop_scan("affine", [a, b])
        (want,) = torch.autograd.grad(hr.sum(), [b])
        torch.testing.assert_close(gb, want)


@pytest.mark.parametrize("n", [0, 1, 2])
def test_short(n, no_generic):  # type: ignore[no-untyped-def]
    for name in ("add", "affine", "matmul2x2"):
        xs = _inputs(name, (n, 2), torch.float64)
        out = associative_scan(MONOIDS[name], tuple(xs), exclusive=True)
        want = loop_scan(name, xs, exclusive=True) if n else [x * 1 for x in xs]
        gs = _grads(list(out) if isinstance(out, (tuple, list)) else [out], xs)
        for got, exp in zip(gs, _grads(want, xs)):
            torch.testing.assert_close(got, exp)


def _exp_combine(a, b):  # type: ignore[no-untyped-def]
    return math.log(math.exp(a) + math.exp(b))


def _branchy(a, b):  # type: ignore[no-untyped-def]
    if a > b:
        return a
    return b


@pytest.mark.parametrize("combine", [_exp_combine, _branchy])
def test_combine_torch_cannot_run(combine):  # type: ignore[no-untyped-def]
    m = Monoid(combine, identity=-math.inf, name="mine", kinds="f")
    x = torch.rand(8, requires_grad=True)
    with pytest.raises(TypeError) as err:
        associative_scan(m, x)
    msg = str(err.value)
    assert "\n" not in msg
    assert "combine 'mine'" in msg and "array_combine" in msg and "detach" in msg
    # detached, the same monoid scans on the kernels
    got = associative_scan(m, x.detach())
    assert got.shape == (8,)


def test_float32_and_no_grad_mode(no_generic):  # type: ignore[no-untyped-def]
    x = torch.rand(100, requires_grad=True)
    with torch.no_grad():
        y = associative_scan(add, x)
    assert not y.requires_grad
    y = associative_scan(add, x)
    (g,) = torch.autograd.grad(y.sum(), [x])
    torch.testing.assert_close(g, torch.arange(100, 0, -1, dtype=torch.float32))
