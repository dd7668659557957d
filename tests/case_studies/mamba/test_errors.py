"""Bad input: messages name the argument and the expected shape."""

import re

import numpy as np
import pytest

from propopt_case_studies.mamba import chapter_scan, exps_only, reference, selective_scan, step

from ._data import inputs


def _d(**kw):
    d = inputs(batch=2, dim=4, L=5, N=3, extras=True)
    d.update(kw)
    return d


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("delta", np.ones((2, 4, 6)), r"delta has shape \(2, 4, 6\); expected \(batch, dim, L\)"),
        ("A", np.ones((5, 3)), r"A has shape \(5, 3\); expected \(dim, d_state\) = \(4, 3\)"),
        ("B", np.ones((2, 3, 4)), r"B has shape \(2, 3, 4\); expected \(batch, d_state, L\)"),
        ("C", np.ones((2, 3, 3, 5)), r"C has shape .*groups=3 must divide dim=4"),
        ("C", np.ones(3), r"C has shape \(3,\); expected \(dim, d_state\)"),
        ("D", np.ones(5), r"D has shape \(5,\); expected \(dim,\) = \(4,\)"),
        ("z", np.ones((2, 4, 4)), r"z has shape \(2, 4, 4\); expected"),
        ("delta_bias", np.ones((4, 1)), r"delta_bias has shape \(4, 1\)"),
        ("initial_state", np.ones((2, 4, 2)), r"initial_state has shape \(2, 4, 2\); expected"),
        ("u", np.ones((4, 5)), r"u has shape \(4, 5\); expected \(batch, dim, L\)"),
    ],
)
def test_shape_errors_name_the_argument(name, value, match):
    with pytest.raises(ValueError, match=match):
        selective_scan(**_d(**{name: value}))


def test_type_and_option_errors():
    d = _d()
    with pytest.raises(ValueError, match=r"method='gpu' is not one of 'auto', 'fused', 'parallel'"):
        selective_scan(**d, method="gpu")
    with pytest.raises(TypeError, match="only A, B, C, initial_state may be complex"):
        selective_scan(**_d(u=d["u"].astype(np.complex64)))
    with pytest.raises(TypeError, match="int64; expected one of"):
        selective_scan(**_d(u=np.ones((2, 4, 5), np.int64)))
    with pytest.raises(TypeError, match="D: expected a numpy array or a torch tensor, got list"):
        selective_scan(**_d(D=[1.0, 2.0, 3.0, 4.0]))
    with pytest.raises(ValueError, match=r"device=.cuda., but the data \(u, delta, ...\) is on"):
        selective_scan(**d, device="cuda")
    with pytest.warns(DeprecationWarning, match="pass method='fused', device='cpu'"):
        np.testing.assert_array_equal(selective_scan(**d, method="cpu"), selective_scan(**d))


def test_mixed_libraries_rejected():
    torch = pytest.importorskip("torch")
    d = _d()
    d["u"] = torch.from_numpy(d["u"])
    with pytest.raises(
        TypeError, match="must all be numpy, all torch CPU or all torch CUDA; got u: torch"
    ):
        selective_scan(**d)


def test_step_and_chapter_errors():
    state = np.zeros((2, 4, 3))
    with pytest.raises(ValueError, match=r"dt has shape \(2, 5\); expected \(batch, dim\)"):
        step(state, np.ones((2, 4)), np.ones((2, 5)), np.ones((4, 3)), np.ones((2, 3)),
             np.ones((2, 3)))  # fmt: skip
    with pytest.raises(ValueError, match=r"B has shape \(2, 3, 3\); expected \(batch, d_state\)"):
        step(state, np.ones((2, 4)), np.ones((2, 4)), np.ones((4, 3)), np.ones((2, 3, 3)),
             np.ones((2, 3)))  # fmt: skip
    with pytest.raises(ValueError, match=r"x has shape \(2, 4\); expected 3 dimensions"):
        chapter_scan(np.ones((2, 4)), np.ones((4, 3)), np.ones((2, 1, 3)), np.ones((2, 1, 3)),
                     np.ones((2, 1, 4)))  # fmt: skip


