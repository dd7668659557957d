"""recurrence: the h of h_t = a_t h_{t-1} + b_t alone, against a float64 loop."""

import numpy as np
import pytest

import propopt as pp

from ..oracles import linrec64

# float32: each h_t carries about (1 / (1 - a)) * eps32 of rounding for decays
# a <= 0.999 (a geometric sum of per-step errors), 1e-3 relative leaves a margin;
# float64 the same with eps64
RTOL = {np.float32: 1e-3, np.float64: 1e-10}


def _loop(a, b, h0=0.0, reverse=False):
    """h along the last axis, one Python step per element in float64."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    h0 = np.broadcast_to(np.asarray(h0, np.float64), a.shape[:-1])
    out = np.empty(a.shape)
    for r in np.ndindex(a.shape[:-1]):
        ar, br = (a[r][::-1], b[r][::-1]) if reverse else (a[r], b[r])
        _, h = linrec64(ar, np.concatenate([[ar[0] * h0[r] + br[0]], br[1:]]))
        out[r] = h[::-1] if reverse else h
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_long_rows_match_the_float64_loop(dtype, threads):
    """One row long enough for super-blocks on two threads, and rows side by side."""
    rng = np.random.default_rng(11)
    for shape in [(3 * 2**19 + 5,), (3, 4099)]:
        a = rng.uniform(0.5, 0.999, shape).astype(dtype)
        b = rng.normal(size=shape).astype(dtype)
        for reverse in (False, True):
            with pp.set_num_threads(threads):
                h = pp.recurrence(a, b, axis=-1, reverse=reverse)
            assert h.dtype == dtype and h.shape == shape
            want = _loop(a, b, reverse=reverse)
            np.testing.assert_allclose(h, want, rtol=RTOL[dtype], atol=RTOL[dtype])


def test_equals_the_second_output_of_the_scan():
    rng = np.random.default_rng(2)
    # float32: recurrence runs the in-block tree, the scan writing A and h the
    # lanes, so they agree to float32 rounding, and both with the float64 loop
    a = rng.uniform(0.9, 1.0, 5000).astype(np.float32)
    b = rng.normal(size=5000).astype(np.float32)
    with pp.set_num_threads(1):
        _, want = pp.associative_scan(pp.linear_recurrence, (a, b))
        got = pp.recurrence(a, b)
    loop = _loop(a.astype(np.float64), b.astype(np.float64))
    scale = np.abs(loop).max()
    np.testing.assert_allclose(got, loop, rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)


def test_h0_a_broadcast_decay_and_other_axes():
    rng = np.random.default_rng(4)
    b = rng.normal(size=(3, 700))
    h0 = rng.normal(size=3)
    np.testing.assert_allclose(pp.recurrence(0.9, b, axis=1, h0=h0), _loop(0.9, b, h0), rtol=1e-12)
    got = pp.recurrence(0.9, b, axis=1, h0=h0, reverse=True)
    np.testing.assert_allclose(got, _loop(0.9, b, h0, reverse=True), rtol=1e-12)
    # the time axis first: the scan of the monoid, A dropped, h0 added through A
    bt = np.ascontiguousarray(b.T)
    np.testing.assert_allclose(pp.recurrence(0.9, bt, h0=h0), _loop(0.9, b, h0).T, rtol=1e-12)
    # chunks chained through h0 give the whole
    whole = pp.recurrence(0.95, b[0])
    first = pp.recurrence(0.95, b[0, :300])
    rest = pp.recurrence(0.95, b[0, 300:], h0=first[-1])
    np.testing.assert_allclose(np.concatenate([first, rest]), whole, rtol=1e-12)


def test_out_is_written_and_returned():
    a = np.full(10_000, 0.5, np.float32)
    b = np.ones(10_000, np.float32)
    out = np.empty_like(b)
    assert pp.recurrence(a, b, out=out) is out
    np.testing.assert_allclose(out, _loop(a, b), rtol=1e-6)


def test_torch_tensors_go_through_the_scan():
    torch = pytest.importorskip("torch")
    a = torch.full((5,), 0.5, dtype=torch.float64)
    h = pp.recurrence(
        a, torch.ones(5, dtype=torch.float64), h0=torch.tensor(2.0, dtype=torch.float64)
    )
    assert isinstance(h, torch.Tensor)
    np.testing.assert_allclose(h.numpy(), _loop(a.numpy(), np.ones(5), 2.0), rtol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"a": np.ones(3), "b": np.ones(4)},
            r"^a.shape=\(3,\) and b.shape=\(4,\) do not broadcast",
        ),
        ({"axis": 2}, r"^axis=2 is out of range for 2-d a and b; pass -2 <= axis < 2$"),
        ({"h0": np.ones(5)}, r"^h0.shape=\(5,\) does not broadcast to \(3,\)"),
        (
            {"out": np.empty((3, 4), np.float32)},
            r"^out is a ndarray of shape \(3, 4\) and dtype float32",
        ),
        ({"a": 0.5, "b": 1.0}, r"^a and b are scalars"),
    ],
    ids=["shapes", "axis", "h0", "out", "scalars"],
)
def test_bad_arguments_say_what_to_pass_in_one_line(kwargs, match):
    args = {"a": np.full((3, 4), 0.5), "b": np.ones((3, 4)), "axis": 1} | kwargs
    with pytest.raises(ValueError, match=match) as info:
        pp.recurrence(args.pop("a"), args.pop("b"), **args)
    assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match=r"^reverse='yes', must be True or False$"):
        pp.recurrence(np.ones(3), np.ones(3), reverse="yes")
