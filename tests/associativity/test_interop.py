"""Any array library in, the same library out: jax (and CuPy, where installed) through DLPack.

The expected values are float64 loops written here, sharing no code with the
library.
"""

from __future__ import annotations

import numpy as np
import pytest

import propopt as pp
from propopt import _dlpack

jax = pytest.importorskip("jax")
jnp = jax.numpy


def _prefix_sums(x) -> list[float]:
    out, acc = [], 0.0
    for v in np.asarray(x, dtype=np.float64).tolist():
        acc += v
        out.append(acc)
    return out


def _best(x, k: int) -> tuple[list[float], list[int]]:
    """The k largest of a 1-D array and their indices, ties to the smaller index."""
    pairs = sorted(enumerate(np.asarray(x, dtype=np.float64).tolist()), key=lambda p: (-p[1], p[0]))
    return [v for _, v in pairs[:k]], [i for i, _ in pairs[:k]]


def _pointer(a) -> int:
    return np.from_dlpack(a).__array_interface__["data"][0]


def test_jax_in_jax_out_scan():
    x = jnp.asarray(np.random.default_rng(0).normal(size=1000).astype(np.float32))
    got = pp.associative_scan(pp.add, x)
    assert isinstance(got, jax.Array) and got.dtype == x.dtype
    assert got.devices() == x.devices()
    np.testing.assert_allclose(np.asarray(got), _prefix_sums(x), rtol=1e-4, atol=1e-3)


def test_jax_in_jax_out_topk():
    x = jnp.asarray(np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0], np.float32))
    values, indices = pp.topk(x, 3)
    assert isinstance(values, jax.Array) and isinstance(indices, jax.Array)
    want_v, want_i = _best(x, 3)
    assert np.asarray(values).tolist() == want_v and np.asarray(indices).tolist() == want_i


def test_torch_in_torch_out_for_both_verbs():
    torch = pytest.importorskip("torch")
    x = torch.tensor([2.0, 7.0, 1.0, 8.0, 2.0, 8.0], dtype=torch.float64)
    scanned = pp.associative_scan(pp.add, x)
    assert isinstance(scanned, torch.Tensor) and scanned.tolist() == _prefix_sums(x.numpy())
    values, indices = pp.topk(x, 2)
    assert isinstance(values, torch.Tensor) and isinstance(indices, torch.Tensor)
    assert (values.tolist(), indices.tolist()) == _best(x.numpy(), 2)


def test_a_cpu_jax_array_goes_in_without_a_copy():
    x = jnp.arange(64, dtype=jnp.float32)
    leaves, _ = _dlpack.enter([x], kind="jax")
    assert leaves[0].__array_interface__["data"][0] == x.unsafe_buffer_pointer()


def test_results_come_back_without_a_copy():
    y = _dlpack.aligned_empty((1000,), np.float32)
    y[:] = 1.5
    back = _dlpack.to_caller(y, "jax")
    assert back.unsafe_buffer_pointer() == y.__array_interface__["data"][0]
    assert np.asarray(back).tolist() == [1.5] * 1000


def test_the_scan_result_is_handed_back_without_a_copy(monkeypatch):
    made = []
    real = _dlpack.to_caller

    def spy(y, kind):
        out = real(y, kind)
        made.append((y.__array_interface__["data"][0], out.unsafe_buffer_pointer()))
        return out

    monkeypatch.setattr(_dlpack, "to_caller", spy)
    x = jnp.ones(4096, jnp.float32)
    got = pp.associative_scan(pp.add, x)
    assert made and all(a == b for a, b in made)
    assert np.asarray(got)[-1] == 4096.0


def test_out_with_jax_arrays_is_one_line():
    x = jnp.ones(4, jnp.float32)
    for call in (
        lambda: pp.associative_scan(pp.add, x, out=jnp.zeros(4, jnp.float32)),
        lambda: pp.topk(x, 2, out=(jnp.zeros(2), jnp.zeros(2, jnp.int32))),
    ):
        with pytest.raises(ValueError, match="out= cannot receive jax arrays") as err:
            call()
        assert "\n" not in str(err.value)


