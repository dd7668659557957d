"""Complex A, B, C (S4D-Lin) in selective_scan, against a slow complex128 loop.

mamba_ssm's ``selective_scan_ref`` for complex ``A``: a per-token ``B``/``C``
is real with (real, imag) pairs on its last axis (2 L numbers), a shared one
is complex (dim, d_state); the state is complex, ``y = 2 Re(C . h)``.
"""

import numpy as np
import pytest

from propopt_case_studies.mamba import _checks, chapter_scan, selective_scan

torch = pytest.importorskip("torch")


def slow(u, delta, A, B, C, D=None, z=None, delta_bias=None, softplus=False, h0=None,
         starts=None):  # fmt: skip
    """Token by token, scalar by scalar, in Python complex numbers."""
    batch, dim, L = u.shape
    N = A.shape[1]

    def coef(M, b, d, n, t):
        if M.ndim == 2:
            return complex(M[d, n])
        if M.ndim == 3:
            return complex(M[b, n, 2 * t], M[b, n, 2 * t + 1])
        g = d // (dim // M.shape[1])
        return complex(M[b, g, n, 2 * t], M[b, g, n, 2 * t + 1])

    out = np.zeros((batch, dim, L))
    last = np.zeros((batch, dim, N), complex)
    for b in range(batch):
        for d in range(dim):
            h = [0j if h0 is None else complex(h0[b, d, n]) for n in range(N)]
            for t in range(L):
                if starts is not None and starts[b, t]:
                    h = [0j] * N
                x = float(delta[b, d, t]) + (0.0 if delta_bias is None else float(delta_bias[d]))
                dt = (x if x > 20 else float(np.log1p(np.exp(x)))) if softplus else x
                y = 0j
                for n in range(N):
                    a = complex(np.exp(dt * complex(A[d, n])))
                    h[n] = a * h[n] + dt * float(u[b, d, t]) * coef(B, b, d, n, t)
                    y += coef(C, b, d, n, t) * h[n]
                o = 2 * y.real
                if D is not None:
                    o += float(D[d]) * float(u[b, d, t])
                if z is not None:
                    zt = float(z[b, d, t])
                    o *= zt / (1 + np.exp(-zt))
                out[b, d, t] = o
            last[b, d] = h
    return out, last


def data(batch=2, dim=4, L=9, N=3, b_kind="step", c_kind="step", groups=2, seed=0):
    rng = np.random.default_rng(seed)

    def mat(kind):
        if kind == "shared":
            return rng.normal(size=(dim, N)) + 1j * rng.normal(size=(dim, N))
        if kind == "step":
            return rng.normal(size=(batch, N, 2 * L))
        return rng.normal(size=(batch, groups, N, 2 * L))

    return dict(
        u=rng.normal(size=(batch, dim, L)),
        delta=rng.uniform(0.01, 0.5, (batch, dim, L)),
        A=-np.exp(rng.normal(size=(dim, N))) + 1j * rng.normal(size=(dim, N)) * 2,
        B=mat(b_kind),
        C=mat(c_kind),
        D=rng.normal(size=dim),
        z=rng.normal(size=(batch, dim, L)),
        delta_bias=rng.normal(size=dim) * 0.3,
        initial_state=rng.normal(size=(batch, dim, N)) + 1j * rng.normal(size=(batch, dim, N)),
    )


KINDS = [("shared", "shared"), ("step", "step"), ("group", "step"), ("shared", "group"),
         ("step", "shared")]  # fmt: skip
EXTRAS = [(), ("D",), ("z", "delta_bias"), ("D", "z", "delta_bias", "initial_state")]


