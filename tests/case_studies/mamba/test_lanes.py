"""The lane kernel's vector token update against a float64 loop, and against its own loops."""

import numpy as np
from numba import njit

from propopt_case_studies.mamba import exps_only
from propopt_case_studies.mamba._exp import fexp
from propopt_case_studies.mamba._lanes import finish_update, token_io_update, token_update


@njit(cache=True)
def _tokens(h, at, d, u, y, B, C):
    for k in range(d.shape[0]):
        token_update(h, at, d[k], u[k], y[k], B[k], C[k])


@njit(cache=True)
def _tokens_loops(h, at, d, u, y, B, C):  # the same update, as plain numba loops
    N, W = h.shape
    for k in range(d.shape[0]):
        for j in range(W):
            acc = np.float32(0)
            for n in range(N):
                hn = fexp(d[k, j] * at[n, j]) * h[n, j] + u[k, j] * B[k, n]
                h[n, j] = hn
                acc += hn * C[k, n]
            y[k, j] = acc


def _inputs(rng, N, W, T, dtype):
    at = -np.exp(rng.normal(size=(N, W))).astype(dtype)
    d = rng.uniform(0.0, 2.0, (T, W)).astype(dtype)
    u = rng.normal(size=(T, W)).astype(dtype)
    B, C = rng.normal(size=(T, N)).astype(dtype), rng.normal(size=(T, N)).astype(dtype)
    h = rng.normal(size=(N, W)).astype(dtype)
    return h, at, d, u, B, C


def _reference(h, at, d, u, B, C):
    h = h.astype(np.float64)
    ys = []
    for k in range(d.shape[0]):
        h = np.exp(d[k].astype(np.float64) * at) * h + u[k].astype(np.float64) * B[k][:, None]
        ys.append((h * C[k][:, None].astype(np.float64)).sum(0))
    return h, np.array(ys)


def test_vector_update_matches_float64_and_the_loops():
    rng = np.random.default_rng(3)
    for W in (16, 32, 64):
        h, at, d, u, B, C = _inputs(rng, 16, W, 40, np.float32)
        h_ref, y_ref = _reference(h, at, d, u, B, C)
        y = np.empty_like(d)
        hv = h.copy()
        _tokens(hv, at, d, u, y, B, C)
        assert np.abs(y - y_ref).max() <= 2e-6 * np.abs(y_ref).max()
        assert np.abs(hv - h_ref).max() <= 2e-6 * np.abs(h_ref).max()
        y2 = np.empty_like(d)
        h2 = h.copy()
        _tokens_loops(h2, at, d, u, y2, B, C)
        assert np.abs(hv - h2).max() <= 1e-6 * np.abs(h_ref).max()


def test_vector_update_float64_and_edges():
    rng = np.random.default_rng(4)
    h, at, d, u, B, C = _inputs(rng, 4, 16, 5, np.float64)
    h_ref, y_ref = _reference(h, at, d, u, B, C)
    y = np.empty_like(d)
    _tokens(h, at, d, u, y, B, C)
    assert np.allclose(y, y_ref, rtol=1e-12, atol=1e-12)
    assert np.allclose(h, h_ref, rtol=1e-12, atol=1e-12)
    # NaN propagates to its lane only; dt * A = -inf decays the state to 0
    h, at, d, u, B, C = _inputs(rng, 4, 16, 1, np.float32)
    d[0, 3] = np.nan
    d[0, 5] = np.inf
    y = np.empty_like(d)
    _tokens(h, at, d, u, y, B, C)
    assert np.isnan(y[0, 3]) and np.isnan(h[:, 3]).all()
    assert np.allclose(h[:, 5], u[0, 5] * B[0])
    assert np.isfinite(np.delete(y[0], 3)).all()


def test_exps_only_sums_the_exps():
    rng = np.random.default_rng(5)
    delta = rng.uniform(0.0, 3.0, (2, 9, 128))
    A = -np.exp(rng.normal(size=(128, 16)))
    exact = np.exp(delta[..., None] * A).sum(1).sum(-1)
    for dtype, tol in ((np.float32, 1e-6), (np.float64, 1e-13)):
        got = exps_only(delta.astype(dtype), A.astype(dtype))
        assert got.dtype == dtype and np.abs(got - exact).max() <= tol * np.abs(exact).max()


@njit(cache=True)
def _io_tokens(h, at, d2, u2, o2, z2, bias, Dv, B, C, scale_b, has_z):
    for t in range(d2.shape[0]):
        token_io_update(h, at, d2, u2, o2, z2, t, 16, bias, Dv, 16, B[t], C[t], scale_b, True,
                        has_z)  # fmt: skip


@njit(cache=True)
def _finish(yb, u2, z2, o2, Dv, has_z):
    for k in range(0, yb.shape[0], 16):
        for j in range(0, yb.shape[1], 16):
            finish_update(yb, k, j, u2, z2, o2, 16, 32, Dv, has_z)


def test_in_place_token_update_and_finish_match_float64():
    # token_io_update reads columns 16..16+W of (tokens, channels) rows and adds
    # bias / D from offset 16; finish_update writes channel-major rows from 16
    # at token 32.  float32 runs the vector code, float64 the numba loops.
    rng = np.random.default_rng(6)
    N, W, T = 8, 32, 20
    for dtype in (np.float32, np.float64):
        tol = 3e-6 if dtype == np.float32 else 1e-12
        for scale_b, has_z in ((True, True), (False, False)):
            h, at, d, u, B, C = _inputs(rng, N, W, T, dtype)
            d2, u2, z2 = (
                np.concatenate(
                    [rng.normal(size=(T, 16)), a, rng.normal(size=(T, 5))], axis=1
                ).astype(dtype)
                for a in (d, u, rng.normal(size=(T, W)))
            )
            bias = rng.uniform(0, 0.5, 16 + W + 3).astype(dtype)
            Dv = rng.normal(size=16 + W + 3).astype(dtype)
            o2 = np.full_like(d2, 7.0)
            hv = h.copy()
            _io_tokens(hv, at, d2, u2, o2, z2, bias, Dv, B, C, scale_b, has_z)
            dt = d + bias[16 : 16 + W]
            h_ref, y_ref = _reference(h, at, dt, dt * u if scale_b else u, B, C)
            exact = y_ref + Dv[16 : 16 + W] * u
            if has_z:
                z = z2[:, 16 : 16 + W].astype(np.float64)
                exact = exact * z / (1 + np.exp(-z))
            assert np.abs(o2[:, 16 : 16 + W] - exact).max() <= tol * np.abs(exact).max()
            assert (o2[:, :16] == 7).all() and (o2[:, 16 + W :] == 7).all()
            assert np.abs(hv - h_ref).max() <= tol * np.abs(h_ref).max()
            # finish: y (tokens, channels) -> out (channels, tokens)
            yb = rng.normal(size=(32, W)).astype(dtype)
            uc = rng.normal(size=(16 + W, 80)).astype(dtype)
            zc = rng.normal(size=(16 + W, 80)).astype(dtype)
            oc = np.full_like(uc, 7.0)
            _finish(yb, uc, zc, oc, Dv, has_z)
            want = yb.T.astype(np.float64) + Dv[16 : 16 + W, None] * uc[16:, 32:64]
            if has_z:
                z = zc[16:, 32:64].astype(np.float64)
                want = want * z / (1 + np.exp(-z))
            assert np.abs(oc[16:, 32:64] - want).max() <= tol * np.abs(want).max()
            assert (oc[:16] == 7).all() and (oc[:, :32] == 7).all() and (oc[:, 64:] == 7).all()
