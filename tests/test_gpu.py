"""Every CUDA path on a real GPU, at sizes that fill it, against the CPU paths.

Selected with ``-m gpu`` and run only where a CUDA device is present and the
simulator is off (docs/gpu.md records the runs)::

    NUMBA_ENABLE_CUDASIM=0 python -m pytest -m gpu -n 0 tests/test_gpu.py

Elsewhere they skip: the simulator runs the same kernels at tiny sizes in
the ``*cuda_sim*`` tests.  Each comparison uses the CPU path's own
tolerance, or an exact comparison where the result is exact (top-K).
"""

import os

import numpy as np
import pytest

import propopt as pp

torch = pytest.importorskip("torch")
cuda = pytest.importorskip("numba.cuda")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        os.environ.get("NUMBA_ENABLE_CUDASIM") != "0"
        or not torch.cuda.is_available()
        or not cuda.is_available(),
        reason="needs a CUDA GPU and NUMBA_ENABLE_CUDASIM=0",
    ),
]

DEV = "cuda"


def on_gpu(*arrays):
    return [torch.from_numpy(np.ascontiguousarray(a)).to(DEV) for a in arrays]


# -- scans ---------------------------------------------------------------------

MONOIDS = ["add", "linear_recurrence", "matmul2x2", "maximum", "logaddexp"]


@pytest.mark.parametrize("name", MONOIDS)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize(("shape", "axis"), [((1 << 22,), 0), ((3, 100_003, 5), 1)])
def test_scan_matches_cpu(name, reverse, exclusive, shape, axis):
    m = getattr(pp, name)
    rng = np.random.default_rng(7)
    host = [rng.uniform(0.45, 0.55, shape) for _ in range(m.arity)]
    kw = dict(axis=axis, reverse=reverse, exclusive=exclusive)
    ref = pp.associative_scan(m, host, **kw)
    out = pp.associative_scan(m, on_gpu(*host), method="tiled", **kw)
    for o, r in zip(out, ref):
        assert o.is_cuda and o.dtype == torch.float64
        o = o.cpu().numpy()
        fin = np.isfinite(r)
        assert np.array_equal(np.isfinite(o), fin)
        err = np.abs(o[fin] - r[fin]) / np.maximum(np.abs(r[fin]), 1e-250)
        assert err.max(initial=0.0) < 1e-9, (name, shape, kw)


def test_scan_float32_and_pytree():
    rng = np.random.default_rng(8)
    n = 1 << 24
    a = rng.uniform(0.9, 1.0, n).astype(np.float32)
    b = rng.normal(size=n).astype(np.float32)
    ref = pp.associative_scan(pp.linear_recurrence, (a.astype(float), b.astype(float)))[1]
    ga, gb = on_gpu(a, b)
    got = pp.associative_scan(pp.linear_recurrence, {"a": ga, "b": gb}, axis=0)
    assert set(got) == {"a", "b"} and got["b"].dtype == torch.float32
    scale = np.abs(b).max() / (1 - 0.95)  # |h| stays near max|b| / (1 - mean a)
    assert np.abs(got["b"].cpu().numpy() - ref).max() < 1e-5 * scale
    s = pp.associative_scan(pp.add, torch.from_numpy(b).to(DEV))
    ref = np.cumsum(b.astype(float))
    # the running sums reach about sqrt(n) = 4096; a blocked float32 scan errs by a
    # few ulps of them, far below one missing or doubled tile (about 64)
    assert np.abs(s.cpu().numpy() - ref).max() < 64e-5 * np.sqrt(np.abs(b).sum())


@pytest.mark.parametrize("n", [1, 31, 4095, 4096, 4097, (1 << 22) + 3, (1 << 24) + 1])
def test_one_pass_scan_is_exact_on_integers(n):
    # the look-back passes tile totals between blocks: integer sums are exact,
    # so a total read before it was written, or twice, shows as a mismatch
    rng = np.random.default_rng(n)
    host = rng.integers(-1000, 1000, n)
    want = np.cumsum(host)
    g = on_gpu(host)[0]
    for _ in range(5 if n > 1 << 20 else 2):
        got = pp.associative_scan(pp.add, g, method="tiled")
        assert np.array_equal(got.cpu().numpy(), want)
    # int32 wraps as NumPy does; int8 and complex64 take the shared-memory block scan
    h32 = rng.integers(-(2**31), 2**31 - 1, n, dtype=np.int32)
    got = pp.associative_scan(pp.add, on_gpu(h32)[0], method="tiled").cpu().numpy()
    assert np.array_equal(got, np.cumsum(h32, dtype=np.int32))
    h8 = rng.integers(-100, 100, n, dtype=np.int8)
    got = pp.associative_scan(pp.add, on_gpu(h8)[0], method="tiled").cpu().numpy()
    assert np.array_equal(got, np.cumsum(h8, dtype=np.int8))
    hc = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(np.complex64)
    got = pp.associative_scan(pp.add, on_gpu(hc)[0], method="tiled").cpu().numpy()
    want_c = np.cumsum(hc.astype(np.complex128))
    assert np.abs(got - want_c).max() <= 1e-5 * np.sqrt(n) * 8 + 1e-5


