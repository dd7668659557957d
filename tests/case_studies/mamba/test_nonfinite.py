"""Infs and nans: each stays in its own packed sequence, and after its own token.

Every method against a plain float64 recurrence written out here, token by
token, whose reset at a sequence start is a selection: a non-finite value
must give exactly the recurrence's nans and infs, and every other output
its finite value.  Also decays that are exactly zero (``A = -inf``, or a
float32 ``dt A`` that overflows), which the recurrence takes as
``exp(-inf) = 0``.
"""

import numpy as np
import pytest

from propopt_case_studies.mamba import selective_scan, ssd_scan

torch = pytest.importorskip("torch")

# float64: the chunked scans regroup the recurrence's sums, a few ulp of
# max |y|.  float32: inputs and GEMM sums rounded to float32, ~1e-7
# measured (test_ssd.TOL); 1e-5 is the bound.
TOL = {np.float64: 1e-10, np.float32: 1e-5}
CU = np.array([0, 36, 48])  # two sequences; the second starts inside chunk 2 (chunk 16)


def starts_of(nb, L, cu=None, seq_idx=None):
    """(nb, L) bool: True where the state is reset (mamba_ssm's meaning of both)."""
    st = np.zeros((nb, L), bool)
    if cu is not None:
        st[0, cu[1:-1]] = True
    if seq_idx is not None:
        st[:, 0] = seq_idx[:, 0] != 0
        st[:, 1:] = seq_idx[:, 1:] != seq_idx[:, :-1]
    return st


def ssd_recurrence(x, dt, A, B, C, D=None, z=None, dt_bias=None, softplus=False,
                   dt_limit=(0.0, np.inf), h0=None, starts=None):  # fmt: skip
    """Mamba-2, one token at a time in float64; returns y and the state after every token."""
    x, dt, A, B, C = (np.asarray(v, np.float64) for v in (x, dt, A, B, C))
    nb, L, H, P = x.shape
    G, N = B.shape[2:]
    starts = np.zeros((nb, L), bool) if starts is None else starts
    y = np.zeros((nb, L, H, P))
    states = np.zeros((nb, L, H, P, N))
    with np.errstate(all="ignore"):
        for b in range(nb):
            for h in range(H):
                g = h // (H // G)
                s = np.zeros((P, N)) if h0 is None else np.array(h0[b, h], np.float64)
                for t in range(L):
                    if starts[b, t]:
                        s = np.zeros((P, N))  # selected, not multiplied by 0
                    d = dt[b, t, h] + (0.0 if dt_bias is None else dt_bias[h])
                    if softplus and d <= 20:
                        d = np.log1p(np.exp(d))
                    d = np.clip(d, *dt_limit)
                    s = np.exp(d * A[h]) * s + (d * x[b, t, h])[:, None] * B[b, t, g][None, :]
                    out = (s * C[b, t, g]).sum(-1)
                    if D is not None:
                        out = out + D[h] * x[b, t, h]
                    if z is not None:
                        out = out * (z[b, t, h] / (1 + np.exp(-z[b, t, h])))
                    y[b, t, h] = out
                    states[b, t, h] = s
    return y, states


def mamba1_recurrence(u, delta, A, B, C, D=None, z=None, h0=None, starts=None):
    """Mamba-1 (B, C per token, (batch, d_state, L)), one token at a time in float64."""
    nb, dim, L = u.shape
    starts = np.zeros((nb, L), bool) if starts is None else starts
    y = np.zeros((nb, dim, L))
    with np.errstate(all="ignore"):
        for b in range(nb):
            for d in range(dim):
                h = np.zeros(A.shape[1]) if h0 is None else h0[b, d].astype(np.float64)
                for t in range(L):
                    if starts[b, t]:
                        h = np.zeros(A.shape[1])
                    dt = delta[b, d, t]
                    h = np.exp(dt * A[d]) * h + dt * u[b, d, t] * B[b, :, t]
                    out = (h * C[b, :, t]).sum()
                    if D is not None:
                        out = out + D[d] * u[b, d, t]
                    if z is not None:
                        out = out * z[b, d, t] / (1 + np.exp(-z[b, d, t]))
                    y[b, d, t] = out
    return y