def test_pytrees_reset_exclusive_and_callables_with_jax_leaves():
    a = jnp.asarray(np.full(5, 0.5, np.float32))
    b = jnp.asarray(np.arange(1.0, 6.0, dtype=np.float32))
    starts = np.array([True, False, False, True, False])

    def affine(p, q):  # h -> a h + b, the earlier map first
        return {"a": q["a"] * p["a"], "b": q["a"] * p["b"] + q["b"]}

    got = pp.associative_scan(affine, {"a": a, "b": b}, reset=starts)
    assert isinstance(got["b"], jax.Array)
    h, want = 0.0, []
    for i, (av, bv) in enumerate(zip([0.5] * 5, range(1, 6))):
        h = float(bv) if starts[i] else av * h + bv
        want.append(h)
    np.testing.assert_allclose(np.asarray(got["b"]), want, rtol=1e-6)
    ex = pp.associative_scan(lambda u, v: u + v, b, exclusive=True, identity=0.0)
    assert isinstance(ex, jax.Array)
    assert np.asarray(ex).tolist() == [0.0] + _prefix_sums(b)[:-1]


def test_bfloat16_jax_leaves():
    x = jnp.asarray(np.arange(1.0, 33.0), dtype=jnp.bfloat16)
    got = pp.associative_scan(pp.add, x)
    assert isinstance(got, jax.Array) and got.dtype == jnp.bfloat16
    # one rounding of the exact float32 sums to bfloat16 (u = 2**-8)
    np.testing.assert_allclose(np.asarray(got, np.float64), _prefix_sums(x), rtol=2.0**-8)
    values, indices = pp.topk(x, 2)
    assert values.dtype == jnp.bfloat16 and np.asarray(indices).tolist() == [31, 30]


def test_masked_numpy_still_masks_beside_jax():
    x = np.ma.array([1.0, 2.0, 3.0], mask=[False, True, False])
    got = pp.associative_scan(pp.add, x)
    assert got.mask.tolist() == [False, True, False] and got.filled(0).tolist() == [1.0, 0.0, 4.0]


def test_mixing_jax_and_numpy_leaves_is_refused():
    with pytest.raises(ValueError, match="mixes array types"):
        pp.associative_scan(pp.linear_recurrence, (jnp.ones(3), np.ones(3, np.float32)))


def test_cupy_in_cupy_out():
    cupy = pytest.importorskip("cupy")
    x = cupy.arange(1.0, 9.0)
    got = pp.associative_scan(pp.add, x)
    assert isinstance(got, cupy.ndarray)
    assert cupy.asnumpy(got).tolist() == _prefix_sums(cupy.asnumpy(x))
    values, indices = pp.topk(x, 2)
    assert isinstance(values, cupy.ndarray) and cupy.asnumpy(indices).tolist() == [7, 6]


def test_the_plan_converts_first_and_undoes_last():
    from propopt.associativity.scan import _stages

    x = jnp.asarray(np.arange(1.0, 9.0, dtype=np.float32))
    staged = _stages.plan(_stages.normalize(pp.add, x, reverse=True))
    assert staged.request.kind == "jax" and staged.scan.kind == "numpy"
    assert len(staged.undo) == 1 and isinstance(staged.scan.leaves[0], np.ndarray)
    assert staged.scan.leaves[0].ctypes.data == x.unsafe_buffer_pointer()  # the kernels read x
    assert staged.scan.out is not None and staged.scan.out[0].ctypes.data % _dlpack.ALIGN == 0
    got = _stages.run(staged)
    assert isinstance(got, jax.Array)
    assert np.asarray(got).tolist() == _prefix_sums(np.arange(8.0, 0.0, -1.0))[::-1]