def test_chapter_scan_reports_shapes_in_its_own_layout():
    # (batch, L, d_state) as passed, not the transposed (batch, d_state, L) the scan sees
    x, delta, A = np.ones((1, 3, 2)), np.ones((1, 3, 2)), -np.ones((2, 1))
    want = r"; expected \(batch, L, d_state\) = \(1, 3, 1\) "
    with pytest.raises(ValueError, match=r"^B has shape \(1, 4, 1\)" + want + r"\(L = 3 from x, "):
        chapter_scan(x, A, np.ones((1, 4, 1)), np.ones((1, 3, 1)), delta)
    with pytest.raises(ValueError, match=r"^C has shape \(1, 3, 2\)" + want + r"\(d_state = 1 "):
        chapter_scan(x, A, np.ones((1, 3, 1)), np.ones((1, 3, 2)), delta)
    # x's d_model (3) against delta and A (2): x, not delta, is wrong
    with pytest.raises(ValueError, match=r"^x has shape \(1, 3, 3\); .*\(d_model = 2 from delta"):
        chapter_scan(np.ones((1, 3, 3)), A, np.ones((1, 3, 1)), np.ones((1, 3, 1)), delta)
    with pytest.raises(ValueError, match=r"^delta has shape \(1, 2, 3\); expected"):
        chapter_scan(x, A, np.ones((1, 3, 1)), np.ones((1, 3, 1)), np.ones((1, 2, 3)))
    with pytest.raises(TypeError, match=r"^x has dtype int64"):
        chapter_scan(x.astype(np.int64), A, np.ones((1, 3, 1)), np.ones((1, 3, 1)), delta)


@pytest.mark.parametrize("heads", [False, True])
def test_step_refuses_a_read_only_state(heads):
    # step writes the new state into ``state``: a read-only one is one clear line
    if heads:  # Mamba-2: (batch, nheads, headdim, dstate)
        state = np.zeros((1, 2, 1, 1))
        args = (np.ones((1, 2, 1)), np.ones((1, 2)), -np.ones(2), np.ones((1, 1, 1)),
                np.ones((1, 1, 1)))  # fmt: skip
    else:
        state = np.zeros((1, 2, 1))
        args = (np.ones((1, 2)), np.ones((1, 2)), -np.ones((2, 1)), np.ones((1, 1)),
                np.ones((1, 1)))  # fmt: skip
    state.flags.writeable = False
    want = (rf"^state \(shape {re.escape(str(state.shape))}, float64\) is read-only, and "
            r"step writes .* e\.g\. state\.copy\(\)$")  # fmt: skip
    with pytest.raises(ValueError, match=want):
        step(state, *args)
    assert not state.any()


def _swapped(v):
    """``v`` in the other byte order (same values): '>f8' on a little-endian machine."""
    return v.astype(v.dtype.newbyteorder("S"))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_non_native_byte_order_is_accepted(dtype):
    from propopt_case_studies.mamba import ssd_scan

    from .test_ssd import make

    d = {k: v.astype(dtype) for k, v in inputs(batch=2, dim=4, L=9, N=3).items()}
    sw = {k: _swapped(v) for k, v in d.items()}
    assert not sw["u"].dtype.isnative
    for method in ("fused", "parallel", "reference"):
        want = selective_scan(**d, method=method)
        got = selective_scan(**sw, method=method)
        assert got.dtype.isnative and np.array_equal(got, want), method
    m = {k: v.astype(dtype) for k, v in make(nb=1, L=20).items()}
    for method in ("fused", "reference"):
        want = ssd_scan(**m, chunk_size=8, method=method)
        got = ssd_scan(**{k: _swapped(v) for k, v in m.items()}, chunk_size=8, method=method)
        assert np.array_equal(got, want), method
    x, delta = d["u"].transpose(0, 2, 1), d["delta"].transpose(0, 2, 1)
    B, C = (v.transpose(0, 2, 1) for v in (d["B"], d["C"]))
    want = chapter_scan(x, d["A"], B, C, delta)
    got = chapter_scan(*(_swapped(v) for v in (x, d["A"], B, C, delta)))
    assert np.array_equal(got, want)
    # step writes the new state back into the caller's (swapped) array
    tok = (d["u"][..., 0], d["delta"][..., 0], d["A"], d["B"][..., 0], d["C"][..., 0])
    state, state_sw = d["initial_state"].copy(), _swapped(d["initial_state"])
    want = step(state, *tok)
    got = step(state_sw, *(_swapped(v) for v in tok))
    assert np.array_equal(got, want) and np.array_equal(state_sw, state)
    assert not state_sw.dtype.isnative
    # Mamba-2's step, the reference and the exps floor
    tok2 = (m["x"][:, 0], m["dt"][:, 0], m["A"], m["B"][:, 0], m["C"][:, 0])
    state, state_sw = np.ones((1, 4, 3, 5), dtype), _swapped(np.ones((1, 4, 3, 5), dtype))
    want = step(state, *tok2)
    got = step(state_sw, *(_swapped(v) for v in tok2))
    assert np.array_equal(got, want) and np.array_equal(state_sw, state)
    want = reference(**d)[0]
    assert np.array_equal(reference(**sw)[0], want)
    dl, A = np.full((1, 5, 64), 0.5, dtype), -np.ones((64, 2), dtype)
    assert np.array_equal(exps_only(_swapped(dl), _swapped(A)), exps_only(dl, A))


