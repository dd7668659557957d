"""The backward of a user's Monoid from its traced combine (``scan/_grad_traced.py``).

Each gradient is checked against torch autograd of a float64 sequential loop
of torch operations written here (it shares no code with propopt), with the
scan's other backward routes patched to fail, so that only the kernel
generated from the traced combine can have produced it; and a combine that
does not trace is checked to keep the torch route, correctly.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sympy")

from propopt import Monoid, associative_scan, linear_recurrence  # noqa: E402
from propopt.associativity.scan import _autograd, _backends, _grad_traced  # noqa: E402
from propopt.dispatch import Backend, takes_any  # noqa: E402


def affine_combine(a1, b1, a2, b2):  # type: ignore[no-untyped-def]
    return a1 * a2, a2 * b1 + b2


def cmul_combine(a1, b1, a2, b2):  # type: ignore[no-untyped-def]
    return a1 * a2 - b1 * b2, a1 * b2 + b1 * a2


def mat_combine(a, b, c, d, e, f, g, h):  # type: ignore[no-untyped-def]
    return a * e + b * g, a * f + b * h, c * e + d * g, c * f + d * h


def velocity_combine(a, b):  # type: ignore[no-untyped-def]
    # relativistic addition of velocities: a division and a constant
    return (a + b) / (1 + a * b)


def shifted_combine(a, b):  # type: ignore[no-untyped-def]
    # (1 + a)(1 + b) - 1
    return a + b + a * b


def scaled_affine(c):  # type: ignore[no-untyped-def]
    def comb(a1, b1, a2, b2):  # type: ignore[no-untyped-def]
        return a1 * a2, a2 * b1 + c * b2

    return comb


#: name: (monoid, the combine of the loop in torch ops)
CASES = {
    "affine": (Monoid(affine_combine, identity=(1.0, 0.0), name="affine", kinds="f"),
               lambda a, b: [a[0] * b[0], b[0] * a[1] + b[1]]),
    "cmul": (Monoid(cmul_combine, identity=(1.0, 0.0), name="cmul", kinds="f"),
             lambda a, b: [a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]]),
    "mat2": (Monoid(mat_combine, identity=(1.0, 0.0, 0.0, 1.0), name="mat2", kinds="f"),
             lambda x, y: [x[0] * y[0] + x[1] * y[2], x[0] * y[1] + x[1] * y[3],
                           x[2] * y[0] + x[3] * y[2], x[2] * y[1] + x[3] * y[3]]),
    "velocity": (Monoid(velocity_combine, identity=0.0, name="velocity", kinds="f"),
                 lambda a, b: [(a[0] + b[0]) / (1 + a[0] * b[0])]),
    "shifted": (Monoid(shifted_combine, identity=0.0, name="shifted", kinds="f"),
                lambda a, b: [a[0] + b[0] + a[0] * b[0]]),
    "scaled1": (Monoid(scaled_affine(1.0), identity=(1.0, 0.0), name="scaled", kinds="f"),
                lambda a, b: [a[0] * b[0], b[0] * a[1] + 1.0 * b[1]]),
    "scaled3": (Monoid(scaled_affine(3.0), identity=(1.0, 0.0), name="scaled", kinds="f"),
                lambda a, b: [a[0] * b[0], b[0] * a[1] + 3.0 * b[1]]),
}  # fmt: skip


def loop(comb, leaves, reverse=False, exclusive=False, ident=None):  # type: ignore[no-untyped-def]
    """The scan along the last axis as a sequential loop of torch ops."""
    n = leaves[0].shape[-1]
    order = range(n - 1, -1, -1) if reverse else range(n)
    out, acc = [None] * n, None
    for t in order:
        e = [x[..., t] for x in leaves]
        if exclusive:
            out[t] = acc if acc is not None else [torch.full_like(v, c) for v, c in zip(e, ident)]
        acc = e if acc is None else comb(acc, e)
        if not exclusive:
            out[t] = acc
    return [torch.stack([o[i] for o in out], -1) for i in range(len(leaves))]


@pytest.fixture
def traced_only(monkeypatch):  # type: ignore[no-untyped-def]
    """The scan runs on the kernels and its backward on the traced kernel alone."""

    def fail(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a backward route other than the traced kernel ran")

    for name in ("_linear", "_general", "_reverse_recurrence", "diagonal"):
        monkeypatch.setattr(_autograd, name, fail)
    for key in (("generic", "cpu"), ("reference", "cpu")):
        monkeypatch.setitem(_backends.BACKENDS, key, Backend(takes_any, fail))


def _inputs(k, shape, seed):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    # near one and positive: products stay bounded, 1 + a b away from 0
    return [(0.7 + 0.4 * torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
            for _ in range(k)]  # fmt: skip


def _check(name, shape, reverse, exclusive, live=None, seed=0):  # type: ignore[no-untyped-def]
    monoid, comb = CASES[name]
    k = monoid.arity
    xs = _inputs(k, shape, seed)
    outs = associative_scan(monoid, tuple(xs) if k > 1 else xs[0], axis=len(shape) - 1,
                            reverse=reverse, exclusive=exclusive)  # fmt: skip
    outs = list(outs) if k > 1 else [outs]
    ident = monoid.identity(np.dtype(np.float64))
    want = loop(comb, xs, reverse, exclusive, ident)
    for got, exp in zip(outs, want):
        torch.testing.assert_close(got, exp, rtol=1e-11, atol=1e-12)
    g = torch.Generator().manual_seed(seed + 1)
    ws = [torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(k)]
    use = range(k) if live is None else live

    def loss(ys):  # type: ignore[no-untyped-def]
        return sum((ys[i] * ws[i]).sum() for i in use)

    got = torch.autograd.grad(loss(outs), xs, materialize_grads=True)
    exp = torch.autograd.grad(loss(want), xs, materialize_grads=True)
    for x, y in zip(got, exp):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11)


FLAGS = [(False, False), (True, False), (False, True), (True, True)]


@pytest.mark.parametrize(("reverse", "exclusive"), FLAGS)
@pytest.mark.parametrize("name", ["affine", "mat2"])
def test_matches_loop(name, reverse, exclusive, traced_only):  # type: ignore[no-untyped-def]
    _check(name, (3, 11), reverse, exclusive)


@pytest.mark.parametrize("name", ["cmul", "velocity", "shifted", "scaled1", "scaled3"])
def test_other_combines(name, traced_only):  # type: ignore[no-untyped-def]
    # a full Jacobian, a division, constants; a captured constant keys its own kernel
    _check(name, (2, 9), reverse=name == "cmul", exclusive=name == "shifted")


@pytest.mark.parametrize(("name", "live"), [("affine", [1]), ("affine", [0]), ("mat2", [1]),
                                            ("mat2", [2, 3])])  # fmt: skip
def test_loss_on_some_outputs(name, live, traced_only):  # type: ignore[no-untyped-def]
    # only the components the loss reaches are walked; the others have no gradient
    _check(name, (13,), False, False, live=live)


@pytest.mark.parametrize("chunks", [2, 3])
@pytest.mark.parametrize(("reverse", "exclusive"), [(False, False), (True, True)])
def test_chunks_match_one_walk(chunks, reverse, exclusive, traced_only, monkeypatch):  # type: ignore[no-untyped-def]
    # rows above SERIAL_UP_TO are cut into chunks, one per thread granted (at most n // 64)
    from propopt import threads

    @contextlib.contextmanager
    def granted():  # type: ignore[no-untyped-def]
        yield chunks

    monkeypatch.setattr(threads, "sized", granted)
    monkeypatch.setattr(_grad_traced, "SERIAL_UP_TO", 0)
    made = []
    module = _grad_traced._module

    class Spy:
        def __init__(self, mod):  # type: ignore[no-untyped-def]
            self.mod = mod

        def chunked(self, *args):  # type: ignore[no-untyped-def]
            made.append(args[6])
            return self.mod.chunked(*args)

    monkeypatch.setattr(_grad_traced, "_module", lambda *a: Spy(module(*a)))
    for n in (203, 2):  # chunks of uneven lanes; a chunk shorter than the lanes
        _check("mat2", (n,), reverse, exclusive, seed=4)
    assert made == [chunks, 1]  # n // 64 chunks at most


def test_affine_matches_builtin_float32(traced_only):  # type: ignore[no-untyped-def]
    # float32, threaded length: a user's affine Monoid against the built-in
    g = torch.Generator().manual_seed(5)
    n = (1 << 17) + 3
    a = 0.5 + 0.5 * torch.rand(n, generator=g)
    b = torch.randn(n, generator=g)
    grads = []
    for m in (linear_recurrence, CASES["affine"][0]):
        x = [a.clone().requires_grad_(), b.clone().requires_grad_()]
        A, h = associative_scan(m, tuple(x))
        grads.append(torch.autograd.grad(h.sum() + A.sum(), x))
    for got, exp in zip(*grads):
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5 * float(exp.abs().max()))


def _abs_product(a, b):  # type: ignore[no-untyped-def]
    return abs(a) * abs(b)


def _logaddexp(a, b):  # type: ignore[no-untyped-def]
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


@pytest.mark.parametrize("which", ["abs", "branch"])
def test_untraceable_combine_keeps_torch_route(which):  # type: ignore[no-untyped-def]
    if which == "abs":  # sympy gives Abs, which the generated source does not take
        m = Monoid(_abs_product, identity=1.0, name="absprod", kinds="f")
        comb = lambda a, b: [a[0].abs() * b[0].abs()]  # noqa: E731
    else:  # a branch on a value (max): the array_combine is torch's
        m = Monoid(_logaddexp, identity=-math.inf, name="lae", kinds="f",
                   array_combine=lambda a, b: [torch.logaddexp(a[0], b[0])])  # fmt: skip
        comb = lambda a, b: [torch.logaddexp(a[0], b[0])]  # noqa: E731
    assert _grad_traced.derive(m) is None
    x = (torch.rand(40, dtype=torch.float64) - 0.5).requires_grad_()
    y = associative_scan(m, x, reverse=True)
    (want_y,) = loop(comb, [x], reverse=True)
    torch.testing.assert_close(y, want_y)
    w = torch.randn(40, dtype=torch.float64)
    (got,) = torch.autograd.grad((y * w).sum(), [x])
    (want,) = torch.autograd.grad((want_y * w).sum(), [x])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_traced_route_is_taken(monkeypatch):  # type: ignore[no-untyped-def]
    # the generated kernel runs: its module is made for the derived combine
    made = []
    module = _grad_traced._module
    monkeypatch.setattr(_grad_traced, "_module", lambda *a: made.append(a[1:]) or module(*a))
    x = _inputs(2, (9,), 0)
    _, h = associative_scan(CASES["affine"][0], tuple(x))
    torch.autograd.grad(h.sum(), x)
    assert made == [((1,), (True, True), (False, True), np.dtype(np.float64))]


_CHILD = """
import json, sys
import torch
import propopt as pp

