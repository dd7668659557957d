"""ssd_scan (Mamba-2) against an independent float64 recurrence, over methods and packings."""

import itertools

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from propopt_case_studies.mamba import ssd_scan
from propopt_case_studies.mamba.ssd import _cpu as _ssd_cpu, _host as _ssd_host

torch = pytest.importorskip("torch")

# float64: the chunked scan regroups the recurrence's sums (GEMMs, a carry
# scan); differences are a few ulp of max |y|.  float32: inputs are rounded
# once and the GEMMs accumulate in float32 (K <= chunk + dstate terms);
# measured ~1e-7 of max |y|; 1e-5 is the required bound.
TOL = {np.float64: 1e-10, np.float32: 1e-5}


def oracle(x, dt, A, B, C, D=None, z=None, dt_bias=None, softplus=False,
           dt_limit=(0.0, np.inf), initial_states=None, seq_idx=None):  # fmt: skip
    """The Mamba-2 recurrence, one token and one head at a time, in float64."""
    x, dt, A, B, C = (np.asarray(v, np.float64) for v in (x, dt, A, B, C))
    nb, L, H, P = x.shape
    G, N = B.shape[2:]
    y = np.zeros((nb, L, H, P))
    final = np.zeros((nb, H, P, N))
    for b in range(nb):
        for h in range(H):
            g = h // (H // G)
            s = np.zeros((P, N)) if initial_states is None else initial_states[b, h].copy()
            prev = 0
            for t in range(L):
                if seq_idx is not None:
                    if seq_idx[b, t] != prev:
                        s = np.zeros((P, N))
                    prev = seq_idx[b, t]
                d = dt[b, t, h] + (0.0 if dt_bias is None else dt_bias[h])
                if softplus and d <= 20:
                    d = np.log1p(np.exp(d))
                d = min(max(d, dt_limit[0]), dt_limit[1])
                s = np.exp(d * A[h]) * s + d * np.outer(x[b, t, h], B[b, t, g])
                out = s @ C[b, t, g]
                if D is not None:
                    out = out + D[h] * x[b, t, h]
                if z is not None:
                    zz = z[b, t, h]
                    out = out * zz / (1 + np.exp(-zz))
                y[b, t, h] = out
            final[b, h] = s
    return y, final


def make(nb=2, L=70, H=4, P=3, G=2, N=5, seed=0, dtype=np.float64, extras=True):
    rng = np.random.default_rng(seed)
    d = dict(
        x=rng.normal(size=(nb, L, H, P)),
        dt=rng.normal(size=(nb, L, H)) - 1.0,  # softplus -> 0.05 .. 1.5
        A=-np.exp(rng.normal(size=H)),  # Mamba-2: A = -exp(A_log) < 0
        B=rng.normal(size=(nb, L, G, N)),
        C=rng.normal(size=(nb, L, G, N)),
    )
    if extras:
        d.update(D=rng.normal(size=(H, P)), z=rng.normal(size=(nb, L, H, P)),
                 dt_bias=rng.normal(size=H) * 0.3)  # fmt: skip
    return {k: v.astype(dtype) for k, v in d.items()}


def rel_err(got, exact):
    got = np.asarray(got, dtype=np.float64)
    return float(np.max(np.abs(got - exact))) / max(float(np.max(np.abs(exact))), 1e-300)


def as_torch(d):
    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in d.items()}


def packed_seq_idx(nb, L, cuts):
    si = np.zeros((nb, L), np.int32)
    for c in cuts:
        si[:, c:] += 1
    return si


