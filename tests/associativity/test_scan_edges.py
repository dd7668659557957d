"""Scans at the edges: identity= with a monoid, masked arrays, ndarray subclasses,
combines numba cannot compile.  Each result is compared with a plain float64 loop."""

import numpy as np
import pytest

import propopt as pp

METHODS = ["tiled", "reference", "generic"]


def loop_sum(values, skip=()):
    """Inclusive running sum in float64, leaving out the indices in ``skip``."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        if i not in skip:
            total += float(v)
        out.append(total)
    return out


@pytest.mark.parametrize("method", METHODS)
def test_monoid_identity_must_be_its_own(method):
    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises(
        ValueError, match=r"identity=10.0 is not the identity of monoid 'add' \(0.0\)"
    ):
        pp.associative_scan(pp.add, x, exclusive=True, identity=10.0, method=method)
    out = pp.associative_scan(pp.add, x, exclusive=True, identity=0.0, method=method)
    assert out.tolist() == [0.0, 1.0, 3.0]


def test_monoid_identity_compared_in_the_elements_dtype():
    z = np.array([1 + 1j, 2 - 1j, 3j])
    with pytest.raises(ValueError, match=r"identity=1j is not the identity of monoid 'add'"):
        pp.associative_scan(pp.add, z, exclusive=True, identity=1j)
    out = pp.associative_scan(pp.add, z, exclusive=True, identity=0j)
    assert out.tolist() == [0j, 1 + 1j, 3 + 0j]


@pytest.mark.parametrize("method", METHODS)
def test_monoid_identity_pytree_and_segments(method):
    a, b = np.full(4, 0.5), np.ones(4)
    _, h = pp.associative_scan(
        pp.linear_recurrence, (a, b), exclusive=True, identity=(1.0, 0.0), method=method
    )
    assert h.tolist() == [0.0, 1.0, 1.5, 1.75]
    with pytest.raises(ValueError, match="not the identity of monoid 'linear_recurrence'"):
        pp.associative_scan(
            pp.linear_recurrence, (a, b), exclusive=True, identity=(1.0, 2.0), method=method
        )
    reset = np.array([True, False, True, False])
    with pytest.raises(ValueError, match="not the identity"):
        pp.associative_scan(pp.add, b, reset=reset, exclusive=True, identity=5.0, method=method)


@pytest.mark.parametrize("method", METHODS)
def test_masked_elements_count_as_identity(method):
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    x = np.ma.array(values, mask=[0, 1, 0, 0, 1])
    out = pp.associative_scan(pp.add, x, method=method)
    assert isinstance(out, np.ma.MaskedArray)
    assert out.mask.tolist() == [False, True, False, False, True]
    expect = loop_sum(values, skip={1, 4})
    assert [out.data[i] for i in (0, 2, 3)] == [expect[i] for i in (0, 2, 3)]
    # the same as NumPy's own masked cumsum
    np.testing.assert_array_equal(out.filled(-1), np.cumsum(x).filled(-1))


@pytest.mark.parametrize("method", METHODS)
def test_masked_pytree_masks_whole_elements(method):
    a = np.ma.array([0.5, 0.5, 0.5], mask=[0, 1, 0])
    b = np.ma.array([1.0, 1.0, 1.0])
    _, h = pp.associative_scan(pp.linear_recurrence, (a, b), method=method)
    # element 1 is the identity (a=1, b=0): h = [1, --, 0.5 * 1 + 1]
    assert h.mask.tolist() == [False, True, False]
    assert h.data[0] == 1.0 and h.data[2] == 1.5


def test_masked_with_plain_callable_needs_identity():
    x = np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    with pytest.raises(ValueError, match=r"masked array.*needs identity="):
        pp.associative_scan(lambda p, q: p + q, x)
    out = pp.associative_scan(lambda p, q: p + q, x, identity=0.0)
    assert out.mask.tolist() == [False, True, False] and out.data[2] == 4.0


def test_masked_reset_refused():
    with pytest.raises(TypeError, match=r"reset is a masked array.*filled"):
        pp.associative_scan(pp.add, np.ones(3), reset=np.ma.array([True, False, False]))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.parametrize("method", METHODS)
def test_matrix_scans_as_plain_ndarray(method):
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    out = pp.associative_scan(pp.add, m, method=method)
    assert type(out) is np.ndarray and out.tolist() == [[1.0, 2.0], [4.0, 6.0]]
    # a plain combine sees elementwise arrays, not matrix products
    plain = "auto" if method == "tiled" else method
    prod = pp.associative_scan(lambda p, q: p * q, m, method=plain)
    assert type(prod) is np.ndarray and prod.tolist() == [[1.0, 2.0], [3.0, 8.0]]


def test_combine_returning_too_few_values():
    with pytest.raises(TypeError, match=r"returned 1 value\(s\) but the identity has 2"):
        pp.Monoid(lambda a1, a2, b1, b2: a1 + b1, identity=(0.0, 0.0), name="short")


def test_combine_numba_cannot_type_is_one_line():
    def branchy(a, b):  # runs in Python, but numba cannot unify int and tuple returns
        if a > 1e300:
            return (a, b)
        return a + b

    m = pp.Monoid(branchy, identity=0.0, name="branchy", kinds="f")
    with pytest.raises(TypeError) as err:
        pp.associative_scan(m, np.ones(5), method="tiled")
    msg = str(err.value)
    assert "\n" not in msg and "combine 'branchy' could not be compiled by numba" in msg


def test_torch_bool_message_says_how_to_cast():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"elems\.to\(torch\.float64\)"):
        pp.associative_scan(pp.add, torch.tensor([True, False]))
    with pytest.raises(TypeError, match=r"elems\.astype\(np\.float64\)"):
        pp.associative_scan(pp.add, np.array([True, False]))


def test_segmented_gradients_stay_in_their_segment():
    torch = pytest.importorskip("torch")
    a = torch.full((6,), 0.5, dtype=torch.float64)
    a[1] = float("nan")  # in the first segment
    a.requires_grad_(True)
    b = torch.ones(6, dtype=torch.float64, requires_grad=True)
    reset = np.array([True, False, False, True, False, False])
    _, h = pp.associative_scan(pp.linear_recurrence, (a, b), reset=reset)
    h[3:].sum().backward()
    # the second segment alone: h = [1, 1.5, 1.75]; d/da_3 = 0 (a start ignores a)
    assert h[3:].tolist() == [1.0, 1.5, 1.75]
    assert a.grad[3:].tolist() == [0.0, 1.5, 1.5]
    assert b.grad[3:].tolist() == [1.75, 1.5, 1.0]


@pytest.mark.parametrize("method", METHODS)
def test_exclusive_segments_never_combine_the_identity(method):
    # the element starting segment 1 holds a NaN coefficient: out_2 is b_1 itself
    # (the plain recurrence from that start), not (1, 0) . (nan, b_1) = nan
    a = np.ones(6)
    a[1] = np.nan
    b = np.arange(1.0, 7.0)
    reset = np.array([True, True, False, False, False, False])
    _, h = pp.associative_scan(
        pp.linear_recurrence, (a, b), exclusive=True, reset=reset, method=method
    )
    assert h.tolist() == [0.0, 0.0, 2.0, 5.0, 9.0, 14.0]


def test_read_only_inputs_reuse_the_compiled_kernels():
    """A Dask chunk or a pandas column is read-only: it runs the kernels already
    compiled for writeable arrays of its dtype (propopt.arrays.frozen)."""
    from propopt.associativity import _cpu

    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 1.0, 3000)
    b = rng.normal(size=3000)
    want = pp.associative_scan(pp.linear_recurrence, (a, b))
    mod = _cpu.kernels(pp.linear_recurrence, np.dtype(np.float64), False, False)
    before = {name: len(getattr(mod, name).signatures) for name in ("_block", "scan_1d")}
    ra, rb = a.copy(), b.copy()
    ra.flags.writeable = rb.flags.writeable = False
    got = pp.associative_scan(pp.linear_recurrence, (ra, rb))
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert {name: len(getattr(mod, name).signatures) for name in before} == before


def _add_all(a, b):
    return {k: a[k] + b[k] for k in a}


def test_dict_keys_that_cannot_be_ordered_name_elems():
    # jax refuses such keys too (ValueError while sorting dict keys)
    x = np.arange(4.0)
    with pytest.raises(ValueError, match=r"elems is a dict with keys .* one type") as info:
        pp.associative_scan(_add_all, {1: x, "a": x})
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"out is a dict"):
        pp.associative_scan(_add_all, {"1": x, "a": x}, out={1: np.empty(4), "a": np.empty(4)})
    got = pp.associative_scan(_add_all, {2: x, 1: 2 * x})  # one key type: sorted, as jax does
    assert set(got) == {1, 2}
    np.testing.assert_array_equal(got[1], [0.0, 2.0, 6.0, 12.0])


def test_law_checks_name_their_own_argument_for_keys_that_cannot_be_ordered():
    from propopt.associativity.laws import check_associative, check_triple

    x = np.arange(4.0)
    bad = {1: x, "a": x}
    with pytest.raises(ValueError, match=r"^samples is a dict with keys .* one type"):
        check_associative(_add_all, bad)
    with pytest.raises(ValueError, match=r"^a is a dict with keys .* one type"):
        check_triple(_add_all, bad, bad, bad)