def same(got, want, tol):
    """The same infs and nans (with signs) as ``want``, and close where it is finite."""
    got = np.asarray(got, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isposinf(got), np.isposinf(want))
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    scale = max(float(np.abs(want[fin]).max(initial=0.0)), 1e-300)
    assert float(np.abs(got[fin] - want[fin]).max(initial=0.0)) <= tol * scale


def mamba2(L=48, dtype=np.float64, seed=0, nb=1):
    rng = np.random.default_rng(seed)
    H, P, G, N = 4, 3, 2, 5
    d = dict(
        x=rng.normal(size=(nb, L, H, P)),
        dt=rng.uniform(0.05, 0.5, (nb, L, H)),
        A=-np.exp(rng.normal(size=H)),
        B=rng.normal(size=(nb, L, G, N)),
        C=rng.normal(size=(nb, L, G, N)),
        D=rng.normal(size=H),
        z=rng.normal(size=(nb, L, H, P)),
        initial_states=rng.normal(size=(nb, H, P, N)),
    )
    return {k: v.astype(dtype) for k, v in d.items()}


def lib(d, method):
    """The arrays for ``method`` (torch tensors but for 'fused'), without the Nones."""
    d = {k: v for k, v in d.items() if v is not None}
    return d if method == "fused" else {k: torch.from_numpy(v) for k, v in d.items()}


def oracle2(d, cu=None, seq_idx=None):
    st = starts_of(d["x"].shape[0], d["x"].shape[1], cu, seq_idx)
    return ssd_recurrence(d["x"], d["dt"], d["A"], d["B"], d["C"], D=d["D"], z=d["z"],
                          h0=d["initial_states"], starts=st)  # fmt: skip