@pytest.mark.parametrize("name", ["add", "mul", "logaddexp"])
def test_torch_row_matches_torch_and_auto_takes_it_below_the_crossover(name):
    from propopt.associativity.scan import _backends

    m = getattr(pp, name)
    x = torch.rand(3, 5000, device=DEV) * 0.01 + 0.995
    op = _backends.TORCH_OPS[m.name][0]
    want = getattr(torch, op)(x, 1)
    got = pp.associative_scan(m, x, axis=1, method="native")
    assert torch.allclose(got, want, rtol=1e-6)
    ours = pp.associative_scan(m, x, axis=1, method="tiled")
    assert torch.allclose(got, ours, rtol=1e-5)
    plan = _backends.ScanPlan(m, None, [x], "torch-cuda", 1, False, False)  # type: ignore[arg-type]
    small = x.numel() < _backends.TORCH_AUTO_BELOW[op]
    assert _backends.choose("auto", "auto", plan) == (("native" if small else "tiled"), "cuda")
    plan = _backends.ScanPlan(m, None, [x], "torch-cuda", 1, True, False)  # type: ignore[arg-type]
    assert _backends.choose("auto", "auto", plan) == ("tiled", "cuda")
    xi = torch.arange(-50, 50, device=DEV, dtype=torch.int32)
    if name == "add":  # integer sums stay in their dtype, as the kernels' do
        got = pp.associative_scan(m, xi)
        assert got.dtype == torch.int32 and torch.equal(
            got.cpu(), torch.cumsum(xi.cpu(), 0, dtype=torch.int32)
        )


def test_small_grids_do_not_warn():
    import warnings

    x = torch.randn(1 << 16, device=DEV)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pp.associative_scan(pp.add, x)  # 16 tiles: carry scans of 1 block
        pp.topk(x, 10)  # one row: digit picks of 1 block
    assert not [w for w in caught if "under-utilization" in str(w.message)]


# -- top-K ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "k"), [((1 << 24,), 1000), ((64, 100_003), 50), ((7, 3000), 3000), ((1, 5), 0)]
)
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_cpu_and_torch(shape, k, largest):
    rng = np.random.default_rng(9)
    x = rng.integers(-2000, 2000, shape).astype(np.float32)  # many ties
    v, i = pp.topk(torch.from_numpy(x).to(DEV), k, largest=largest)
    cv, ci = pp.topk(x, k, largest=largest)
    assert v.is_cuda and i.dtype == torch.int64
    np.testing.assert_array_equal(v.cpu().numpy(), cv)
    np.testing.assert_array_equal(i.cpu().numpy(), ci)  # ties: the smaller index, as on CPU
    tv, _ = torch.topk(torch.from_numpy(x).to(DEV), k, largest=largest)
    np.testing.assert_array_equal(v.cpu().numpy(), tv.cpu().numpy())


def test_topk_nan_rows():
    rng = np.random.default_rng(10)
    x = rng.normal(size=(16, 50_001)).astype(np.float32)
    x[rng.random(x.shape) < 0.01] = np.nan
    g = torch.from_numpy(x).to(DEV)
    v, i = pp.topk(g, 40, nan="largest")
    tv, _ = torch.topk(g, 40)
    np.testing.assert_array_equal(v.cpu().numpy(), tv.cpu().numpy())  # NaN == NaN here
    cv, ci = pp.topk(x, 40, nan="largest")
    np.testing.assert_array_equal(i.cpu().numpy(), ci)
    v, i = pp.topk(torch.from_numpy(x).to(DEV), 40, nan="ignore")
    cv, ci = pp.topk(x, 40, nan="ignore")
    np.testing.assert_array_equal(v.cpu().numpy(), cv)
    np.testing.assert_array_equal(i.cpu().numpy(), ci)


# -- pair sums and direct gravity ----------------------------------------------


