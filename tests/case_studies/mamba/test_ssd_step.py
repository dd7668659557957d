"""step with Mamba-2's multi-head state and with a cache of state slots."""

import numpy as np
import pytest

from propopt_case_studies.mamba import ssd_scan, step

from .test_ssd import make, oracle, rel_err

torch = pytest.importorskip("torch")


def _token(d, t):
    return {k: d[k][:, t] for k in ("x", "dt", "B", "C", "z")}


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("D_per_head", [True, False])
def test_steps_equal_the_scan(lib, D_per_head):
    d = make(nb=2, L=12, H=4, P=3, G=2, N=5, seed=11)
    if D_per_head:
        d["D"] = d["D"][:, 0].copy()
    init = np.random.default_rng(12).normal(size=(2, 4, 3, 5))
    y_scan, fin = oracle(**d, softplus=True, initial_states=init)
    conv = torch.from_numpy if lib == "torch" else (lambda v: v)
    state = conv(init.copy())
    for t in range(12):
        tok = _token(d, t)
        y = step(state, conv(tok["x"]), conv(tok["dt"]), conv(d["A"]), conv(tok["B"]),
                 conv(tok["C"]), D=conv(d["D"]), z=conv(tok["z"]), dt_bias=conv(d["dt_bias"]),
                 dt_softplus=True)  # fmt: skip
        assert tuple(y.shape) == (2, 4, 3)
        assert rel_err(np.asarray(y), y_scan[:, t]) <= 1e-12
    assert rel_err(np.asarray(state), fin) <= 1e-12
    # and the chunked scan agrees
    assert (
        rel_err(ssd_scan(**d, chunk_size=4, dt_softplus=True, initial_states=init), y_scan) <= 1e-10
    )


def test_per_channel_forms_equal_per_head_forms():
    # mamba_ssm's general form: dt (batch, nheads, headdim), A (nheads, headdim,
    # dstate), dt_bias and D (nheads, headdim); the Mamba-2 layer broadcasts them.
    d = make(nb=3, L=1, H=4, P=3, G=1, N=5, seed=13)
    tok = _token(d, 0)
    s1 = np.random.default_rng(14).normal(size=(3, 4, 3, 5))
    s2 = s1.copy()
    y1 = step(s1, tok["x"], tok["dt"], d["A"], tok["B"], tok["C"], D=d["D"][:, 0],
              z=tok["z"], dt_bias=d["dt_bias"], dt_softplus=True)  # fmt: skip
    y2 = step(s2, tok["x"], np.repeat(tok["dt"][..., None], 3, -1),
              np.broadcast_to(d["A"][:, None, None], (4, 3, 5)).copy(), tok["B"], tok["C"],
              D=np.repeat(d["D"][:, :1], 3, 1), z=tok["z"],
              dt_bias=np.repeat(d["dt_bias"][:, None], 3, 1), dt_softplus=True)  # fmt: skip
    assert np.allclose(y1, y2, rtol=1e-14, atol=0) and np.allclose(s1, s2, rtol=1e-14, atol=0)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("heads", [True, False])
def test_state_batch_indices(lib, heads):
    rng = np.random.default_rng(15)
    idx = np.array([3, 0])
    if heads:
        cache = rng.normal(size=(5, 4, 3, 2))
        args = (rng.normal(size=(2, 4, 3)), rng.uniform(0.1, 1, (2, 4)),
                -np.exp(rng.normal(size=4)), rng.normal(size=(2, 2, 2)),
                rng.normal(size=(2, 2, 2)))  # fmt: skip
    else:
        cache = rng.normal(size=(5, 6, 2))
        args = (rng.normal(size=(2, 6)), rng.uniform(0.1, 1, (2, 6)),
                -np.exp(rng.normal(size=(6, 2))), rng.normal(size=(2, 2)),
                rng.normal(size=(2, 2)))  # fmt: skip
    gathered = cache[idx].copy()
    want = step(gathered, *args)
    conv = torch.from_numpy if lib == "torch" else (lambda v: v)
    c = conv(cache.copy())
    got = step(c, *(conv(a) for a in args), state_batch_indices=conv(idx))
    c = np.asarray(c)
    assert np.allclose(np.asarray(got), want, rtol=1e-14, atol=0)
    assert np.allclose(c[idx], gathered, rtol=1e-14, atol=0)
    untouched = [i for i in range(5) if i not in idx]
    assert np.array_equal(c[untouched], cache[untouched])


@pytest.mark.parametrize("idx, err, match", [
    (np.array([1, 1]), ValueError, "names a slot twice"),
    (np.array([0, 5]), ValueError, "slots are 0..4"),
    (np.array([-1, 0]), ValueError, "slots are 0..4"),
    (np.array([0]), ValueError, r"expected \(batch,\)"),
    (np.array([0.0, 1.0]), TypeError, "integers"),
])  # fmt: skip
def test_bad_indices(idx, err, match):
    rng = np.random.default_rng(16)
    cache = np.zeros((5, 4, 3, 2))
    with pytest.raises(err, match=match):
        step(cache, rng.normal(size=(2, 4, 3)), np.ones((2, 4)), -np.ones(4),
             np.ones((2, 1, 2)), np.ones((2, 1, 2)), state_batch_indices=idx)  # fmt: skip


@pytest.mark.parametrize("kw, match", [
    (dict(A=-np.ones((4, 3))), "A has shape"),
    (dict(dt=np.ones((2, 3))), "dt has shape"),
    (dict(B=np.ones((2, 3, 2))), "ngroups dividing nheads=4"),
    (dict(C=np.ones((2, 1, 3))), "C has shape"),
    (dict(D=np.ones(3)), "D has shape"),
    (dict(dt_bias=np.ones((3, 4))), "dt_bias has shape"),
    (dict(z=np.ones((2, 4))), "z has shape"),
    (dict(x=np.ones((2, 4, 2))), "x has shape"),
])  # fmt: skip
def test_bad_head_shapes(kw, match):
    args = dict(x=np.ones((2, 4, 3)), dt=np.ones((2, 4)), A=-np.ones(4), B=np.ones((2, 1, 2)),
                C=np.ones((2, 1, 2)))  # fmt: skip
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        step(np.zeros((2, 4, 3, 2)), **args)


def test_state_rank():
    with pytest.raises(ValueError, match="Mamba-2"):
        step(np.zeros((2, 3)), np.ones(2), np.ones(2), -np.ones(2), np.ones(2), np.ones(2))
