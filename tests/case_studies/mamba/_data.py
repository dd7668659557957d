"""Inputs for the selective-scan tests (negative A = -exp(A_log), as Mamba)."""

import numpy as np


def inputs(batch=2, dim=32, L=70, N=4, b_kind="step", c_kind="step", groups=2, seed=0,
           dtype=np.float64, extras=True):  # fmt: skip
    rng = np.random.default_rng(seed)

    def mat(kind):
        if kind == "shared":
            return rng.normal(size=(dim, N))
        if kind == "step":
            return rng.normal(size=(batch, N, L))
        return rng.normal(size=(batch, groups, N, L))

    d = dict(
        u=rng.normal(size=(batch, dim, L)),
        delta=rng.uniform(0.01, 0.5, (batch, dim, L)),
        A=-np.exp(rng.normal(size=(dim, N))),
        B=mat(b_kind),
        C=mat(c_kind),
    )
    if extras:
        d.update(
            D=rng.normal(size=dim),
            z=rng.normal(size=(batch, dim, L)),
            delta_bias=rng.normal(size=dim) * 0.3,
            initial_state=rng.normal(size=(batch, dim, N)),
        )
    return {k: v.astype(dtype) for k, v in d.items()}


def rel_err(got, exact):
    got = np.asarray(got, dtype=np.float64)
    scale = max(float(np.max(np.abs(exact))), 1e-300)
    return float(np.max(np.abs(got - exact))) / scale