@pytest.mark.parametrize("method", ["fused", "ops", "reference"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("L, chunk", [(70, 16), (33, 32), (5, 16), (64, 16)])
@pytest.mark.parametrize("with_init, with_seq", [(False, False), (True, False), (True, True)])
def test_matches_recurrence(method, dtype, L, chunk, with_init, with_seq):
    d = make(L=L, dtype=dtype)
    rng = np.random.default_rng(1)
    init = rng.normal(size=(2, 4, 3, 5)).astype(dtype) if with_init else None
    si = packed_seq_idx(2, L, [c for c in (1, 3, 17, 18, 40) if c < L]) if with_seq else None
    if with_seq:
        si[1] += 1  # row 1 starts at seq_idx 1: its initial state is dropped
    kw = dict(dt_softplus=True, initial_states=init, seq_idx=si, return_final_states=True)
    args = d if method == "fused" else as_torch(d)
    if method != "fused":
        kw["initial_states"] = None if init is None else torch.from_numpy(init)
    y, final = ssd_scan(**args, chunk_size=chunk, method=method, **kw)
    ref_y, ref_final = oracle(**d, softplus=True, initial_states=init, seq_idx=si)
    y, final = np.asarray(y), np.asarray(final)
    assert y.dtype == dtype and y.shape == ref_y.shape
    assert rel_err(y, ref_y) <= TOL[dtype]
    assert rel_err(final, ref_final) <= TOL[dtype]


@pytest.mark.parametrize(
    "G, D_per_head, extras", [(1, True, True), (4, False, True), (2, False, False)]
)
def test_groups_d_and_gate(G, D_per_head, extras):
    d = make(L=40, G=G, extras=extras)
    if extras and D_per_head:
        d["D"] = d["D"][:, 0].copy()
    y = ssd_scan(**d, chunk_size=8, dt_softplus=True)
    assert rel_err(y, oracle(**d, softplus=True)[0]) <= 1e-10


def test_dt_limit_and_no_softplus():
    # Without softplus, negative dt are clamped to dt_limit[0] = 0 (mamba_ssm's kernel).
    d = make(L=37, extras=False)
    for lim in ((0.0, np.inf), (0.1, 0.4)):
        y = ssd_scan(**d, chunk_size=8, dt_limit=lim)
        assert rel_err(y, oracle(**d, dt_limit=lim)[0]) <= 1e-10


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_explicit_mask_path(dtype, monkeypatch):
    # Every (chunk, head) with one exp per mask entry (the path of growing
    # decays), then the factored decays on a head whose decay spans far
    # beyond float range within a chunk, then a growing head (A > 0).
    d = make(L=50, dtype=dtype)
    si = packed_seq_idx(2, 50, [7, 30])
    exact = oracle(**d, softplus=True, seq_idx=si)[0]
    monkeypatch.setattr(_ssd_cpu, "FACTORED", False)
    assert rel_err(ssd_scan(**d, chunk_size=16, dt_softplus=True, seq_idx=si), exact) <= TOL[dtype]
    monkeypatch.undo()
    d["A"][1] = -300.0  # exp(dt A) ~ 1e-10 per token on head 1
    exact = oracle(**d, softplus=True)[0]
    assert rel_err(ssd_scan(**d, chunk_size=16, dt_softplus=True), exact) <= TOL[dtype]
    d["A"][2] = 0.05  # the state grows on head 2: still finite over 50 tokens
    y, fin = ssd_scan(**d, chunk_size=16, dt_softplus=True, seq_idx=si, return_final_states=True)
    ey, ef = oracle(**d, softplus=True, seq_idx=si)
    assert rel_err(y, ey) <= TOL[dtype] and rel_err(fin, ef) <= TOL[dtype]


@pytest.mark.parametrize("factored", [True, False])
@pytest.mark.parametrize("P, chunk", [(16, 16), (80, 37), (64, 64), (64, 90)])
def test_vector_tiles(P, chunk, factored, monkeypatch):
    # float32 with P a multiple of 16: the intra-chunk tiles' vector code
    # (blocks of 64 channels, then of 16), with sequence starts, a head cut
    # at every token (A = -inf), a shorter last chunk and an initial state;
    # chunks longer than method='fused' takes by default as well.
    monkeypatch.setattr(_ssd_cpu, "FACTORED", factored)
    monkeypatch.setattr(_ssd_host, "CPU_CHUNK", 256)
    d = make(nb=1, L=100, H=3, P=P, G=1, N=8, dtype=np.float32, seed=40)
    d["A"][1] = -np.inf
    si = packed_seq_idx(1, 100, [7, 30, 61])
    init = np.random.default_rng(41).normal(size=(1, 3, P, 8)).astype(np.float32)
    y, fin = ssd_scan(**d, chunk_size=chunk, dt_softplus=True, seq_idx=si, initial_states=init,
                      return_final_states=True)  # fmt: skip
    ry, rf = oracle(**d, softplus=True, seq_idx=si, initial_states=init)
    assert rel_err(y, ry) <= TOL[np.float32] and rel_err(fin, rf) <= TOL[np.float32]


def test_numpy_gemms(monkeypatch):
    d = make(L=45)
    exact = oracle(**d, softplus=True)[0]
    monkeypatch.setattr(_ssd_host, "GEMM_BACKEND", "numpy")
    assert rel_err(ssd_scan(**d, chunk_size=16, dt_softplus=True), exact) <= 1e-10


def test_cpu_chunk_cap(monkeypatch):
    # method='fused' cuts chunks to CPU_CHUNK tokens; any cut gives the same result.
    d = make(L=90)
    exact = oracle(**d, softplus=True)[0]
    for cap in (5, 64, 1000):
        monkeypatch.setattr(_ssd_host, "CPU_CHUNK", cap)
        assert rel_err(ssd_scan(**d, chunk_size=80, dt_softplus=True), exact) <= 1e-10


def test_chunk_size_and_threads_agnostic():
    d = make(L=53)
    exact = oracle(**d, softplus=True)[0]
    before = numba.get_num_threads()
    try:
        for threads in {1, before}:
            numba.set_num_threads(threads)
            for chunk in (1, 2, 7, 16, 53, 100):
                y = ssd_scan(**d, chunk_size=chunk, dt_softplus=True)
                assert rel_err(y, exact) <= 1e-10, (threads, chunk)
    finally:
        numba.set_num_threads(before)


def _lengths_to_cu(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


@pytest.mark.parametrize("method", ["fused", "ops"])
@pytest.mark.parametrize("lengths", [[5, 1, 16, 11, 16, 3], [16, 16], [1], [40, 0, 9]])
def test_packed_equals_separate(method, lengths):
    # float64: a packed row gives each sequence exactly what it gets alone,
    # up to rounding (the chunks cut the sequences at other places).
    L = sum(lengths)
    d = make(nb=1, L=L, seed=3)
    cu = _lengths_to_cu(lengths)
    rng = np.random.default_rng(4)
    init = rng.normal(size=(1, 4, 3, 5))
    args = d if method == "fused" else as_torch(d)
    i0 = init if method == "fused" else torch.from_numpy(init)
    y, fin, states = ssd_scan(**args, chunk_size=16, dt_softplus=True, cu_seqlens=cu,
                              initial_states=i0, return_final_states=True,
                              return_varlen_states=True, method=method)  # fmt: skip
    y2 = ssd_scan(**args, chunk_size=16, dt_softplus=True, initial_states=i0, method=method,
                  seq_idx=packed_seq_idx(1, L, cu[1:-1]))  # fmt: skip
    y, y2, states = np.asarray(y), np.asarray(y2), np.asarray(states)
    assert np.allclose(y, y2, rtol=0, atol=1e-12 * np.abs(y).max())
    for s, (a, b) in enumerate(itertools.pairwise(cu)):
        part = {k: (v[:, a:b] if v.ndim >= 3 and v.shape[1] == L else v) for k, v in d.items()}
        if b == a:
            assert not states[s].any()
            continue
        alone_y, alone_s = oracle(**part, softplus=True, initial_states=init if s == 0 else None)
        assert rel_err(y[:, a:b], alone_y) <= 1e-12
        assert rel_err(states[s], alone_s[0]) <= 1e-12
    assert np.allclose(np.asarray(fin)[0], states[-1] if lengths[-1] else fin[0])


@settings(max_examples=15)
@given(cuts=st.lists(st.integers(1, 39), max_size=4, unique=True), chunk=st.integers(1, 24),
       split=st.integers(0, 40))  # fmt: skip
def test_law_split_and_carry(cuts, chunk, split):
    # The property the chunked scan relies on: scanning a prefix, then the
    # rest from the prefix's final state, is scanning the whole.
    d = make(nb=1, L=40, seed=5)
    si = packed_seq_idx(1, 40, sorted(cuts))
    whole, fin = ssd_scan(**d, chunk_size=chunk, dt_softplus=True, seq_idx=si,
                          return_final_states=True)  # fmt: skip
    head = {k: (v[:, :split] if v.ndim >= 3 and v.shape[1] == 40 else v) for k, v in d.items()}
    tail = {k: (v[:, split:] if v.ndim >= 3 and v.shape[1] == 40 else v) for k, v in d.items()}
    y1, s1 = ssd_scan(**head, chunk_size=chunk, dt_softplus=True, seq_idx=si[:, :split],
                      return_final_states=True)  # fmt: skip
    # The tail carries s1 only when it continues the sequence the prefix ended in.
    tail_si = si[:, split:] - (si[0, split - 1] if split else 0)
    y2, s2 = ssd_scan(**tail, chunk_size=chunk, dt_softplus=True, seq_idx=tail_si,
                      initial_states=s1, return_final_states=True)  # fmt: skip
    scale = np.abs(whole).max()
    assert np.allclose(np.concatenate([y1, y2], 1), whole, rtol=0, atol=1e-12 * scale)
    assert np.allclose(s2, fin, rtol=0, atol=1e-12 * np.abs(fin).max())


@pytest.mark.parametrize("nb, L, H, P, G, N, chunk", [
    (1, 1, 1, 1, 1, 1, 1), (1, 2, 1, 1, 1, 1, 4), (3, 3, 2, 1, 2, 1, 2), (1, 17, 3, 2, 3, 1, 16),
    (1, 16, 2, 5, 1, 7, 16), (2, 15, 2, 2, 1, 3, 16)])  # fmt: skip
def test_edge_sizes(nb, L, H, P, G, N, chunk):
    d = make(nb=nb, L=L, H=H, P=P, G=G, N=N, seed=L)
    y, fin = ssd_scan(**d, chunk_size=chunk, dt_softplus=True, return_final_states=True)
    ry, rf = oracle(**d, softplus=True)
    assert rel_err(y, ry) <= 1e-10 and rel_err(fin, rf) <= 1e-10


@pytest.mark.parametrize("method", ["fused", "ops", "reference"])
def test_empty_sequence(method):
    d = make(nb=2, L=0)
    init = np.ones((2, 4, 3, 5))
    args, i0 = (d, init) if method == "fused" else (as_torch(d), torch.from_numpy(init))
    y, fin = ssd_scan(**args, chunk_size=8, initial_states=i0, return_final_states=True,
                      method=method)  # fmt: skip
    assert tuple(y.shape) == (2, 0, 4, 3) and np.array_equal(np.asarray(fin), init)


def test_torch_in_torch_out_and_types():
    d = make(L=20, dtype=np.float32)
    t = as_torch(d)
    y, fin = ssd_scan(**t, chunk_size=8, return_final_states=True)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and fin.dtype == torch.float32
    y64 = ssd_scan(**as_torch(make(L=20)), chunk_size=8)
    assert y64.dtype == torch.float64
    yn = ssd_scan(**d, chunk_size=8)
    assert isinstance(yn, np.ndarray) and np.allclose(yn, y.numpy(), atol=1e-6)


@pytest.mark.slow
def test_gradcheck():
    d = make(nb=1, L=7, H=2, P=1, G=1, N=2, seed=7)
    rng = np.random.default_rng(8)
    init = rng.normal(size=(1, 2, 1, 2))
    names = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")
    leaves = [torch.from_numpy(d[k]).requires_grad_() for k in names]
    h0 = torch.from_numpy(init).requires_grad_()
    si = torch.tensor([[0, 0, 0, 1, 1, 2, 2]])  # a start inside a chunk and at its edge

    def f(*vals):
        kw = dict(zip(names, vals[:-1]))
        return ssd_scan(**kw, chunk_size=3, dt_softplus=True, initial_states=vals[-1],
                        seq_idx=si, return_final_states=True)  # fmt: skip

    assert torch.autograd.gradcheck(f, (*leaves, h0))


def test_grad_flows_through_final_state_only():
    d = as_torch(make(nb=1, L=9, extras=False))
    d["x"].requires_grad_()
    _, fin = ssd_scan(**d, chunk_size=4, return_final_states=True)
    fin.sum().backward()
    assert d["x"].grad is not None and d["x"].grad.abs().sum() > 0


@pytest.mark.parametrize("kw, err, match", [
    (dict(x=np.zeros((2, 70, 4))), ValueError, "x has shape"),
    (dict(dt=np.zeros((2, 70))), ValueError, "dt has shape"),
    (dict(A=np.zeros((4, 1))), ValueError, "A has shape"),
    (dict(B=np.zeros((2, 70, 3, 5)), C=np.zeros((2, 70, 3, 5))), ValueError, "ngroups=3"),
    (dict(C=np.zeros((2, 70, 2, 4))), ValueError, "C has shape"),
    (dict(D=np.zeros(3)), ValueError, "D has shape"),
    (dict(z=np.zeros((2, 70, 4, 2))), ValueError, "z has shape"),
    (dict(dt_bias=np.zeros(5)), ValueError, "dt_bias has shape"),
    (dict(initial_states=np.zeros((2, 4, 3))), ValueError, "initial_states has shape"),
    (dict(chunk_size=0), ValueError, "chunk_size=0"),
    (dict(chunk_size=16.0), TypeError, "chunk_size must be an int"),
    (dict(chunk_size=True), TypeError, "chunk_size must be an int"),
    (dict(seq_idx=np.zeros((2, 70))), TypeError, "seq_idx has dtype"),
    (dict(seq_idx=np.zeros((2, 69), int)), ValueError, "seq_idx has shape"),
    (dict(cu_seqlens=np.array([0, 70])), ValueError, "batch=2"),
    (dict(return_varlen_states=True), ValueError, "needs cu_seqlens"),
    (dict(dt_limit=(1.0, 0.5)), ValueError, "low must be <= high"),
    (dict(dt_limit=3), ValueError, "dt_limit=3"),
    (dict(method="gpu"), ValueError, "method='gpu'"),
    (dict(x=np.zeros((2, 70, 4, 3), np.int64)), TypeError, "x has dtype int64"),
])  # fmt: skip
def test_bad_input(kw, err, match):
    d = dict(make(), chunk_size=16)
    d.update(kw)
    with pytest.raises(err, match=match):
        ssd_scan(**d)


@pytest.mark.parametrize("cu, match", [([1, 70], "must start at 0"), ([0, 69], "end at"),
                                       ([0, 40, 30, 70], "never decrease"),
                                       ([[0, 70]], "cu_seqlens has shape")])  # fmt: skip
def test_bad_cu_seqlens(cu, match):
    d = make(nb=1)
    with pytest.raises(ValueError, match=match):
        ssd_scan(**d, chunk_size=16, cu_seqlens=np.array(cu))


def test_bad_combinations():
    d = make(nb=1)
    si = packed_seq_idx(1, 70, [10])
    with pytest.raises(ValueError, match="disagree"):
        ssd_scan(**d, chunk_size=16, seq_idx=si, cu_seqlens=np.array([0, 20, 70]))
    t = as_torch(d)
    t["x"].requires_grad_()
    with pytest.raises(ValueError, match="computes no gradients"):
        ssd_scan(**t, chunk_size=16, method="fused")
    with pytest.raises(ValueError, match="needs torch tensors"):
        ssd_scan(**d, chunk_size=16, method="ops")
    with pytest.raises(TypeError, match="must all be numpy"):
        ssd_scan(**dict(d, x=torch.from_numpy(d["x"])), chunk_size=16)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_long_sequence(dtype):
    # Mamba-2's parameters: A in [-16, -1], dt in [1e-3, 1e-1]; 1000 tokens.
    rng = np.random.default_rng(9)
    nb, L, H, P, N = 1, 1000, 8, 16, 32
    d = dict(x=rng.normal(size=(nb, L, H, P)),
             dt=np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), (nb, L, H))),
             A=-np.exp(rng.uniform(0, np.log(16), H)), B=rng.normal(size=(nb, L, 1, N)),
             C=rng.normal(size=(nb, L, 1, N)))  # fmt: skip
    d = {k: v.astype(dtype) for k, v in d.items()}
    exact = oracle(**d)[0]
    for chunk in (64, 256):
        assert rel_err(ssd_scan(**d, chunk_size=chunk), exact) <= TOL[dtype]


