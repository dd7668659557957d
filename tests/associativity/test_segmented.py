"""Segmented scans: ``associative_scan(..., reset=)`` and the ``segmented`` monoid.

Every backend is compared with a float64 loop written here (it shares no
code with the library), and with scanning each segment alone; the segmented
monoid passes the law audits that plain monoids pass.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import propopt as pp
from propopt.associativity import segmented
from propopt.audit import check_associative, check_identity
from propopt.testing import assert_associative, elements, triples

# float64 results of a reordered fold of at most ~60 well-scaled elements
RTOL = 1e-12


def _add(a, b):
    return (a[0] + b[0],)


def _linrec(a, b):  # (a1, b1) then (a2, b2): h -> a2 (a1 h + b1) + b2
    return (a[0] * b[0], b[0] * a[1] + b[1])


LOOPS = {"add": (_add, (0.0,)), "linear_recurrence": (_linrec, (1.0, 0.0))}


def loop(name, elems, starts, reverse=False, exclusive=False):
    """The segmented scan of 1-D float64 leaves, one element at a time."""
    op, ident = LOOPS[name]
    n = len(elems[0])
    out = [np.empty(n) for _ in elems]
    acc = None
    for i in range(n - 1, -1, -1) if reverse else range(n):
        opens = (i == n - 1 or starts[i + 1]) if reverse else starts[i]
        if opens:
            acc = None
        e = tuple(float(x[i]) for x in elems)
        before = ident if acc is None else acc
        acc = e if acc is None else op(acc, e)
        for o, v in zip(out, before if exclusive else acc):
            o[i] = v
    return out


def draw(name, n, rng):
    if name == "add":
        return [rng.uniform(0, 1, n)]
    return [rng.uniform(0.5, 1.0, n), rng.normal(size=n)]


def starts_of(lengths):
    s = np.zeros(sum(lengths), bool)
    s[np.cumsum([0, *lengths[:-1]])] = True
    return s


def close(out, ref, what=""):
    for o, r in zip(out, ref):
        np.testing.assert_allclose(np.asarray(o), r, rtol=RTOL, atol=1e-14, err_msg=what)


# --------------------------------------------------------- against the loop
@pytest.mark.parametrize(
    ("method", "name"),
    [("tiled", "linear_recurrence"), ("generic", "add"), ("reference", "linear_recurrence")],
)
def test_every_direction_matches_the_loop(method, name):
    rng = np.random.default_rng(0)
    starts = rng.random(2000) < 0.01
    elems = draw(name, 2000, rng)
    m = getattr(pp, name)
    for reverse in (False, True):
        for exclusive in (False, True):
            kw = dict(reverse=reverse, exclusive=exclusive)
            out = pp.associative_scan(m, elems, reset=starts, method=method, **kw)
            close(out, loop(name, elems, starts, **kw), f"{method} {kw}")


def test_plain_callable_on_a_pytree():
    rng = np.random.default_rng(1)
    starts = starts_of([3, 1, 7, 2])
    a, b = draw("linear_recurrence", 13, rng)

    def fn(x, y):
        return {"a": x["a"] * y["a"], "b": y["a"] * x["b"] + y["b"]}

    out = pp.associative_scan(fn, {"a": a, "b": b}, reset=starts, reverse=True)
    close([out["a"], out["b"]], loop("linear_recurrence", [a, b], starts, reverse=True))


def test_one_segmentation_per_row_along_another_axis():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, (40, 3))
    starts = rng.random((40, 3)) < 0.2
    out = pp.associative_scan(pp.add, x, axis=0, reset=starts, method="tiled")
    for j in range(3):
        close([out[:, j]], loop("add", [x[:, j]], starts[:, j]))
    # a (n,) reset lines up with the axis, whatever the rank
    out = pp.associative_scan(pp.add, x, axis=0, reset=starts[:, 0], method="tiled")
    close([out[:, 2]], loop("add", [x[:, 2]], starts[:, 0]))


def test_a_segment_start_isolates_nan_and_inf_exactly():
    x = np.array([np.inf, np.nan, 1.0, 2.0, 3.0])
    starts = np.array([True, False, True, False, False])
    for method in ("tiled", "generic", "reference"):
        out = pp.associative_scan(pp.add, x, reset=starts, method=method)
        np.testing.assert_array_equal(out[2:], [1.0, 3.0, 6.0], err_msg=method)


def test_torch_autograd_matches_each_segment_alone():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    lengths = [4, 1, 6]
    a0, b0 = draw("linear_recurrence", 11, rng)
    a = torch.tensor(a0, requires_grad=True)
    b = torch.tensor(b0, requires_grad=True)
    reset = torch.tensor(starts_of(lengths))
    _, h = pp.associative_scan(pp.linear_recurrence, (a, b), reset=reset)
    w = torch.tensor(rng.normal(size=11))
    (h * w).sum().backward()
    ga, gb, s = [], [], 0
    for n in lengths:
        aa = torch.tensor(a0[s : s + n], requires_grad=True)
        bb = torch.tensor(b0[s : s + n], requires_grad=True)
        _, hh = pp.associative_scan(pp.linear_recurrence, (aa, bb))
        (hh * w[s : s + n]).sum().backward()
        # (a length-1 segment's h does not involve a: no gradient reaches it)
        ga.append(np.zeros(n) if aa.grad is None else aa.grad.numpy())
        gb.append(bb.grad.numpy())
        s += n
    close([a.grad.numpy(), b.grad.numpy()], [np.concatenate(ga), np.concatenate(gb)])


def test_dask_segments_span_chunks():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(4)
    elems = draw("linear_recurrence", 23, rng)
    starts = starts_of([2, 9, 1, 11])  # segments across the chunk edges 5 and 12
    lazy = [da.from_array(e, chunks=((5, 7, 11),)) for e in elems]
    for reverse in (False, True):
        for exclusive in (False, True):
            kw = dict(reverse=reverse, exclusive=exclusive)
            out = pp.associative_scan(pp.linear_recurrence, lazy, reset=starts, **kw)
            assert all(o.chunks == ((5, 7, 11),) for o in out)
            got = [o.compute(scheduler="sync") for o in out]
            close(got, loop("linear_recurrence", elems, starts, **kw), str(kw))


# ------------------------------------------------------------------- errors
def test_bad_reset_is_refused_in_one_line():
    x = np.ones(5)
    with pytest.raises(TypeError, match=r"reset has dtype int64; it must be bool"):
        pp.associative_scan(pp.add, x, reset=np.array([1, 0, 0, 1, 0]))
    with pytest.raises(ValueError, match=r"reset has shape \(4,\); expected \(5,\)"):
        pp.associative_scan(pp.add, x, reset=np.zeros(4, bool))
    with pytest.raises(ValueError, match=r"reset has shape \(2, 3\)"):
        pp.associative_scan(pp.add, np.ones((3, 3)), axis=1, reset=np.zeros((2, 3), bool))


# ------------------------------------------------------ laws, by hypothesis
def _flags(data, n):
    return data.draw(hnp.arrays(np.bool_, n), label="flags")


BUILTINS = [
    pp.add,
    pp.mul,
    pp.maximum,
    pp.minimum,
    pp.logaddexp,
    pp.linear_recurrence,
    pp.matmul2x2,
]
INT_BUILTINS = [pp.add, pp.mul, pp.maximum, pp.minimum]


@pytest.mark.parametrize("m", BUILTINS, ids=lambda m: m.name)
@given(data=st.data())
def test_segmented_builtins_pass_the_monoid_audits(m, data):
    # the audits plain monoids pass (tests/test_audit.py), on (flag, element) samples
    dtypes = [np.float64, np.float32] + ([np.int64, np.int32] if m in INT_BUILTINS else [])
    dtype = data.draw(st.sampled_from(dtypes), label="dtype")
    elems = data.draw(elements(m, dtype), label="elems")
    flags = data.draw(hnp.arrays(np.bool_, len(elems[0])), label="flags").astype(dtype)
    seg = segmented(m)
    assert seg.arity == m.arity + 1
    report = check_associative(seg, (flags, *elems), trials=50)
    assert report.ok, str(report)
    assert check_identity(seg, (flags, *elems)).ok


@pytest.mark.parametrize("m", BUILTINS, ids=lambda m: m.name)
@given(data=st.data())
def test_segmented_law_holds_on_hypothesis_triples(m, data):
    dtype = data.draw(st.sampled_from([np.float64, np.float32]), label="dtype")
    abc = data.draw(triples(m, dtype, extra_shape=(2,)), label="abc")
    flags = data.draw(hnp.arrays(np.bool_, (3, 1, 2)), label="flags").astype(dtype)
    a, b, c = ((f, *e) for f, e in zip(flags, abc))
    assert_associative(segmented(m), a, b, c)


@given(st.data())
def test_segmented_callable_is_associative(data):
    n = data.draw(st.integers(3, 12))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a, b = draw("linear_recurrence", n, rng)
    samples = (_flags(data, n), {"a": a, "b": b})

    def fn(x, y):
        return {"a": x["a"] * y["a"], "b": y["a"] * x["b"] + y["b"]}

    assert check_associative(segmented(fn), samples, trials=60).ok


def test_a_broken_inner_combine_is_caught_through_the_transformer():
    rng = np.random.default_rng(5)
    samples = (np.zeros(8), rng.uniform(1, 2, 8))  # no starts: the inner law shows
    assert not check_associative(segmented(lambda x, y: x - y), samples).ok


@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    method=st.sampled_from(["tiled", "generic", "reference", "dask"]),
    reverse=st.booleans(),
    exclusive=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_segmented_scan_equals_each_segment_alone(lengths, method, reverse, exclusive, seed):
    rng = np.random.default_rng(seed)
    a, b = draw("linear_recurrence", sum(lengths), rng)
    kw = dict(reverse=reverse, exclusive=exclusive)
    elems = [a, b]
    if method == "dask":
        da = pytest.importorskip("dask.array")
        elems = [da.from_array(x, chunks=4) for x in elems]
    out = pp.associative_scan(
        pp.linear_recurrence,
        elems,
        reset=starts_of(lengths),
        method="auto" if method == "dask" else method,
        **kw,
    )
    if method == "dask":
        out = [o.compute(scheduler="sync") for o in out]
    parts, s = [], 0
    for n in lengths:
        parts.append(
            pp.associative_scan(
                pp.linear_recurrence, [a[s : s + n], b[s : s + n]], method="reference", **kw
            )
        )
        s += n
    close(out, [np.concatenate([p[i] for p in parts]) for i in range(2)], f"{lengths} {kw}")


# ------------------------------------------------------------- CUDA (sim)
@pytest.mark.slow
@pytest.mark.parametrize("name", ["add", "linear_recurrence"])
def test_cuda_matches_the_loop(name):
    cuda = pytest.importorskip("numba.cuda")
    from propopt.associativity.scan import _cuda

    rng = np.random.default_rng(6)
    starts = starts_of([5, 1, 17, 3, 12])  # 38 elements: several tiles of 8 x 2
    elems = draw(name, 38, rng)
    m = getattr(pp, name)
    with _cuda.tiles(threads=8, items=2):
        for reverse in (False, True):
            for exclusive in (False, True):
                kw = dict(reverse=reverse, exclusive=exclusive)
                out = pp.associative_scan(m, [cuda.to_device(e) for e in elems], reset=starts, **kw)
                close([o.copy_to_host() for o in out], loop(name, elems, starts, **kw), str(kw))


@pytest.mark.slow
def test_cuda_exclusive_along_axis_0_of_a_2d_array():
    # segments along axis 0 of a (n, 3) device array: the identity is a (1, 3) row
    cuda = pytest.importorskip("numba.cuda")
    from propopt.associativity.scan import _cuda

    rng = np.random.default_rng(8)
    x = rng.uniform(0, 1, (21, 3))
    starts = starts_of([4, 9, 1, 7])
    starts[0] = False  # no flag on the first element: still nothing before it
    with _cuda.tiles(threads=4, items=2):
        for reverse in (False, True):
            out = pp.associative_scan(
                pp.add, cuda.to_device(x), axis=0, reset=starts, exclusive=True, reverse=reverse
            )
            for j in range(3):
                ref = loop("add", [x[:, j]], starts, reverse=reverse, exclusive=True)[0]
                np.testing.assert_allclose(out.copy_to_host()[:, j], ref, rtol=RTOL, atol=1e-14)


@pytest.mark.slow
@settings(max_examples=8)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    reverse=st.booleans(),
    exclusive=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_cuda_segmented_scan_equals_each_segment_alone(lengths, reverse, exclusive, seed):
    cuda = pytest.importorskip("numba.cuda")
    from propopt.associativity.scan import _cuda

    rng = np.random.default_rng(seed)
    a, b = draw("linear_recurrence", sum(lengths), rng)
    with _cuda.tiles(threads=4, items=2):
        out = pp.associative_scan(
            pp.linear_recurrence,
            [cuda.to_device(a), cuda.to_device(b)],
            reset=starts_of(lengths),
            reverse=reverse,
            exclusive=exclusive,
        )
    parts, s = [], 0
    for n in lengths:
        parts.append(
            pp.associative_scan(
                pp.linear_recurrence,
                [a[s : s + n], b[s : s + n]],
                method="reference",
                reverse=reverse,
                exclusive=exclusive,
            )
        )
        s += n
    close([o.copy_to_host() for o in out], [np.concatenate([p[i] for p in parts]) for i in (0, 1)])