@pytest.mark.parametrize("bad", ["no", 1, None, np.array([True])])
def test_switches_take_only_bools(bad):
    # a string such as 'no' is truthy: it must not switch the softplus or the state on
    from propopt_case_studies.mamba import ssd_scan

    from .test_ssd import make

    d = _d()
    for name in ("delta_softplus", "return_last_state"):
        with pytest.raises(TypeError, match=rf"^{name}=.*: must be True or False$"):
            selective_scan(**d, **{name: bad})
    with pytest.raises(TypeError, match=r"^delta_softplus=.*: must be True or False$"):
        reference(**d, delta_softplus=bad)
    state = np.zeros((2, 4, 3))
    tok = (d["u"][..., 0], d["delta"][..., 0], d["A"], d["B"][..., 0], d["C"][..., 0])
    with pytest.raises(TypeError, match=r"^dt_softplus=.*: must be True or False$"):
        step(state, *tok, dt_softplus=bad)
    assert not state.any()  # refused before the state is written
    m = make(nb=1, L=8)
    heads = np.zeros((1, 4, 3, 5))
    with pytest.raises(TypeError, match=r"^dt_softplus=.*: must be True or False$"):
        step(heads, m["x"][:, 0], m["dt"][:, 0], m["A"], m["B"][:, 0], m["C"][:, 0],
             dt_softplus=bad)  # fmt: skip
    for name in ("dt_softplus", "return_final_states", "return_varlen_states"):
        with pytest.raises(TypeError, match=rf"^{name}=.*: must be True or False$"):
            ssd_scan(**m, chunk_size=4, cu_seqlens=np.array([0, 8]), **{name: bad})
    # numpy bools are bools
    want = selective_scan(**d, delta_softplus=True, return_last_state=True)
    got = selective_scan(**d, delta_softplus=np.True_, return_last_state=np.array(True))
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


def test_arrays_are_checked_before_the_packing_reads_them():
    # seq_idx made selective_scan read u.shape before u was known to be an array
    d = _d()
    seq_idx = np.zeros((2, 5), np.int64)
    with pytest.raises(TypeError, match=r"^u: expected a numpy array or a torch tensor, got list"):
        selective_scan(**dict(d, u=d["u"].tolist()), seq_idx=seq_idx)
    with pytest.raises(ValueError, match=r"^u has shape \(2, 4\); expected \(batch, dim, L\)"):
        selective_scan(**dict(d, u=d["u"][:, :, 0]), seq_idx=seq_idx)
    with pytest.raises(ValueError, match=r"^seq_idx has shape \(2, 4\); expected"):
        selective_scan(**d, seq_idx=seq_idx[:, :4])


def test_exps_only_dtypes_as_selective_scan():
    # half precisions computed in float32; integers, bools and complex numbers refused
    # (as selective_scan refuses them) instead of summing exps in the integer dtype
    delta, A = np.full((1, 3, 64), 0.5), -np.ones((64, 2))
    exact = 3 * 2 * np.exp(-0.5)
    for dtype in (np.float16, np.float32):
        got = exps_only(delta.astype(dtype), A.astype(dtype))
        assert got.dtype == np.float32 and np.allclose(got, exact, rtol=1e-6)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    got = exps_only(delta.astype(ml_dtypes.bfloat16), A)
    assert got.dtype == np.float32 and np.allclose(got, exact, rtol=1e-6)
    for name, bad in (
        ("delta", np.ones((1, 1, 64), np.int64)),
        ("delta", np.ones((1, 1, 64), bool)),
        ("delta", np.ones((1, 1, 64), np.complex128)),
        ("A", -np.ones((64, 2), np.int32)),
    ):
        args = {"delta": delta, "A": A, name: bad}
        with pytest.raises(TypeError, match=rf"^{name} has dtype {bad.dtype}; expected one of "
                                            "float16, bfloat16, float32, float64"):  # fmt: skip
            exps_only(**args)


