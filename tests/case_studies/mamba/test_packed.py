"""Packed variable-length batches: each packed sequence gives what it gives alone.

Mamba-1 (``selective_scan``) and Mamba-2 (``ssd_scan``) with ``seq_idx`` /
``cu_seqlens``, mamba_ssm's meaning: the state is zero before every
sequence start.  Everything is float64, forward and gradients.
"""

import itertools

import numpy as np
import pytest

from propopt_case_studies.mamba import selective_scan, ssd_scan

from ._data import inputs, rel_err

# Each sequence is computed from zero with the same operations as alone; the
# only differences are the order of a few sums (which kernel path a shape
# takes: SIMD lanes over channels or over d_state), a few ulps of float64.
EXACT = 1e-14
# Gradients of parameters shared by all tokens (A, D, delta_bias) are sums
# over every sequence: packed, one sum; alone, a sum of per-sequence sums.
SHARED = 1e-13

LENGTHS = [13, 1, 40, 16]  # 70 tokens: a length-1 sequence, and ones across CHUNK = 64


def bounds(lengths):
    cu = np.cumsum([0, *lengths])
    return list(itertools.pairwise(cu))


def seq_idx_of(lengths):
    return np.repeat(np.arange(len(lengths)), lengths)[None]


def mamba1(b_kind="step", c_kind="group", seed=0):
    d = inputs(batch=1, dim=32, L=sum(LENGTHS), N=4, b_kind=b_kind, c_kind=c_kind, seed=seed)
    return d


def piece(d, s, e, first):
    """The inputs of tokens [s, e) alone (the initial state belongs to sequence 0)."""
    out = {}
    for k, v in d.items():
        if k in ("u", "delta", "z") or (k in ("B", "C") and v.ndim >= 3):
            out[k] = v[..., s:e]
        elif k == "initial_state":
            out[k] = v if first else None
        else:
            out[k] = v
    return out


# 'parallel' on NumPy compiles the segmented scan's column kernels (5 s); its
# torch autograd path is in the default set through the gradient test
@pytest.mark.parametrize(
    "method", ["fused", pytest.param("parallel", marks=pytest.mark.slow), "reference"]
)
def test_mamba1_packed_equals_each_sequence_alone(method):
    d = mamba1()
    out, last = selective_scan(**d, delta_softplus=True, return_last_state=True,
                               seq_idx=seq_idx_of(LENGTHS), method=method)  # fmt: skip
    alone = [selective_scan(**piece(d, s, e, i == 0), delta_softplus=True, return_last_state=True,
                            method=method) for i, (s, e) in enumerate(bounds(LENGTHS))]  # fmt: skip
    exact_out = np.concatenate([a[0] for a in alone], -1)
    assert rel_err(out, exact_out) <= EXACT
    assert rel_err(last, alone[-1][1]) <= EXACT


def test_mamba1_sequence_split_carries_stop_at_starts():
    # two channels on several threads: the forward cuts the sequence into
    # segments of CHUNK multiples; starts inside a segment and on its edge
    lengths = [100, 28, 150, 22]
    d = inputs(batch=1, dim=2, L=300, N=4, b_kind="step", c_kind="step", seed=8)
    from propopt.threads import set_num_threads

    with set_num_threads(2):
        out = selective_scan(**d, seq_idx=seq_idx_of(lengths), method="fused")
        alone = [selective_scan(**piece(d, s, e, i == 0), method="fused")
                 for i, (s, e) in enumerate(bounds(lengths))]  # fmt: skip
    assert rel_err(out, np.concatenate(alone, -1)) <= EXACT


