"""Tiles cover an array exactly once; tiled kernels equal their references; roofline."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from propopt import pairwise_sum
from propopt.locality import (
    RooflineReport,
    plot_roofline,
    roofline,
    tiled_matmul,
    tiled_pairwise,
    tiles,
)

from ..symmetry.test_pairs import soft_inverse


@settings(max_examples=40)
@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=3).flatmap(
        lambda s: st.tuples(
            st.just(tuple(s)), st.lists(st.integers(1, 4), min_size=len(s), max_size=len(s))
        )
    )
)
def test_tiles_cover_exactly_once(shape_tile):
    shape, tile = shape_tile
    count = np.zeros(shape, int)
    for t in tiles(shape, tuple(tile)):
        assert len(t) == len(shape)
        assert all(0 < s.stop - s.start <= k for s, k in zip(t, tile))
        count[t] += 1
    assert np.all(count == 1)


def test_tiles_int_arguments_and_errors():
    assert list(tiles(5, 2)) == [(slice(0, 2),), (slice(2, 4),), (slice(4, 5),)]
    assert len(list(tiles((4, 4), 2))) == 4
    assert list(tiles(0, 3)) == []
    with pytest.raises(ValueError, match=r"tile=0: tile sizes must be >= 1"):
        list(tiles(4, 0))
    with pytest.raises(ValueError, match=r"tile=\(1, 2, 3\) has 3 entries but shape has 2"):
        list(tiles((4, 4), (1, 2, 3)))
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        list(tiles(-1, 2))
    with pytest.raises(TypeError, match="must be an int or a tuple of ints"):
        list(tiles(4.0, 2))


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 5, 3), (65, 64, 63), (130, 17, 129)])
def test_matmul_methods_agree(dtype, rtol, shape):
    n, m, p = shape
    rng = np.random.default_rng(n)
    A, B = rng.normal(size=(n, m)).astype(dtype), rng.normal(size=(m, p)).astype(dtype)
    ref = tiled_matmul(A, B, method="reference")
    scale = np.abs(A).max() * np.abs(B).max() * m
    for method in ("naive", "tiled", "blas", "auto"):
        for tile in (1, 3, 64):
            C = tiled_matmul(A, B, method=method, tile=tile)
            assert C.dtype == dtype and C.shape == (n, p)
            assert np.allclose(C, ref, rtol=0, atol=rtol * scale)
            if method != "tiled":
                break


def test_matmul_errors_and_empty():
    assert tiled_matmul(np.zeros((3, 0)), np.zeros((0, 2))).tolist() == [[0, 0]] * 3
    with pytest.raises(ValueError, match=r"inner sizes 3 and 2 differ"):
        tiled_matmul(np.zeros((2, 3)), np.zeros((2, 2)))
    with pytest.raises(
        ValueError,
        match=r"^method='fast' is not one of 'auto', 'tiled', "
        r"'naive', 'blas', 'reference'$",
    ):
        tiled_matmul(np.zeros((2, 2)), np.zeros((2, 2)), method="fast")
    with pytest.raises(ValueError, match=r"^device='gpu' is not one of 'auto', 'cpu'$"):
        tiled_matmul(np.zeros((2, 2)), np.zeros((2, 2)), device="gpu")
    assert tiled_matmul(np.eye(2), np.ones((2, 2)), device="cpu").tolist() == [[1, 1], [1, 1]]
    with pytest.raises(ValueError, match=r"A has shape \(2,\): tiled_matmul takes 2-D"):
        tiled_matmul(np.zeros(2), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="tile=0"):
        tiled_matmul(np.zeros((2, 2)), np.zeros((2, 2)), tile=0)


def test_tiled_pairwise_equals_untiled_and_reference():
    rng = np.random.default_rng(0)
    X, w = rng.normal(size=(203, 3)), rng.uniform(0.5, 2, 203)
    ref = pairwise_sum(soft_inverse, X, w, method="reference")
    for tile in (None, 1, 7, 128):
        got = tiled_pairwise(soft_inverse, X, w, tile=tile)
        assert np.allclose(got, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_roofline_report_and_plot(tmp_path):
    rep = roofline(n=1 << 12, matmul_n=32, repeats=1)
    assert isinstance(rep, RooflineReport)
    names = [k.name for k in rep.kernels]
    assert names == [
        "copy",
        "axpy numpy",
        "axpy fused",
        "poly8 numpy",
        "poly8 fused",
        "matmul tiled",
        "matmul blas",
    ]
    assert rep["axpy fused"].intensity == pytest.approx(2 / 12)
    assert rep["matmul blas"].intensity == pytest.approx(2 * 32 / 12)
    assert rep.peak_gflops == max(k.gflops for k in rep.kernels)
    assert rep.ridge == pytest.approx(rep.peak_gflops / rep.peak_gbs)
    assert rep.attainable(1e9) == rep.peak_gflops
    text = str(rep)
    assert "compute roof" in text and "poly8 fused" in text and "flop/byte" in text
    with pytest.raises(KeyError, match="no kernel 'fft'"):
        rep["fft"]
    with pytest.raises(ValueError, match="n=0: must be an int >= 1"):
        roofline(n=0)
    with pytest.raises(ValueError, match="dtype="):
        roofline(n=8, dtype=np.int32)
    pytest.importorskip("matplotlib")
    out = plot_roofline(rep, tmp_path / "roofline.png")
    assert out.exists() and out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(TypeError, match="must be a RooflineReport"):
        plot_roofline({}, tmp_path / "x.png")


def test_plot_roofline_without_matplotlib(monkeypatch, tmp_path):
    import builtins

    rep = roofline(n=64, matmul_n=4, repeats=1)
    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(ImportError, match=r"plot_roofline needs matplotlib: pip install"):
        plot_roofline(rep, tmp_path / "r.png")


def test_tiles_of_a_0d_shape():
    """One int is a tile for every axis, none for a 0-d shape: one empty tile."""
    assert list(tiles((), 2)) == [()]
    with pytest.raises(ValueError, match="tile=0"):
        list(tiles((), 0))
    with pytest.raises(ValueError, match=r"tile=\(2,\) has 1 entries but shape has 0"):
        list(tiles((), (2,)))


def test_matmul_inputs():
    torch = pytest.importorskip("torch")
    A = torch.arange(6.0, requires_grad=True).reshape(2, 3)
    assert tiled_matmul(A, np.ones((3, 1))).tolist() == [[3.0], [12.0]]
    with pytest.raises(ValueError, match=r"A\[0, 0\] = 9007199254740993 is not exactly a float64"):
        tiled_matmul(np.array([[2**53 + 1]]), np.array([[1]]))
    assert tiled_matmul(np.array([[2**53]]), np.array([[1]])).tolist() == [[2.0**53]]


def test_every_matmul_method_has_a_backend():
    from propopt.locality import tiling

    assert set(tiling.MATMUL_BACKENDS) == {(m, "cpu") for m in tiling.MATMUL_METHODS}
    assert set(tiling.MATMUL_AUTO) <= set(tiling.MATMUL_BACKENDS)


def test_matmul_reads_a_dask_matrix_to_the_host_with_every_method():
    da = pytest.importorskip("dask.array")
    A, B = np.arange(12.0).reshape(3, 4), np.ones((4, 2))
    for method in ("auto", "blas", "tiled"):
        np.testing.assert_array_equal(tiled_matmul(da.from_array(A), B, method=method), A @ B)