def test_pairwise_sum_matches_cpu():
    from tests.symmetry.test_pairs import SPRING, spring_2d

    rng = np.random.default_rng(11)
    X, w = rng.normal(size=(20_000, 2)), rng.uniform(0.5, 2, 20_000)
    ref = pp.pairwise_sum(spring_2d, X, w, symmetry=SPRING, args=(0.7,))
    got = pp.pairwise_sum(spring_2d, X, w, symmetry=SPRING, args=(0.7,), device="cuda")
    assert np.allclose(got, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_direct_gravity_matches_cpu(dtype):
    rng = np.random.default_rng(12)
    pos, m = rng.normal(size=(100_000, 3)).astype(dtype), rng.uniform(0.5, 2, 100_000).astype(dtype)
    tgt = rng.normal(size=(3001, 3)).astype(dtype)
    tol = 1e-10 if dtype == np.float64 else 1e-4
    for targets in (None, tgt):
        a, p = pp.direct_gravity(pos, m, eps=0.01, targets=targets, potential=True)
        ac, pc = pp.direct_gravity(pos, m, eps=0.01, targets=targets, device="cuda", potential=True)
        assert np.abs(ac - a).max() < tol * np.abs(a).max()
        assert np.abs(pc - p).max() < tol * np.abs(p).max()
    a, _ = pp.direct_gravity(pos, m, eps=0.01)
    ag, _ = pp.direct_gravity(torch.from_numpy(pos).to(DEV), torch.from_numpy(m).to(DEV), eps=0.01)
    assert np.abs(ag - a).max() < tol * np.abs(a).max()  # device="auto" follows the tensors


# -- Mamba ---------------------------------------------------------------------


@pytest.mark.parametrize("bc", ["shared", "per_token", "grouped"])
@pytest.mark.parametrize("options", [False, True])
def test_mamba_forward_matches_cpu(bc, options):
    from propopt_case_studies.mamba import selective_scan

    rng = np.random.default_rng(13)
    b, d, L, n = 2, 512, 1024, 16
    f = np.float32
    u, z = rng.normal(size=(b, d, L)).astype(f), rng.normal(size=(b, d, L)).astype(f)
    delta = rng.uniform(-3, 0.5, (b, d, L)).astype(f)
    A = -np.exp(rng.normal(size=(d, n))).astype(f)
    shape = {"shared": (d, n), "per_token": (b, n, L), "grouped": (b, 4, n, L)}[bc]
    B, C = rng.normal(size=shape).astype(f), rng.normal(size=shape).astype(f)
    kw = {}
    if options:
        kw = dict(D=rng.normal(size=d).astype(f), z=z, delta_bias=rng.normal(size=d).astype(f),
                  initial_state=rng.normal(size=(b, d, n)).astype(f))  # fmt: skip
    else:
        delta = np.abs(delta)
    ref, hr = selective_scan(u, delta, A, B, C, delta_softplus=options, return_last_state=True,
                             method="fused", **kw)  # fmt: skip
    g = {k: torch.from_numpy(v).to(DEV) for k, v in kw.items()}
    out, h = selective_scan(*on_gpu(u, delta, A, B, C), delta_softplus=options,
                            return_last_state=True, **g)  # fmt: skip
    assert out.is_cuda
    assert np.abs(out.cpu().numpy() - ref).max() < 1e-5 * np.abs(ref).max()
    assert np.abs(h.cpu().numpy() - hr).max() < 1e-5 * np.abs(hr).max()


def test_mamba_backward_matches_cpu():
    from propopt_case_studies.mamba import selective_scan

    rng = np.random.default_rng(14)
    b, d, L, n = 2, 64, 512, 16
    u, z = rng.normal(size=(b, d, L)), rng.normal(size=(b, d, L))
    delta = rng.uniform(-3, 0.5, (b, d, L))
    A = -np.exp(rng.normal(size=(d, n)))
    B, C = rng.normal(size=(b, 2, n, L)), rng.normal(size=(b, 2, n, L))
    Dv, bias, h0 = rng.normal(size=d), rng.normal(size=d), rng.normal(size=(b, d, n))
    grads = []
    for dev in ("cpu", DEV):
        t = [
            torch.tensor(x, device=dev, requires_grad=True)
            for x in (u, delta, A, B, C, Dv, z, bias, h0)
        ]
        out = selective_scan(*t[:5], D=t[5], z=t[6], delta_bias=t[7], delta_softplus=True,
                             initial_state=t[8])  # fmt: skip
        out.pow(2).sum().backward()
        grads.append([x.grad.cpu().numpy() for x in t])
    for gc, gg in zip(*grads):
        assert np.abs(gg - gc).max() < 1e-9 * np.abs(gc).max()


# -- Barnes-Hut ----------------------------------------------------------------


@pytest.mark.parametrize(("theta", "quad"), [(0.0, True), (0.7, True), (0.7, False)])
def test_barnes_hut_walk_matches_cpu(theta, quad):
    from propopt_case_studies.nbody import Octree, plummer_sphere

    n = 20_000 if theta == 0.0 else 200_000
    pos, _, m = plummer_sphere(n, seed=1)
    tree = Octree.build(pos, m, eps=1e-3)
    a, p = tree.field(theta=theta, quadrupole=quad, device="cuda", potential=True)
    # the GPU's acceptance test
    a1, p1 = tree.field(theta=theta, quadrupole=quad, group_size=1, potential=True)
    assert np.abs(a - a1).max() < 1e-9 * np.abs(a1).max()
    assert np.abs(p - p1).max() < 1e-9 * np.abs(p1).max()