@pytest.mark.parametrize("name", ["u", "B", "initial_state"])
def test_masked_arrays_are_refused_naming_the_argument(name):
    # the kernels read a masked array's data, masked entries included
    d = _d()
    d[name] = np.ma.MaskedArray(d[name], mask=np.ones(d[name].shape, bool))
    with pytest.raises(TypeError, match=rf"^{name} is a masked array.*{name}\.filled"):
        selective_scan(**d)


@pytest.mark.parametrize(
    ("name", "shape", "match"),
    [
        # A's d_state (3) disagreed with B, C and initial_state (4): B was blamed
        ("A", (4, 3), r"^A has shape \(4, 3\); expected \(dim, d_state\) = \(4, 4\) "
         r"\(d_state = 4 from B, C, initial_state\)$"),
        ("u", (2, 4, 6), r"^u has shape \(2, 4, 6\); expected \(batch, dim, L\) = \(2, 4, 5\) "
         r"\(L = 5 from delta, B, C, z\)$"),
        ("u", (3, 5, 5), r"^u has shape \(3, 5, 5\); .* = \(2, 4, 5\) \(batch = 2 from "
         r"delta, B, C, z, initial_state; dim = 4 from delta, A, D, z, delta_bias, "
         r"initial_state\)$"),
        ("B", (2, 3, 5), r"^B has shape \(2, 3, 5\); expected \(batch, d_state, L\) = "
         r"\(2, 4, 5\) \(d_state = 4 from A, C, initial_state\)$"),
    ],
)  # fmt: skip
def test_shape_errors_blame_the_argument_the_others_disagree_with(name, shape, match):
    d = _d()
    d.update(A=d["A"][:, :3].repeat(2, axis=1)[:, :4], B=np.ones((2, 4, 5)),
             C=np.ones((2, 4, 5)), initial_state=np.ones((2, 4, 4)))  # fmt: skip
    d[name] = np.ones(shape)
    with pytest.raises(ValueError, match=match):
        selective_scan(**d)


def test_ssd_and_step_shape_errors_blame_the_argument_the_others_disagree_with():
    from propopt_case_studies.mamba import ssd_scan

    dt, A, B = np.ones((1, 4, 2)), -np.ones(2), np.ones((1, 4, 1, 3))
    # x's nheads (3) disagreed with dt, A and dt_bias (2): dt was blamed
    said = r"^x has shape \(1, 4, 3, 5\); expected \(batch, seqlen, nheads, headdim\) = "
    with pytest.raises(
        ValueError, match=said + r"\(1, 4, 2, 5\) \(nheads = 2 from dt, A, dt_bias\)$"
    ):
        ssd_scan(np.ones((1, 4, 3, 5)), dt, A, B, B, chunk_size=2, dt_bias=np.zeros(2))
    # a Mamba-2 state's nheads (3) against x, dt, A (2): x was blamed
    said = r"^state has shape \(1, 3, 5, 3\); expected \(slots, nheads, headdim, dstate\) = "
    with pytest.raises(ValueError, match=said + r"\(1, 2, 5, 3\) \(nheads = 2 from x, dt, A\)$"):
        step(np.zeros((1, 3, 5, 3)), np.ones((1, 2, 5)), np.ones((1, 2)), -np.ones(2),
             np.ones((1, 1, 3)), np.ones((1, 1, 3)))  # fmt: skip
    # a Mamba-1 state's d_state (2) against A, B, C (3): A was blamed
    said = r"^state has shape \(2, 4, 2\); expected \(batch, dim, d_state\) = \(2, 4, 3\) "
    with pytest.raises(ValueError, match=said + r"\(d_state = 3 from A, B, C\)$"):
        step(np.zeros((2, 4, 2)), np.ones((2, 4)), np.ones((2, 4)), np.ones((4, 3)),
             np.ones((2, 3)), np.ones((2, 3)))  # fmt: skip