def test_mamba1_cu_seqlens_and_rows_of_their_own():
    d = inputs(batch=2, dim=16, L=30, N=3, b_kind="shared", c_kind="step", seed=1)
    seq_idx = np.array([[0] * 7 + [1] * 23, [3] * 12 + [4] * 18])  # row 1 drops its h0
    out = selective_scan(**d, seq_idx=seq_idx, method="fused")
    ref = selective_scan(**{k: v.copy() for k, v in d.items()}, seq_idx=seq_idx,
                         method="reference")  # fmt: skip
    assert rel_err(out, ref) <= EXACT
    row0 = {k: v[:1] if k in ("u", "delta", "z", "C", "initial_state") else v for k, v in d.items()}
    cu = np.array([0, 7, 30])
    np.testing.assert_array_equal(selective_scan(**row0, cu_seqlens=cu, method="fused"), out[:1])
    h0 = {k: v for k, v in d.items() if k != "initial_state"}
    alone = selective_scan(**{k: v[1:, ..., 12:] if k in ("u", "delta", "z", "C") else v
                              for k, v in h0.items()}, method="reference")  # fmt: skip
    assert rel_err(out[1:, :, 12:], alone) <= EXACT


def test_bad_packing_is_refused():
    d = inputs(batch=1, dim=4, L=6, N=2, seed=2)
    with pytest.raises(ValueError, match=r"seq_idx has shape \(1, 5\); expected \(batch, seqlen\)"):
        selective_scan(**d, seq_idx=np.zeros((1, 5), int))
    with pytest.raises(ValueError, match=r"cu_seqlens=.*must start at 0, end at seqlen=6"):
        selective_scan(**d, cu_seqlens=np.array([0, 4]))


def _grads(torch, fn, tensors, w_out, w_last):
    leaves = {k: torch.tensor(v, requires_grad=True) for k, v in tensors.items() if v is not None}
    out, last = fn(leaves)
    ((out * w_out).sum() + (last * w_last).sum()).backward()
    # (None: no path from the input to the loss, e.g. A in a length-1 sequence)
    return {k: np.zeros(v.shape) if v.grad is None else v.grad.numpy() for k, v in leaves.items()}


@pytest.mark.parametrize("method", ["fused", "parallel"])
def test_mamba1_packed_gradients_equal_each_sequence_alone(method):
    torch = pytest.importorskip("torch")
    d = mamba1(seed=3)
    rng = np.random.default_rng(4)
    w_out = torch.tensor(rng.normal(size=d["u"].shape))
    w_last = torch.tensor(rng.normal(size=d["initial_state"].shape))
    seq = torch.tensor(seq_idx_of(LENGTHS))

    def packed(t):
        return selective_scan(**t, delta_softplus=True, return_last_state=True, seq_idx=seq,
                              method=method)  # fmt: skip

    g = _grads(torch, packed, d, w_out, w_last)
    parts = []
    spans = bounds(LENGTHS)
    for i, (s, e) in enumerate(spans):
        wl = w_last if i == len(spans) - 1 else torch.zeros_like(w_last)

        def alone(t):
            return selective_scan(**t, delta_softplus=True, return_last_state=True,
                                  method=method)  # fmt: skip

        parts.append(_grads(torch, alone, piece(d, s, e, i == 0), w_out[..., s:e], wl))
    for k in ("u", "delta", "z", "B", "C"):
        assert rel_err(g[k], np.concatenate([p[k] for p in parts], -1)) <= EXACT, k
    for k in ("A", "D", "delta_bias"):
        assert rel_err(g[k], sum(p[k] for p in parts)) <= SHARED, k
    assert rel_err(g["initial_state"], parts[0]["initial_state"]) <= EXACT