def affine(a1, b1, a2, b2):
    return a1 * a2, a2 * b1 + b2

def absprod(x, y):
    return abs(x) * abs(y)

a = torch.tensor([0.5, 0.25, 2.0, 0.75], dtype=torch.float64, requires_grad=True)
b = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64, requires_grad=True)
_, h = pp.associative_scan(pp.Monoid(affine, identity=(1.0, 0.0)), (a, b))
ga, gb = torch.autograd.grad(h.sum(), (a, b))
traced_imports_sympy = "sympy" in sys.modules  # (the torch route of |x| |y| may import it)
x = torch.tensor([2.0, -3.0, 0.5], dtype=torch.float64, requires_grad=True)
(gx,) = torch.autograd.grad(pp.associative_scan(pp.Monoid(absprod, 1.0), x).sum(), (x,))
print(json.dumps({"ga": ga.tolist(), "gb": gb.tolist(), "gx": gx.tolist(),
                  "sympy": traced_imports_sympy}))
"""


def _child(cache):  # type: ignore[no-untyped-def]
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, PROPOPT_CACHE_DIR=str(cache), PROPOPT_COMPILE_NOTICE="0")
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _loop_grads():  # type: ignore[no-untyped-def]
    # h_t = a_t h_{t-1} + b_t, h_0 = b_0; loss = sum_t h_t, by float64 torch autograd of a loop
    a = torch.tensor([0.5, 0.25, 2.0, 0.75], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64, requires_grad=True)
    h, hs = b[0], [b[0]]
    for t in range(1, 4):
        h = a[t] * h + b[t]
        hs.append(h)
    return [g.tolist() for g in torch.autograd.grad(torch.stack(hs).sum(), (a, b))]


@pytest.mark.slow
def test_a_second_process_reads_the_derivation_from_the_cache(tmp_path):  # type: ignore[no-untyped-def]
    want_a, want_b = _loop_grads()
    first = _child(tmp_path)
    records = list((tmp_path / "grad_traced").glob("*.json"))
    assert len(records) == 2  # the affine combine (with its kernel's source), and |x| |y|
    second = _child(tmp_path)
    for got in (first, second):
        assert got["ga"] == pytest.approx(want_a, rel=1e-12)
        assert got["gb"] == pytest.approx(want_b, rel=1e-12)
        # y = 2, 6, 3: dL/dx_0 = (1 + 3 + 1.5) sign 2, dL/dx_1 = (2 + 1) sign(-3), dL/dx_2 = 6
        assert got["gx"] == pytest.approx([5.5, -3.0, 6.0], rel=1e-12)
    assert first["sympy"] is True
    assert second["sympy"] is False  # the second process derives nothing again
    for rec in records:  # a record that does not read as one is derived again, correctly
        rec.write_text("{not json")
    third = _child(tmp_path)
    assert third["sympy"] is True
    assert third["ga"] == pytest.approx(want_a, rel=1e-12)