@pytest.mark.parametrize("method", ["fused", "ops", "reference"])
@pytest.mark.parametrize("field", ["x", "dt", "B", "C"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize("at", [10, 40])
def test_ssd_nonfinite_stays_in_its_sequence(method, field, value, at):
    # at 10: in sequence 0 (chunk 0); at 40: in sequence 1, which shares chunk 2
    # with tokens 32-35 of sequence 0
    d = mamba2()
    d[field][0, at] = value
    y, final, states = ssd_scan(**lib(d, method), chunk_size=16, cu_seqlens=CU,
                                return_final_states=True, return_varlen_states=True,
                                method=method)  # fmt: skip
    ref_y, ref_s = oracle2(d, CU)
    same(y, ref_y, TOL[np.float64])
    same(final, ref_s[:, -1], TOL[np.float64])
    same(states, ref_s[0, CU[1:] - 1], TOL[np.float64])
    # the clean sequence gives what it gives alone, and its outputs are finite
    s, e = (36, 48) if at < 36 else (0, 36)
    part = {k: v[:, s:e] if k in ("x", "dt", "B", "C", "z") else v for k, v in d.items()}
    if s:
        part["initial_states"] = None
    alone = ssd_scan(**lib(part, method), chunk_size=16, method=method)
    assert np.isfinite(np.asarray(y)[:, s:e]).all()
    same(np.asarray(y)[:, s:e], np.asarray(alone), 1e-12)


@pytest.mark.parametrize("method", ["fused", "ops", "reference"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_ssd_nonfinite_initial_state_stays_in_sequence_0(method, value):
    d = mamba2()
    d["initial_states"][0, 1, 2, 3] = value
    y = ssd_scan(**lib(d, method), chunk_size=16, cu_seqlens=CU, method=method)
    same(y, oracle2(d, CU)[0], TOL[np.float64])
    assert np.isfinite(np.asarray(y)[:, 36:]).all()


@pytest.mark.parametrize("method", ["fused", "ops", "reference"])
def test_ssd_nonfinite_in_one_row_of_a_batch(method):
    # seq_idx over two rows (row 1 drops its initial state); a nan in row 1's
    # second sequence, an inf in row 0's first
    d = mamba2(nb=2, L=40, seed=6)
    si = np.array([[0] * 20 + [1] * 20, [3] * 27 + [4] * 13])
    d["x"][1, 33, 2, 1] = np.nan
    d["B"][0, 5, 1, 0] = np.inf
    y, final = ssd_scan(**lib(d, method), chunk_size=16, seq_idx=si, return_final_states=True,
                        method=method)  # fmt: skip
    ref_y, ref_s = oracle2(d, seq_idx=si)
    same(y, ref_y, TOL[np.float64])
    same(final, ref_s[:, -1], TOL[np.float64])
    assert np.isfinite(np.asarray(y)[0, 20:]).all() and np.isfinite(np.asarray(y)[1, :33]).all()


@pytest.mark.parametrize("method", ["fused", "ops", "reference"])
@pytest.mark.parametrize("field", ["x", "B", "dt"])
def test_ssd_nonfinite_reaches_no_earlier_token(method, field):
    # One sequence: tokens 32-39 share chunk 2 with the nan at token 40.
    d = mamba2()
    d[field][0, 40] = np.nan
    y = np.asarray(ssd_scan(**lib(d, method), chunk_size=16, method=method))
    ref = oracle2(d)[0]
    assert np.isfinite(y[:, :40]).all() and np.isnan(y[:, 40:]).any()
    same(y, ref, TOL[np.float64])


@pytest.mark.parametrize("field", ["x", "dt", "B", "C"])
def test_ssd_packed_gradients_stay_in_their_sequence(field):
    # method='ops' (autograd): a nan in sequence 1 leaves the gradients of a
    # loss on sequence 0 exactly those of sequence 0 alone (finite)
    d = mamba2(seed=1)
    d[field][0, 40] = np.nan
    w = np.random.default_rng(2).normal(size=(1, 36, 4, 3))
    names = ("x", "dt", "B", "C", "z", "initial_states")

    def grads(part, cu):
        t = {k: torch.tensor(v, requires_grad=k in names) for k, v in part.items()}
        y = ssd_scan(**t, chunk_size=16, cu_seqlens=cu, method="ops")
        (y[:, :36] * torch.from_numpy(w)).sum().backward()
        return {k: t[k].grad.numpy() for k in names}

    packed = grads(d, CU)
    alone = grads({k: v[:, :36] if k in names[:5] else v for k, v in d.items()}, None)
    for k in names[:5]:
        assert np.isfinite(packed[k][:, :36]).all(), k
        same(packed[k][:, :36], alone[k], 1e-12)
    same(packed["initial_states"], alone["initial_states"], 1e-12)


@pytest.mark.parametrize("method", ["fused", "ops", "reference"])
@pytest.mark.parametrize("cu", [None, CU])
def test_ssd_infinite_decay_is_zero(method, cu):
    # A = -inf: exp(dt A) = 0 at every token of head 0 (dt > 0), so its state
    # is only the token's own input; cs - cs would be -inf - -inf = nan
    d = mamba2()
    d["A"][0] = -np.inf
    y, final = ssd_scan(**lib(d, method), chunk_size=16, cu_seqlens=cu,
                        return_final_states=True, method=method)  # fmt: skip
    ref_y, ref_s = oracle2(d, cu)
    assert np.isfinite(np.asarray(y)).all()
    same(y, ref_y, TOL[np.float64])
    same(final, ref_s[:, -1], TOL[np.float64])


@pytest.mark.parametrize("method", ["fused", "ops", "reference"])
def test_ssd_decay_that_overflows_float32_is_zero(method):
    # float32 A = -1e38 and dt in [2, 5]: dt A overflows float32 to -inf (a
    # decay of exactly 0); method='ops' is what autograd runs by default
    d = mamba2(dtype=np.float32, seed=3)
    d["A"][1] = np.float32(-1e38)
    d["dt"][:] = np.random.default_rng(4).uniform(2, 5, d["dt"].shape).astype(np.float32)
    t = lib(d, method)
    if method != "fused":
        t["x"].requires_grad_()
    y = ssd_scan(**t, chunk_size=16, cu_seqlens=CU, method=method)
    got = y.detach().numpy() if method != "fused" else y
    assert np.isfinite(got).all()
    same(got, oracle2(d, CU)[0], TOL[np.float32])
    if method != "fused":
        y.sum().backward()
        assert torch.isfinite(t["x"].grad).all()


@pytest.mark.parametrize("method", ["fused", "ops", "reference"])
def test_ssd_packed_strong_decay_float32(method):
    # A sequence decays by ~30 e-folds a token, then another starts in the
    # same chunk: the explicit mask's exp(cs_i - cs_j) across the start is
    # +inf in float32 and must be selected away, not multiplied by 0
    d = mamba2(L=32, dtype=np.float32, seed=5)
    d["A"][:2] = (-30.0, -60.0)
    d["dt"][:] = np.float32(0.75)
    cu = np.array([0, 12, 32])
    y = ssd_scan(**lib(d, method), chunk_size=32, cu_seqlens=cu, method=method)
    assert np.isfinite(np.asarray(y)).all()
    same(y, oracle2(d, cu)[0], TOL[np.float32])


# ------------------------------------------------------------------ Mamba-1
def mamba1(seed=0):
    rng = np.random.default_rng(seed)
    dim, L, N = 4, 48, 3
    return dict(u=rng.normal(size=(1, dim, L)), delta=rng.uniform(0.05, 0.5, (1, dim, L)),
                A=-np.exp(rng.normal(size=(dim, N))), B=rng.normal(size=(1, N, L)),
                C=rng.normal(size=(1, N, L)), D=rng.normal(size=dim),
                z=rng.normal(size=(1, dim, L)),
                initial_state=rng.normal(size=(1, dim, N)))  # fmt: skip


@pytest.mark.parametrize("method", ["fused", "parallel", "reference"])
@pytest.mark.parametrize("field, at", [("u", 10), ("delta", 10), ("B", 10),
                                       ("initial_state", None)])  # fmt: skip
def test_selective_scan_nonfinite_stays_in_its_sequence(method, field, at):
    d = mamba1()
    if at is None:
        d[field][0, 1, 2] = np.nan
    else:
        d[field][..., at] = np.nan
    y = selective_scan(**d, cu_seqlens=CU, method=method)
    ref = mamba1_recurrence(d["u"], d["delta"], d["A"], d["B"], d["C"], D=d["D"], z=d["z"],
                            h0=d["initial_state"], starts=starts_of(1, 48, CU))  # fmt: skip
    assert np.isfinite(y[..., 36:]).all()
    same(y, ref, TOL[np.float64])


@pytest.mark.parametrize("method", ["fused", "parallel", "reference"])
@pytest.mark.parametrize("at", [10, 40])
def test_selective_scan_packed_gradients_stay_in_their_sequence(method, at):
    # a nan in one sequence's delta: the gradients of a loss on the other
    # sequence are those of that sequence alone (finite)
    d = mamba1(seed=1)
    d["delta"][..., at] = np.nan
    s, e = (36, 48) if at < 36 else (0, 36)
    w = np.random.default_rng(2).normal(size=(1, 4, e - s))
    per_token = ("u", "delta", "B", "C", "z")

    def grads(part, cu, span):
        t = {k: torch.tensor(v, requires_grad=True) for k, v in part.items() if v is not None}
        y = selective_scan(**t, cu_seqlens=cu, method=method)
        (y[..., span] * torch.from_numpy(w)).sum().backward()
        return {k: t[k].grad.numpy() for k in t}

    packed = grads(d, CU, slice(s, e))
    part = {k: v[..., s:e] if k in per_token else v for k, v in d.items()}
    if s:
        part["initial_state"] = None
    alone = grads(part, None, slice(None))
    for k in per_token:
        assert np.isfinite(packed[k][..., s:e]).all(), k
        same(packed[k][..., s:e], alone[k], 1e-12)
    if not s:
        same(packed["initial_state"], alone["initial_state"], 1e-12)