def test_mamba1_cuda_kernel_resets_on_the_simulator():
    from propopt_case_studies.mamba import reference
    from propopt_case_studies.mamba.scan import _cuda, _host

    d = inputs(batch=1, dim=4, L=9, N=3, b_kind="step", c_kind="shared", seed=5)
    starts = np.zeros((1, 9), bool)
    starts[0, [0, 4, 5]] = True
    p = _host.prepare(**d, softplus=True, scale_b=True, dtype=np.dtype(np.float64),
                      starts=starts)  # fmt: skip
    out, last = np.empty(d["u"].shape), np.empty(d["initial_state"].shape)
    _cuda.launch(p.u, p.delta, p.A, p.Bg, p.Cg, p.Dv, p.z, p.bias, p.softplus, p.has_z,
                 p.scale_b, p.h0, out, last, "float64", starts=p.starts)  # fmt: skip
    ref_out, ref_last = reference(**d, delta_softplus=True, starts=starts)
    assert rel_err(out, ref_out) <= 1e-12
    assert rel_err(last, ref_last) <= 1e-12


# ------------------------------------------------------------------ Mamba-2
def mamba2(seed=0, L=70):
    rng = np.random.default_rng(seed)
    b, h, p, g, n = 1, 4, 8, 2, 16
    return dict(
        x=rng.normal(size=(b, L, h, p)),
        dt=rng.uniform(-1, 1, (b, L, h)),
        A=-np.exp(rng.normal(size=h)),
        B=rng.normal(size=(b, L, g, n)),
        C=rng.normal(size=(b, L, g, n)),
        D=rng.normal(size=h),
        z=rng.normal(size=(b, L, h, p)),
        dt_bias=rng.normal(size=h) * 0.3,
        initial_states=rng.normal(size=(b, h, p, n)),
    )


def piece2(d, s, e, first):
    out = {}
    for k, v in d.items():
        if k in ("x", "dt", "B", "C", "z"):
            out[k] = v[:, s:e]
        elif k == "initial_states":
            out[k] = v if first else None
        else:
            out[k] = v
    return out


@pytest.mark.parametrize("method", ["fused", "ops"])
def test_mamba2_packed_equals_each_sequence_alone(method):
    d = mamba2()
    kw = dict(chunk_size=16, dt_softplus=True, return_final_states=True, method=method)
    conv = (lambda v: v) if method == "fused" else pytest.importorskip("torch").tensor
    t = {k: conv(v) for k, v in d.items()}
    y, last = ssd_scan(**t, seq_idx=conv(seq_idx_of(LENGTHS)), **kw)
    alone = [ssd_scan(**{k: conv(v) for k, v in piece2(d, s, e, i == 0).items() if v is not None},
                      **kw) for i, (s, e) in enumerate(bounds(LENGTHS))]  # fmt: skip
    assert rel_err(np.asarray(y), np.concatenate([np.asarray(a[0]) for a in alone], 1)) <= EXACT
    assert rel_err(np.asarray(last), np.asarray(alone[-1][1])) <= EXACT


def test_mamba2_packed_gradients_equal_each_sequence_alone():
    torch = pytest.importorskip("torch")
    d = mamba2(seed=6)
    rng = np.random.default_rng(7)
    w_out = torch.tensor(rng.normal(size=d["x"].shape))
    w_last = torch.tensor(rng.normal(size=d["initial_states"].shape))
    kw = dict(chunk_size=16, dt_softplus=True, return_final_states=True, method="ops")
    seq = torch.tensor(seq_idx_of(LENGTHS))
    g = _grads(torch, lambda t: ssd_scan(**t, seq_idx=seq, **kw), d, w_out, w_last)
    parts = []
    spans = bounds(LENGTHS)
    for i, (s, e) in enumerate(spans):
        wl = w_last if i == len(spans) - 1 else torch.zeros_like(w_last)
        parts.append(_grads(torch, lambda t: ssd_scan(**t, **kw), piece2(d, s, e, i == 0),
                            w_out[:, s:e], wl))  # fmt: skip
    for k in ("x", "dt", "z", "B", "C"):
        assert rel_err(g[k], np.concatenate([p[k] for p in parts], 1)) <= EXACT, k
    for k in ("A", "D", "dt_bias"):
        assert rel_err(g[k], sum(p[k] for p in parts)) <= SHARED, k
    assert rel_err(g["initial_states"], parts[0]["initial_states"]) <= EXACT