@pytest.mark.parametrize("cap", [0, 1 << 30])
def test_workspace_reuse_is_invisible(cap, monkeypatch):
    # Scratch arrays kept between calls are fully rewritten by each call.
    monkeypatch.setattr(_ssd_host, "WORKSPACE_BYTES", cap)
    a, b = make(L=50, seed=20), make(L=50, seed=21)
    si = packed_seq_idx(2, 50, [9, 33])
    first = ssd_scan(**a, chunk_size=16, dt_softplus=True, seq_idx=si)
    ssd_scan(**b, chunk_size=16, dt_softplus=True)
    ssd_scan(**make(L=20, seed=22), chunk_size=16)
    again = ssd_scan(**a, chunk_size=16, dt_softplus=True, seq_idx=si)
    assert np.array_equal(first, again)
    assert rel_err(first, oracle(**a, softplus=True, seq_idx=si)[0]) <= 1e-10
    _ssd_host.clear_workspace()


def test_carry_pass_gradients():
    # The chunk carry on CPU: a numba pass with its adjoint written out.
    from propopt_case_studies.mamba.ssd import _carry as _ssd_carry

    rng = np.random.default_rng(30)
    a = torch.from_numpy(rng.uniform(0, 1, (1, 3, 2, 2))).requires_grad_()
    a.data[0, 1] = 0.0  # a chunk holding a sequence start passes nothing on
    S = torch.from_numpy(rng.normal(size=(1, 3, 2, 2, 2, 1))).requires_grad_()
    h0 = torch.from_numpy(rng.normal(size=(1, 2, 2, 2, 1))).requires_grad_()
    assert torch.autograd.gradcheck(_ssd_carry.CarryFn.apply, (a, S, h0))


