"""selective_scan against the float64 sequential reference, over backends and layouts."""

import numba
import numpy as np
import pytest
from hypothesis import given, strategies as st

from propopt_case_studies.mamba import chapter_scan, naive, reference, selective_scan, step

from ._data import inputs, rel_err

torch = pytest.importorskip("torch")

# float64 kernels differ from the loop only by summation order: a few ulp of
# the output scale.  float32: the exp polynomial (1.5 ulp) and float32 state
# updates give ~1e-7 relative to the largest output; 1e-5 is the bound.
TOL = {np.float64: 1e-12, np.float32: 1e-5}


def _ref(d, softplus=True):
    d64 = {k: v.astype(np.float64) for k, v in d.items()}
    return reference(**d64, delta_softplus=softplus)


@pytest.mark.parametrize("method", ["fused", "parallel"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "b_kind, c_kind, dim",
    [
        ("step", "step", 128),  # 64 channels in SIMD lanes
        ("group", "group", 32),  # 16 lanes (groups of 16 channels)
        ("shared", "step", 6),  # per-channel kernel
        ("group", "shared", 4),
    ],
)
def test_matches_reference(method, dtype, b_kind, c_kind, dim):
    d = inputs(dim=dim, b_kind=b_kind, c_kind=c_kind, dtype=dtype)
    out, last = selective_scan(**d, delta_softplus=True, return_last_state=True, method=method)
    ref_out, ref_last = _ref(d)
    assert out.dtype == dtype and out.shape == ref_out.shape
    assert rel_err(out, ref_out) <= TOL[dtype]
    assert rel_err(last, ref_last) <= TOL[dtype]


@pytest.mark.parametrize("batch, dim", [(1, 128), (3, 64), (1, 192), (2, 320)])
@pytest.mark.parametrize("token_major", [False, True])
@pytest.mark.parametrize("threads, cap", [(1, None), (2, None), (2, 1)])
@pytest.mark.parametrize("dtype, softplus", [(np.float64, True), (np.float32, True),
                                             (np.float32, False)])  # fmt: skip
def test_lane_blocks_split_over_tasks(batch, dim, token_major, threads, cap, dtype, softplus,
                                      monkeypatch):  # fmt: skip
    # The lane kernel gives each task a run of 64-channel blocks of one
    # sequence: one or several blocks per task, runs that do not divide the
    # blocks (192 = 3 blocks over 2 runs), several sequences; u, delta and z
    # also as views of (batch, L, dim) memory (the chapter's layout).  A
    # one-byte cap on a run's states gives every block its own task.  L = 150
    # is whole tiles (16 x 16 transposes and vector token updates in float32)
    # then a partial one (element by element); float32 tokens go through
    # _lanes.token_io (in place in the chapter's layout, without the softplus;
    # in mamba_ssm's layout a whole tile's softplus is taken first).
    from propopt_case_studies.mamba.scan import _host

    if cap is not None:
        monkeypatch.setattr(_host, "RUN_STATE_BYTES", cap)
    d = inputs(batch=batch, dim=dim, L=150, N=4, dtype=dtype)
    if not softplus:  # dt = delta + bias must stay >= 0, or the state overflows
        d["delta_bias"] = np.abs(d["delta_bias"])
    if token_major:
        for k in ("u", "delta", "z"):
            d[k] = np.ascontiguousarray(d[k].transpose(0, 2, 1)).transpose(0, 2, 1)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        out, last = selective_scan(**d, delta_softplus=softplus, return_last_state=True)
    finally:
        numba.set_num_threads(before)
    ref_out, ref_last = _ref(d, softplus)
    assert rel_err(out, ref_out) <= TOL[dtype]
    assert rel_err(last, ref_last) <= TOL[dtype]


def test_lane_kernels_have_their_own_names_and_cache_files():
    # The variants share a signature: were two of them in one cache index,
    # two processes compiling both at once could swap their entries.
    from propopt_case_studies.mamba.scan import _cpu

    flags = [(t, s, f) for t in (False, True) for s in (False, True) for f in (False, True)]
    kernels = [_cpu.lane_kernel(*f) for f in flags]
    names = {k.py_func.__qualname__ for k in kernels}
    assert len(names) == len(flags)
    assert _cpu.lane_kernel(True, False, True).py_func.__qualname__ == "lanes_token_major_fused"


@pytest.mark.parametrize("L", [0, 1, 2, 63, 64, 65, 130])
@pytest.mark.parametrize("dim", [1, 3, 16])
def test_edge_lengths_and_sequence_split(L, dim):
    # dim 1 and 3 have fewer channels than threads: the sequence is split.
    d = inputs(batch=1, dim=dim, L=L, N=3, dtype=np.float64)
    out, last = selective_scan(**d, return_last_state=True)
    ref_out, ref_last = reference(**d)
    assert out.shape == (1, dim, L)
    np.testing.assert_allclose(out, ref_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(last, ref_last, rtol=1e-12, atol=1e-12)
    if L == 0:
        np.testing.assert_array_equal(last, d["initial_state"])


def test_float32_long_sequence_meets_1e5():
    # The bound: float32 up to L = 4096 within 1e-5 of float64.
    for dim in (16, 2):  # lane-blocked kernel; per-channel kernel with split sequence
        d = inputs(batch=1, dim=dim, L=4096, N=16, dtype=np.float32, extras=False)
        d["delta"] = np.abs(np.random.default_rng(1).normal(size=d["delta"].shape)).astype(
            np.float32
        )
        out = selective_scan(**d)
        assert rel_err(out, reference(**{k: v.astype(np.float64) for k, v in d.items()})[0]) <= 1e-5


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_count_does_not_change_the_result(threads):
    d = inputs(batch=1, dim=2, L=300, N=4, dtype=np.float64)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        out = selective_scan(**d)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_allclose(out, reference(**d)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("tdtype", ["float16", "bfloat16", "float32"])
def test_torch_half_precision_computed_in_float32(tdtype):
    d = inputs(dim=16, L=40, dtype=np.float32)
    dt = getattr(torch, tdtype)
    t = {k: torch.from_numpy(v).to(dt) for k, v in d.items()}
    out, last = selective_scan(**t, delta_softplus=True, return_last_state=True)
    assert out.dtype == dt and last.dtype == torch.float32
    exact = _ref({k: v.to(torch.float64).numpy() for k, v in t.items()})[0]
    tol = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-5}[tdtype]  # output rounding
    assert rel_err(out.to(torch.float64).numpy(), exact) <= tol


def test_chapter_adapter_matches_the_chapter_loop():
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.normal(size=(2, 50, 32)))
    delta = torch.from_numpy(np.abs(rng.normal(size=(2, 50, 32))))
    A = -torch.exp(torch.from_numpy(rng.normal(size=(32, 4))))
    B, C = (torch.from_numpy(rng.normal(size=(2, 50, 4))) for _ in range(2))
    exact = naive(x, A, B, C, delta).numpy()
    for method in ("fused", "parallel", "reference"):
        got = chapter_scan(x, A, B, C, delta, method=method)
        assert got.shape == (2, 50, 32)
        np.testing.assert_allclose(got.numpy(), exact, rtol=1e-12, atol=1e-12)
    got32 = chapter_scan(*(v.float() for v in (x, A, B, C, delta)))
    assert rel_err(got32.numpy(), exact) <= 1e-5
    got_np = chapter_scan(*(v.numpy() for v in (x, A, B, C, delta)))
    np.testing.assert_allclose(got_np, exact, rtol=1e-12, atol=1e-12)


def test_step_by_step_equals_the_scan():
    d = inputs(batch=2, dim=8, L=12, N=3, b_kind="group", c_kind="step")
    out, last = reference(**d, delta_softplus=True)
    state = d["initial_state"].copy()
    Bt = d["B"]  # (batch, groups, N, L)
    for t in range(12):
        y = step(state, d["u"][:, :, t], d["delta"][:, :, t], d["A"], Bt[..., t],
                 d["C"][..., t], D=d["D"], z=d["z"][:, :, t], dt_bias=d["delta_bias"],
                 dt_softplus=True)  # fmt: skip
        np.testing.assert_allclose(y, out[:, :, t], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(state, last, rtol=1e-12, atol=1e-12)
    ts = torch.from_numpy(d["initial_state"].copy())
    y = step(ts, *(torch.from_numpy(v) for v in (d["u"][:, :, 0], d["delta"][:, :, 0], d["A"],
                                                   Bt[..., 0], d["C"][..., 0])))  # fmt: skip
    assert isinstance(y, torch.Tensor) and y.shape == (2, 8)


def test_initial_state_chains_chunks():
    d = inputs(batch=1, dim=16, L=100, N=4)
    full, last = selective_scan(**d, return_last_state=True)
    first = {k: (v[..., :37] if k in ("u", "delta", "z", "B", "C") else v) for k, v in d.items()}
    second = {k: (v[..., 37:] if k in ("u", "delta", "z", "B", "C") else v) for k, v in d.items()}
    o1, h1 = selective_scan(**first, return_last_state=True)
    second["initial_state"] = h1
    o2, h2 = selective_scan(**second, return_last_state=True)
    np.testing.assert_allclose(np.concatenate([o1, o2], -1), full, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h2, last, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_non_finite_inputs_propagate():
    d = inputs(batch=1, dim=16, L=20, N=4, dtype=np.float32, extras=False)
    d["u"][0, 3, 5] = np.nan
    d["delta"][0, 7, 2] = np.inf
    for method in ("fused", "parallel"):
        out = selective_scan(**d, method=method)
        assert np.isnan(out[0, 3, 5:]).all() and np.isfinite(out[0, 3, :5]).all()
        assert not np.isfinite(out[0, 7, 2])
        others = np.delete(out[0], [3, 7], axis=0)
        assert np.isfinite(others).all()


@given(
    L=st.integers(0, 80),
    dim=st.sampled_from([1, 2, 5, 16]),
    N=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_property_cpu_equals_reference(L, dim, N, seed):
    d = inputs(batch=1, dim=dim, L=L, N=N, seed=seed)
    out, last = selective_scan(**d, delta_softplus=True, return_last_state=True)
    ref_out, ref_last = reference(**d, delta_softplus=True)
    np.testing.assert_allclose(out, ref_out, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(last, ref_last, rtol=1e-11, atol=1e-11)