@pytest.mark.parametrize("method", ["fused", "parallel", "reference"])
@pytest.mark.parametrize("b_kind, c_kind", KINDS)
@pytest.mark.parametrize("extras", EXTRAS)
@pytest.mark.parametrize("softplus", [False, True])
def test_matches_slow_loop(method, b_kind, c_kind, extras, softplus):
    d = data(b_kind=b_kind, c_kind=c_kind)
    kw = {k: d[k] for k in extras}
    args = [d[k] for k in ("u", "delta", "A", "B", "C")]
    out, last = selective_scan(*args, **kw, delta_softplus=softplus, return_last_state=True,
                               method=method)  # fmt: skip
    exact, exact_last = slow(*args, D=kw.get("D"), z=kw.get("z"),
                             delta_bias=kw.get("delta_bias"), softplus=softplus,
                             h0=kw.get("initial_state"))  # fmt: skip
    assert out.dtype == np.float64 and last.dtype == np.complex128
    np.testing.assert_allclose(out, exact, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(last, exact_last, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["fused", "parallel", "reference"])
def test_torch_tensors_and_single_precision(method):
    d = data(batch=3, dim=8, L=70, N=4, b_kind="group", c_kind="step", seed=1)
    exact, exact_last = slow(d["u"], d["delta"], d["A"], d["B"], d["C"], d["D"], d["z"],
                             d["delta_bias"], True)  # fmt: skip
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
    t64 = {k: torch.from_numpy(d[k]) for k in names}
    out, last = selective_scan(**t64, delta_softplus=True, return_last_state=True, method=method)
    assert out.dtype == torch.float64 and last.dtype == torch.complex128
    np.testing.assert_allclose(out.numpy(), exact, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(last.numpy(), exact_last, rtol=1e-12, atol=1e-12)
    # float32 inputs and complex64 A: computed in float32 / complex64
    single = {k: v.astype(np.complex64 if np.iscomplexobj(v) else np.float32)
              for k, v in d.items() if k in names}  # fmt: skip
    for arrays in (single, {k: torch.from_numpy(v) for k, v in single.items()}):
        out, last = selective_scan(**arrays, delta_softplus=True, return_last_state=True,
                                   method=method)  # fmt: skip
        out, last = np.asarray(out), np.asarray(last)
        assert out.dtype == np.float32 and last.dtype == np.complex64
        assert np.abs(out - exact).max() <= 2e-5 * np.abs(exact).max()
        assert np.abs(last - exact_last).max() <= 2e-5 * np.abs(exact_last).max()


def test_real_shared_b_and_c_are_complex_with_zero_imaginary_part():
    d = data(b_kind="shared", c_kind="shared", seed=2)
    real_B, real_C = d["B"].real.copy(), d["C"].real.copy()
    got = selective_scan(d["u"], d["delta"], d["A"], real_B, real_C)
    want = selective_scan(d["u"], d["delta"], d["A"], real_B + 0j, real_C + 0j)
    np.testing.assert_array_equal(got, want)
    exact, _ = slow(d["u"], d["delta"], d["A"], real_B + 0j, real_C + 0j)
    np.testing.assert_allclose(got, exact, rtol=1e-12, atol=1e-12)


def test_chunks_carry_the_complex_state():
    # two chunks with the first one's last state as the second's initial state
    d = data(batch=2, dim=4, L=20, N=3, seed=3)
    args = {k: d[k] for k in ("u", "delta", "A", "B", "C", "D")}
    whole, whole_last = selective_scan(**args, return_last_state=True)
    h, outs = None, []
    for t0 in (0, 8):
        t1 = 8 if t0 == 0 else 20
        part = dict(args, u=d["u"][..., t0:t1], delta=d["delta"][..., t0:t1],
                    B=d["B"][..., 2 * t0:2 * t1], C=d["C"][..., 2 * t0:2 * t1])  # fmt: skip
        y, h = selective_scan(**part, initial_state=h, return_last_state=True)
        outs.append(y)
    np.testing.assert_allclose(np.concatenate(outs, -1), whole, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h, whole_last, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["fused", "parallel", "reference"])
def test_packed_sequences(method):
    d = data(batch=1, dim=4, L=12, N=3, seed=4)
    seq_idx = np.array([[0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2]])
    starts = np.zeros((1, 12), bool)
    starts[0, [5, 7]] = True
    args = [d[k] for k in ("u", "delta", "A", "B", "C", "D", "z")]
    out, last = selective_scan(*args, initial_state=d["initial_state"], seq_idx=seq_idx,
                               return_last_state=True, method=method)  # fmt: skip
    exact, exact_last = slow(*args, h0=d["initial_state"], starts=starts)
    np.testing.assert_allclose(out, exact, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(last, exact_last, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("b_kind, c_kind", [("shared", "step"), ("group", "shared"),
                                            ("step", "group")])  # fmt: skip
@pytest.mark.parametrize("packed", [False, True])
def test_gradcheck(b_kind, c_kind, packed):
    d = data(batch=2, dim=4, L=5, N=2, b_kind=b_kind, c_kind=c_kind, seed=5)
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
    leaves = [torch.from_numpy(d[k]).requires_grad_() for k in names]
    seq_idx = np.array([[0, 0, 1, 1, 1], [0, 0, 0, 0, 0]]) if packed else None

    def f(*xs):
        return selective_scan(*xs[:8], True, True, xs[8], seq_idx=seq_idx, method="fused")

    assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_cpu_gradients_match_autograd_through_the_loop():
    # the numba backward against torch autograd of the parallel path, at 150 tokens
    # (three checkpoint chunks) and softplus above its threshold for some tokens
    d = data(batch=2, dim=6, L=150, N=4, b_kind="group", c_kind="step", groups=3, seed=6)
    d["delta"][0, 0, :10] = 25.0
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
    grads = {}
    for method in ("fused", "parallel"):
        leaves = [torch.from_numpy(d[k]).requires_grad_() for k in names]
        out, last = selective_scan(*leaves[:8], True, True, leaves[8], method=method)
        loss = (out * torch.linspace(-1, 1, 150, dtype=torch.float64)).sum()
        loss = loss + (last * (1 + 2j)).real.sum()
        loss.backward()
        grads[method] = [x.grad for x in leaves]
    for name, g, ref in zip(names, grads["fused"], grads["parallel"]):
        assert g.dtype == ref.dtype, name
        scale = ref.abs().max().item()
        assert (g - ref).abs().max().item() <= 1e-11 * scale, name


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_errors():
    d = data()
    base = {k: d[k] for k in ("u", "delta", "A", "B", "C")}
    with pytest.raises(TypeError, match=r"^u has dtype complex128; expected one of float16, "
                                        r"bfloat16, float32, float64: only A, B, C, "
                                        r"initial_state may be complex"):  # fmt: skip
        selective_scan(**dict(base, u=d["u"] + 0j))
    with pytest.raises(TypeError, match=r"^D has dtype complex128; expected one of"):
        selective_scan(**base, D=d["D"] + 0j)
    real_A = dict(base, A=d["A"].real.copy(), B=d["B"][..., :9], C=d["C"][..., :9])
    with pytest.raises(TypeError, match=r"^initial_state has dtype complex128 but A is real "
                                        r"\(float64\): complex B, C and initial_state need "
                                        "a complex A"):  # fmt: skip
        selective_scan(**real_A, initial_state=d["initial_state"])
    with pytest.raises(TypeError, match=r"^B has dtype complex128 but A is real"):
        selective_scan(**dict(real_A, B=d["A"]))
    pairs = d["B"][..., 0::2] + 1j * d["B"][..., 1::2]  # (batch, N, L) complex
    with pytest.raises(TypeError, match=r"^B has dtype complex128 and shape \(2, 3, 9\): "
                                        r"with complex A a per-token B is real"):  # fmt: skip
        selective_scan(**dict(base, B=pairs))
    # the fix the message names gives the same scan
    np.testing.assert_array_equal(selective_scan(**dict(base, B=pairs.view(np.float64))),
                                  selective_scan(**base))  # fmt: skip
    with pytest.raises(ValueError, match=r"^C has shape \(2, 3, 9\); expected \(batch, "
                                         r"d_state, 2 L\) of \(real, imag\) pairs"):  # fmt: skip
        selective_scan(**dict(base, C=d["C"][..., :9]))
    with pytest.raises(ValueError, match=r"^B has shape \(2, 2, 3, 17\); expected \(batch, "
                                         r"groups, d_state, 2 L\)"):  # fmt: skip
        selective_scan(**dict(base, B=data(b_kind="group")["B"][..., :17]))
    with pytest.raises(TypeError, match=r"^A has dtype complex32; expected one of complex64, "
                                        "complex128"):  # fmt: skip
        selective_scan(**{k: torch.from_numpy(v) for k, v in base.items()} |
                       {"A": torch.from_numpy(d["A"]).to(torch.complex32)})  # fmt: skip
    # the other verbs stay real
    with pytest.raises(TypeError, match="complex A, B, C"):
        chapter_scan(np.ones((1, 3, 2)), d["A"][:2], np.ones((1, 3, 3)), np.ones((1, 3, 3)),
                     np.ones((1, 3, 2)))  # fmt: skip


def test_cuda_refuses_complex_with_the_fix():
    named = {"u": np.ones((1, 1, 1)), "A": np.ones((1, 1), np.complex64), "B": None}
    with pytest.raises(TypeError, match=r"^A has dtype complex64: method='fused' on CUDA takes "
                                        r"real A, B, C only; for complex A \(S4D-Lin\) on CUDA "
                                        r"tensors use method='parallel' \(or 'auto'\), or "
                                        "run on CPU$"):  # fmt: skip
        raise _checks.complex_cuda_error(named)
    assert _checks.complex_cuda_error({"u": np.ones((1, 1, 1)), "A": np.ones((1, 1))}) is None