def test_torch_carry_off_cpu_path(monkeypatch):
    # Other devices run the carry as torch operations: same values, and
    # differentiable (checked here on CPU by switching the numba pass off).
    from propopt_case_studies.mamba.ssd import _torch as _ssd_torch

    d = as_torch(make(nb=1, L=5, H=2, P=1, G=1, N=2, seed=31))
    si = torch.tensor([[0, 0, 1, 1, 1]])
    kw = dict(chunk_size=2, dt_softplus=True, return_final_states=True, seq_idx=si)
    want = ssd_scan(**d, **kw)
    monkeypatch.setattr(_ssd_torch, "NUMBA_CARRY", False)
    for v in d.values():
        v.requires_grad_()
    got = ssd_scan(**d, **kw)
    assert all(torch.allclose(g, w, rtol=1e-12, atol=1e-12) for g, w in zip(got, want))
    names = ("x", "dt", "A", "B", "C")
    assert torch.autograd.gradcheck(
        lambda *v: ssd_scan(**dict(zip(names, v)), **kw), tuple(d[k] for k in names)
    )


def test_half_precision_inputs():
    # float16 / bfloat16 are computed in float32 and returned in their dtype:
    # against the recurrence on the same (rounded) inputs, the error is the
    # output's own rounding, half an ulp: 2^-11 (float16), 2^-8 (bfloat16).
    d = make(L=30)
    h = {k: v.astype(np.float16) for k, v in d.items()}
    y = ssd_scan(**h, chunk_size=8, dt_softplus=True)
    assert y.dtype == np.float16
    assert rel_err(y, oracle(**h, softplus=True)[0]) <= 2**-11 * 1.01
    t = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in d.items()}
    yt = ssd_scan(**t, chunk_size=8, dt_softplus=True)
    assert yt.dtype == torch.bfloat16
    exact = oracle(**{k: v.double().numpy() for k, v in t.items()}, softplus=True)[0]
    assert rel_err(yt.double().numpy(), exact) <= 2**-8 * 1.01
