"""Differential fuzzing: one input, every backend of a verb, one answer.

For each public verb hypothesis draws inputs across dtypes (float16,
bfloat16 from ml_dtypes and torch, float32/64, integers, bool), shapes
(empty, length 1, 2-D), layouts (strided, negative-stride, Fortran-order,
big-endian) and values (NaN and inf, magnitudes from 1e-300 to 1e300), runs
them through every backend and compares each result with a plain float64
loop written here, sharing no code with the library; or it requires every
backend to raise the same error.  All of it runs under ``-m slow`` (.ci/run
runs it after the README's command): a bounded profile and a long one.  The
default set keeps ``test_every_backend_is_covered``; each backend's own tests
there compare it with a float64 reference.

``COVERED`` lists the (verb, backend) pairs; ``test_every_backend_is_covered``
fails when a verb gains a backend that is not in it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import propopt as pp

# NaN and inf inputs raise NumPy's RuntimeWarnings in the references and the
# NumPy paths alike, as they do in NumPy itself; the answers are what is tested
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")
da = pytest.importorskip("dask.array")

FAST = settings(max_examples=60, suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=400, suppress_health_check=list(HealthCheck))

SCAN_BACKENDS = ("reference", "generic", "tiled", "dask")  # "dask": tiled, on dask arrays
PAIR_METHODS = ("halved", "full", "untiled", "reference")
COVERED: dict[str, tuple[str, ...]] = {
    "associative_scan": SCAN_BACKENDS,
    "pairwise_sum": PAIR_METHODS,
    "direct_gravity": PAIR_METHODS,
}


# ------------------------------------------------------------------ inputs
DTYPES = {
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "bool": np.dtype(bool),
}
TORCH_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
FLOATS = ("float16", "bfloat16", "float32", "float64")
LAYOUTS = ("contiguous", "strided", "reversed", "fortran", "big-endian")


def unit(dtype: np.dtype) -> float:
    """Unit roundoff of the arithmetic a float dtype is combined in (halves: float32)."""
    if dtype.itemsize <= 4:
        return 2.0**-24
    return 2.0**-53


def out_unit(dtype: np.dtype) -> float:
    return {2: 2.0**-8 if dtype == DTYPES["bfloat16"] else 2.0**-11, 4: 2.0**-24}.get(
        dtype.itemsize, 2.0**-53
    )


def lay_out(values: np.ndarray, dtype: np.dtype, layout: str) -> np.ndarray:
    """``values`` (float64 or int) in ``dtype``, laid out as asked (same logical values)."""
    v = values.astype(dtype)
    if layout == "strided":
        buf = np.zeros((2,) + v.shape, dtype)
        buf[0] = v
        return np.moveaxis(buf, 0, -1)[..., 0]
    if layout == "reversed":
        return v[::-1].copy()[::-1]
    if layout == "fortran":
        return np.asfortranarray(v)
    if layout == "big-endian" and dtype.kind in "iuf" and dtype.byteorder != "|":
        return v.astype(dtype.newbyteorder(">"))
    return v


@st.composite
def floats_wide(draw, n: int, limit: float, specials: bool) -> list[float]:
    """Finite values from 1e-300 up to ``limit`` in size, with NaN and inf sometimes."""
    out = []
    top = math.log10(limit)
    for _ in range(n):
        pick = draw(st.integers(0, 19))
        if specials and pick == 0:
            out.append(draw(st.sampled_from([math.nan, math.inf, -math.inf])))
        elif pick < 4:
            out.append(draw(st.sampled_from([0.0, -0.0, 1.0, -1.0])))
        else:
            mag = draw(st.floats(-300.0, top))
            sign = draw(st.sampled_from([1.0, -1.0]))
            out.append(sign * draw(st.floats(1.0, 9.99)) * 10.0**mag)
    return out


@st.composite
def exact_values(draw, dtype: np.dtype, n: int) -> np.ndarray:
    """``n`` bools or integers over the whole range of ``dtype``."""
    if dtype.kind == "b":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    info = np.iinfo(dtype)
    ints = draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=n, max_size=n))
    return np.array(ints, dtype=dtype)


# ------------------------------------------------------- float64 reference
def combine64(name: str, a, b):
    """The monoids' laws in plain Python floats (NaN-propagating max/min, as documented)."""
    if name == "add":
        return a + b
    if name == "mul":
        return a * b
    if name == "maximum":
        return a if (a >= b or a != a) else b
    if name == "minimum":
        return a if (a <= b or a != a) else b
    if name == "logaddexp":
        return float(np.logaddexp(a, b))
    if name == "linear_recurrence":
        return (a[0] * b[0], b[0] * a[1] + b[1])
    raise AssertionError(name)


IDENTITY64 = {
    "add": 0.0,
    "mul": 1.0,
    "maximum": -math.inf,
    "minimum": math.inf,
    "logaddexp": -math.inf,
    "linear_recurrence": (1.0, 0.0),
}


def scan64(name, elems, reverse, exclusive, reset):
    """The scan as the docstring defines it, one element at a time."""
    n = len(elems)
    ident = IDENTITY64[name]
    out = [None] * n
    starts = [False] * n if reset is None else list(reset)
    order = range(n - 1, -1, -1) if reverse else range(n)
    acc = None  # out_i = e_first . ... . e_i: the first element is not combined with e
    for i in order:
        restart = starts[i] if not reverse else (i + 1 == n or starts[i + 1])
        if restart:
            acc = None
        if exclusive:
            out[i] = ident if acc is None else acc
        acc = elems[i] if acc is None else combine64(name, acc, elems[i])
        if not exclusive:
            out[i] = acc
    return out


def exact_int_scan(name, elems, dtype, reverse, exclusive, reset):
    """Integer scans wrap on overflow and keep the dtype: exact, with Python ints."""
    bits = dtype.itemsize * 8
    lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)

    def wrap(r):
        r %= 1 << bits
        return r - (1 << bits) if r > hi else r

    def comb(a, b):
        if name == "add":
            return wrap(a + b)
        if name == "mul":
            return wrap(a * b)
        if name == "maximum":
            return max(a, b)
        if name == "minimum":
            return min(a, b)
        return (wrap(a[0] * b[0]), wrap(b[0] * a[1] + b[1]))  # linear_recurrence

    ident = {"add": 0, "mul": 1, "maximum": lo, "minimum": hi, "linear_recurrence": (1, 0)}
    n = len(elems)
    out = [0] * n
    starts = [False] * n if reset is None else list(reset)
    order = range(n - 1, -1, -1) if reverse else range(n)
    acc = ident[name]
    for i in order:
        restart = starts[i] if not reverse else (i + 1 == n or starts[i + 1])
        if restart:
            acc = ident[name]
        if exclusive:
            out[i], acc = acc, comb(acc, elems[i])
        else:
            acc = comb(acc, elems[i])
            out[i] = acc
    return out


# ------------------------------------------------------------------- scans
MONOIDS = ("add", "mul", "maximum", "minimum", "logaddexp", "linear_recurrence")


@st.composite
def scan_cases(draw):
    name = draw(st.sampled_from(MONOIDS))
    dname = draw(st.sampled_from(sorted(DTYPES)))
    dtype = DTYPES[dname]
    lib = draw(st.sampled_from(["numpy", "numpy", "torch"]))
    n = draw(st.sampled_from([0, 1, 2, 3, 7, 16, 33]))
    layout = draw(st.sampled_from(LAYOUTS))
    if dname in FLOATS:
        if name in ("mul", "linear_recurrence"):  # products stay in range: |x| in [1/2, 2]
            vals = [draw(st.floats(0.5, 2.0)) * draw(st.sampled_from([1, -1])) for _ in range(n)]
        elif name == "logaddexp":
            vals = [draw(st.floats(-50.0, 50.0)) for _ in range(n)]
        else:
            limit = 1.0 if dtype.itemsize == 2 else float(np.finfo(dtype).max) / (4 * max(n, 1))
            vals = draw(floats_wide(n, limit, specials=True))
        if draw(st.integers(0, 5)) == 0 and n:
            # an inf among a recurrence's coefficients makes inf - inf depend on the
            # grouping (IEEE arithmetic is not associative there): NaN only
            bad = [math.nan] if name == "linear_recurrence" else [math.nan, math.inf]
            vals[draw(st.integers(0, n - 1))] = draw(st.sampled_from(bad))
        values = np.array(vals, dtype=np.float64)
    else:
        values = draw(exact_values(dtype, n))
    reverse = draw(st.booleans())
    exclusive = draw(st.booleans())
    reset = None
    if n and draw(st.booleans()):
        reset = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    chunks = draw(st.integers(1, 8))
    return name, dname, lib, values, layout, reverse, exclusive, reset, chunks


def _run_scan(backend, m, elems, kw, chunks):
    if backend == "dask":
        leaves = elems if isinstance(elems, tuple) else (elems,)
        if any(not isinstance(x, np.ndarray) for x in leaves):
            return None
        dl = tuple(da.from_array(x, chunks=chunks) for x in leaves)
        arg = dl if isinstance(elems, tuple) else dl[0]
        res = pp.associative_scan(m, arg, method="tiled", **kw)
        res = tuple(r.compute() for r in res) if isinstance(res, tuple) else res.compute()
        return res
    return pp.associative_scan(m, elems, method=backend, **kw)


def _as64(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach()
        x = x.float() if x.dtype == torch.bfloat16 else x
        return x.numpy().astype(np.float64)
    return np.asarray(x).astype(np.float64)


def check_scan_case(case) -> None:
    name, dname, lib, values, layout, reverse, exclusive, reset, chunks = case
    dtype = DTYPES[dname]
    m = getattr(pp, name)
    if name == "linear_recurrence":
        raw = (values, values[::-1].copy())
    else:
        raw = (values,)
    if lib == "torch":
        leaves = tuple(
            torch.from_numpy(np.ascontiguousarray(v)).to(TORCH_DTYPES[dname]) for v in raw
        )
    else:
        leaves = tuple(lay_out(v, dtype, layout) for v in raw)
    elems = leaves if name == "linear_recurrence" else leaves[0]
    kw = dict(reverse=reverse, exclusive=exclusive, reset=reset)

    outcomes = {}
    for backend in SCAN_BACKENDS:
        try:
            res = _run_scan(backend, m, elems, kw, chunks)
        except (TypeError, ValueError) as err:
            assert "\n" not in str(err), f"{backend}: a many-line error: {err}"
            outcomes[backend] = type(err)
            continue
        if res is None:
            continue
        outcomes[backend] = res
    kinds = {b: (o if isinstance(o, type) else "ok") for b, o in outcomes.items()}
    assert len(set(kinds.values())) == 1, f"backends disagree on raising: {kinds}"
    if all(isinstance(o, type) for o in outcomes.values()):
        return

    # the same logical values the library received, in float64 (exact ints)
    if lib == "torch":
        given = [_as64(x) if dname in FLOATS else x.numpy() for x in leaves]
    else:
        given = [v.astype(dtype).astype(np.float64) if dname in FLOATS else v for v in raw]
    n = len(values)
    for backend, res in outcomes.items():
        res = res if isinstance(res, tuple) else (res,)
        assert all(len(r) == n for r in res)
        if dtype.kind in "iu":
            ints = [[int(v) for v in g] for g in given]
            elems_i = list(zip(*ints)) if len(ints) > 1 else ints[0]
            ref = exact_int_scan(name, elems_i, dtype, reverse, exclusive, reset)
            got = [
                [int(v) for v in np.asarray(r.numpy() if hasattr(r, "numpy") else r)] for r in res
            ]
            got = list(zip(*got)) if len(got) > 1 else got[0]
            assert got == ref, f"{backend}: {got} != {ref}"
            continue
        elems64 = list(zip(*[g.tolist() for g in given])) if len(given) > 1 else given[0].tolist()
        ref = scan64(name, elems64, reverse, exclusive, reset)
        refs = (
            [np.array([r[k] for r in ref]) for k in range(2)]
            if len(given) > 1
            else [np.array(ref, dtype=np.float64)]
        )
        if name in ("add", "linear_recurrence", "mul"):
            mag_in = [np.abs(g).tolist() for g in given]
            e_abs = list(zip(*mag_in)) if len(given) > 1 else mag_in[0]
            if name == "linear_recurrence":
                e_abs = [(a, b) for a, b in e_abs]
            mag = scan64(name, e_abs, reverse, exclusive, reset)
            mags = (
                [np.array([r[k] for r in mag]) for k in range(2)]
                if len(given) > 1
                else [np.array(mag)]
            )
        else:
            finite_in = np.abs(given[0][np.isfinite(given[0])])
            mags = [np.abs(r) + finite_in.max(initial=0.0) for r in refs]
        for got, want, mg in zip(res, refs, mags):
            got = _as64(got)
            with np.errstate(invalid="ignore", over="ignore"):
                want_out = want.astype(dtype).astype(np.float64) if dtype.itemsize == 2 else want
            nan = np.isnan(want_out)
            assert np.array_equal(np.isnan(got), nan), f"{backend}: NaN at {np.isnan(got)} != {nan}"
            inf = np.isinf(want_out)
            assert np.array_equal(got[inf], want_out[inf]), f"{backend}: inf {got} != {want_out}"
            fin = ~nan & ~inf
            tol = 4 * (n + 2) * unit(dtype) * mg[fin] + out_unit(dtype) * np.abs(want[fin])
            err = np.abs(got[fin] - want[fin])
            assert np.all(err <= tol + 1e-300), f"{backend}: {got} vs {want} (err {err}, tol {tol})"


@pytest.mark.slow
@FAST
@given(scan_cases())
def test_scan_backends_agree(case):
    check_scan_case(case)


@pytest.mark.slow
@LONG
@given(scan_cases())
def test_scan_backends_agree_long(case):
    check_scan_case(case)


# ------------------------------------------------------------------- top-k
TOPK_BACKENDS = ("select", "reference", "summary", "dask")
COVERED["topk"] = TOPK_BACKENDS


def topk64(values, k, largest, nan):
    """Indices of the k best by (value, index) in Python; NaN ignored or ranked largest."""
    idx = [i for i, v in enumerate(values) if not (nan == "ignore" and v != v)]

    def key(i):
        v = values[i]
        isnan = v != v
        if largest:
            return (0 if isnan else 1, -v if not isnan else 0, i)
        return (1 if isnan else 0, v if not isnan else 0, i)

    return sorted(idx, key=key)[:k]


@st.composite
def topk_cases(draw):
    dname = draw(st.sampled_from(sorted(DTYPES)))
    dtype = DTYPES[dname]
    lib = draw(st.sampled_from(["numpy", "numpy", "torch"]))
    n = draw(st.sampled_from([0, 1, 2, 5, 16, 40]))
    layout = draw(st.sampled_from(LAYOUTS))
    if dname in FLOATS:
        limit = 60000.0 if dname == "float16" else float(np.finfo(np.float32).max) / 2
        if dname == "float64":
            limit = 1e300
        vals = draw(floats_wide(n, limit, specials=True))
        if n and draw(st.booleans()):  # ties
            vals[draw(st.integers(0, n - 1))] = vals[0]
        values = np.array(vals, dtype=np.float64)
    else:
        values = draw(exact_values(dtype, n))
    k = draw(st.integers(0, n + 2))
    largest = draw(st.booleans())
    nan = draw(st.sampled_from(["ignore", "largest"]))
    chunks = draw(st.integers(1, 7))
    return dname, lib, values, layout, k, largest, nan, chunks


def _run_topk(backend, x, k, largest, nan, chunks):
    if backend in ("select", "reference"):
        v, i = pp.topk(x, k, largest=largest, nan=nan, method=backend)
        return _as64(v), np.asarray(i.numpy() if hasattr(i, "numpy") else i)
    if not isinstance(x, np.ndarray):
        return None
    if backend == "summary":
        s = pp.TopK.empty(k, x.dtype, largest, nan=nan)
        for lo in range(0, max(len(x), 1), chunks):
            s.update(x[lo : lo + chunks])
        v, i = s.result()
        return _as64(v), i
    from propopt_case_studies.streaming_topk.distributed import top_k_dask_array

    v, i = top_k_dask_array(da.from_array(x, chunks=chunks), k, largest, nan=nan)
    return _as64(v), i


def check_topk_case(case) -> None:
    dname, lib, values, layout, k, largest, nan, chunks = case
    dtype = DTYPES[dname]
    if lib == "torch":
        x = torch.from_numpy(np.ascontiguousarray(values)).to(TORCH_DTYPES[dname])
        given = _as64(x) if dname in FLOATS else x.numpy()
    else:
        x = lay_out(values, dtype, "contiguous" if layout == "fortran" else layout)
        given = values.astype(dtype).astype(np.float64) if dname in FLOATS else values
    outcomes = {}
    for backend in TOPK_BACKENDS:
        try:
            res = _run_topk(backend, x, k, largest, nan, chunks)
        except (TypeError, ValueError) as err:
            assert "\n" not in str(err), f"{backend}: a many-line error: {err}"
            outcomes[backend] = type(err)
            continue
        if res is not None:
            outcomes[backend] = res
    kinds = {b: (o if isinstance(o, type) else "ok") for b, o in outcomes.items()}
    assert len(set(kinds.values())) == 1, f"backends disagree on raising: {kinds}"
    if all(isinstance(o, type) for o in outcomes.values()):
        return
    vals = given.tolist() if dname in FLOATS else [int(v) for v in given]
    want = topk64(vals, k, largest, nan)
    for backend, (v, i) in outcomes.items():
        assert i.tolist() == want, f"{backend}: ids {i.tolist()} != {want}"
        expect = np.array([vals[j] for j in want], dtype=np.float64)
        assert np.array_equal(v, expect, equal_nan=True), f"{backend}: {v} != {expect}"


@pytest.mark.slow
@FAST
@given(topk_cases())
def test_topk_backends_agree(case):
    check_topk_case(case)


@pytest.mark.slow
@LONG
@given(topk_cases())
def test_topk_backends_agree_long(case):
    check_topk_case(case)


# ------------------------------------------------- pair sums and gravity
def inverse_distance(xi, xj):
    return 1.0 / math.sqrt((xi[0] - xj[0]) ** 2 + (xi[1] - xj[1]) ** 2 + 0.25)


@st.composite
def point_cases(draw):
    n = draw(st.sampled_from([0, 1, 2, 3, 9, 20]))
    dname = draw(st.sampled_from(["float32", "float64", "bfloat16", "float16", "int64"]))
    layout = draw(st.sampled_from(LAYOUTS))
    scale = 10.0 ** draw(st.integers(-150, 150)) if dname == "float64" else 1.0
    pts = np.array(
        [[draw(st.floats(-4.0, 4.0)) for _ in range(3)] for _ in range(n)], dtype=np.float64
    ).reshape(n, 3)
    if dname == "int64":
        pts = np.round(pts * 3)
    if n >= 2 and draw(st.booleans()):  # a near-coincident pair
        pts[1] = pts[0] + draw(st.sampled_from([0.0, 1e-9, 1e-6]))
    mass = np.array([draw(st.floats(0.1, 3.0)) for _ in range(n)])
    eps = draw(st.sampled_from([0.0, 0.05, 0.5]))
    return dname, layout, pts, scale, mass, eps


def _points_in(pts, dname, layout):
    return lay_out(pts, DTYPES.get(dname, np.dtype(dname)), layout)


def check_pairs_case(case) -> None:
    dname, layout, pts, _scale, mass, _eps = case
    X = _points_in(pts, dname, layout)
    P = np.asarray(X).astype(np.float64)
    n = len(P)
    ref = np.array(
        [sum(mass[j] * inverse_distance(P[i], P[j]) for j in range(n) if j != i) for i in range(n)]
    )
    for method in PAIR_METHODS:
        got = pp.pairwise_sum(inverse_distance, X, mass, method=method)
        tol = 1e-5 if np.asarray(got).dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max(initial=0))


def gravity64(P, m, eps):
    """Plummer-softened accelerations and potentials, exactly scaled by a power of two."""
    n = len(P)
    if n == 0:
        return np.zeros((0, 3)), np.zeros(0)
    ext = np.abs(P - P[0]).max()
    s = 2.0 ** math.frexp(ext)[1] if ext > 0 else 1.0
    if eps > 0 and ext == 0:
        s = 2.0 ** math.frexp(eps)[1]
    Q, e = P / s, eps / s
    acc, pot = np.zeros((n, 3)), np.zeros(n)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            d = Q[j] - Q[i]
            r2 = d @ d + e * e
            if r2 == 0.0:
                continue  # coincident bodies without softening exert nothing
            acc[i] += m[j] * d / r2**1.5
            pot[i] -= m[j] / math.sqrt(r2)
    return acc / (s * s), pot / s


def check_gravity_case(case) -> None:
    dname, layout, pts, scale, mass, eps = case
    X = _points_in(pts * scale, dname, layout)
    P = np.asarray(X).astype(np.float64)
    acc_ref, pot_ref = gravity64(P, mass, eps * scale)
    for method in PAIR_METHODS:
        acc, pot = pp.direct_gravity(X, mass, eps=eps * scale, method=method, potential=True)
        assert np.all(np.isfinite(acc)) and np.all(np.isfinite(pot)), f"{method}: {acc}"
        tol = 1e-4 if acc.dtype == np.float32 else 1e-9
        big = np.abs(acc_ref).max(initial=0)
        np.testing.assert_allclose(acc, acc_ref, rtol=tol, atol=tol * big, err_msg=method)
        np.testing.assert_allclose(
            pot, pot_ref, rtol=tol, atol=tol * np.abs(pot_ref).max(initial=0), err_msg=method
        )


@pytest.mark.slow
@FAST
@given(point_cases())
def test_pair_sums_agree(case):
    check_pairs_case(case)


@pytest.mark.slow
@FAST
@given(point_cases())
def test_gravity_agrees(case):
    check_gravity_case(case)


@pytest.mark.slow
@LONG
@given(point_cases())
def test_pairs_and_gravity_agree_long(case):
    check_pairs_case(case)
    check_gravity_case(case)


# ------------------------------------------------------- Mamba and Mamba-2
SSD_METHODS = ("fused", "ops", "reference")
SELECTIVE_METHODS = ("reference", "parallel", "fused")
COVERED["ssd_scan"] = SSD_METHODS
COVERED["selective_scan"] = SELECTIVE_METHODS


@st.composite
def packed_cases(draw):
    L = draw(st.sampled_from([1, 5, 17, 40]))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(L - 1, 1)), max_size=3))))
    cu = [0] + [c for c in cuts if 0 < c < L] + [L]
    seed = draw(st.integers(0, 2**32 - 1))
    bad = []
    for _ in range(draw(st.integers(0, 2))):  # bad tokens: (array, token, value)
        bad.append(
            (
                draw(st.sampled_from(["x", "dt", "B", "C"])),
                draw(st.integers(0, L - 1)),
                draw(st.sampled_from([math.nan, math.inf, -math.inf])),
            )
        )
    A_kind = draw(st.sampled_from(["normal", "normal", "-inf", "huge"]))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    chunk = draw(st.sampled_from([4, 16]))
    return L, cu, seed, bad, A_kind, dtype, chunk


def ssd64(x, dt, A, B, C, D, cu):
    """Mamba-2's recurrence token by token in float64, the state zero at each start."""
    L, H, P = x.shape
    N = B.shape[-1]
    y = np.zeros((L, H, P))
    starts = set(cu[:-1])
    with np.errstate(all="ignore"):
        for h in range(H):
            s = np.zeros((P, N))
            for t in range(L):
                if t in starts:
                    s = np.zeros((P, N))
                decay = (
                    math.exp(dt[t, h] * A[h]) if dt[t, h] * A[h] == dt[t, h] * A[h] else math.nan
                )
                s = decay * s + dt[t, h] * np.outer(x[t, h], B[t, 0])
                y[t, h] = s @ C[t, 0] + D[h] * x[t, h]
    return y


def _same_nonfinite_and_close(got, want, tol, label):
    got = np.asarray(got, dtype=np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{label}: NaN where {want}"
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), f"{label}: inf {got[inf]} != {want[inf]}"
    fin = np.isfinite(want)
    scale = np.abs(want[fin]).max(initial=1.0)
    np.testing.assert_allclose(got[fin], want[fin], rtol=tol, atol=tol * scale, err_msg=label)


def check_ssd_case(case) -> None:
    from propopt_case_studies.mamba import ssd_scan

    L, cu, seed, bad, A_kind, dname, chunk = case
    rng = np.random.default_rng(seed)
    H, P, N = 2, 3, 4
    x = rng.normal(size=(L, H, P))
    dt = rng.uniform(0.05, 1.0, size=(L, H))
    B = rng.normal(size=(L, 1, N))
    C = rng.normal(size=(L, 1, N))
    A = -rng.uniform(0.2, 2.0, size=H)
    if A_kind == "-inf":
        A[0] = -math.inf
    elif A_kind == "huge":
        A[0] = -1e38
    D = rng.normal(size=H)
    arrays = {"x": x, "dt": dt, "B": B, "C": C}
    for name, t, v in bad:
        if name == "dt" and v < 0:
            v = math.nan  # a negative dt is clamped to 0 by dt_limit; -inf is no bad token
        arrays[name][t] = v
    dtype = np.dtype(dname)
    cast = {k: v.astype(dtype) for k, v in arrays.items()}
    want = ssd64(
        *(cast[k].astype(np.float64) for k in ("x", "dt")),
        A.astype(dtype).astype(np.float64),
        cast["B"].astype(np.float64),
        cast["C"].astype(np.float64),
        D.astype(dtype).astype(np.float64),
        cu,
    )
    tol = 2e-3 if dtype == np.float32 else 1e-8
    for method in SSD_METHODS:
        args = [
            cast["x"][None],
            cast["dt"][None],
            A.astype(dtype),
            cast["B"][None],
            cast["C"][None],
        ]
        args.append(D.astype(dtype))
        if method == "ops":
            args = [torch.from_numpy(np.ascontiguousarray(a)) for a in args]
        *args, Dk = args
        out = ssd_scan(*args, chunk_size=chunk, D=Dk, cu_seqlens=np.array(cu), method=method)
        out = out.numpy() if hasattr(out, "numpy") else out
        _same_nonfinite_and_close(out[0], want, tol, f"ssd_scan {method}")


def selective64(u, dt, A, B, C, D, cu):
    """Mamba's recurrence per channel in float64, the state zero at each start."""
    Dm, L = u.shape
    out = np.zeros((Dm, L))
    starts = set(cu[:-1])
    with np.errstate(all="ignore"):
        for d in range(Dm):
            h = np.zeros(A.shape[1])
            for t in range(L):
                if t in starts:
                    h = np.zeros(A.shape[1])
                h = np.exp(dt[d, t] * A[d]) * h + dt[d, t] * B[:, t] * u[d, t]
                out[d, t] = h @ C[:, t] + D[d] * u[d, t]
    return out


def check_selective_case(case) -> None:
    from propopt_case_studies.mamba import selective_scan

    L, cu, seed, bad, A_kind, dname, _chunk = case
    rng = np.random.default_rng(seed)
    Dm, N = 3, 4
    u = rng.normal(size=(Dm, L))
    dt = rng.uniform(0.05, 1.0, size=(Dm, L))
    B = rng.normal(size=(N, L))
    C = rng.normal(size=(N, L))
    A = -rng.uniform(0.2, 2.0, size=(Dm, N))
    if A_kind == "-inf":
        A[0, 0] = -math.inf
    D = rng.normal(size=Dm)
    arrays = {"x": u, "dt": dt, "B": B, "C": C}
    for name, t, v in bad:
        if name == "dt" and v < 0:
            v = math.nan
        arrays[name][..., t] = v
    dtype = np.dtype(dname)
    c = {k: v.astype(dtype) for k, v in arrays.items()}
    Ac, Dc = A.astype(dtype), D.astype(dtype)
    want = selective64(
        *(c[k].astype(np.float64) for k in ("x", "dt")),
        Ac.astype(np.float64),
        c["B"].astype(np.float64),
        c["C"].astype(np.float64),
        Dc.astype(np.float64),
        cu,
    )
    tol = 2e-3 if dtype == np.float32 else 1e-8
    for method in SELECTIVE_METHODS:
        out = selective_scan(
            c["x"][None],
            c["dt"][None],
            Ac,
            c["B"][None],
            c["C"][None],
            D=Dc,
            cu_seqlens=np.array(cu),
            method=method,
        )
        _same_nonfinite_and_close(np.asarray(out)[0], want, tol, f"selective_scan {method}")


@pytest.mark.slow
@FAST
@given(packed_cases())
def test_mamba_scans_agree(case):
    check_ssd_case(case)
    check_selective_case(case)


@pytest.mark.slow
@LONG
@given(packed_cases())
def test_mamba_scans_agree_long(case):
    check_ssd_case(case)
    check_selective_case(case)


# ------------------------------------------------------------ N-body field
FIELD_METHODS = ("tree", "tree-float32", "direct", "fmm", "direct_gravity")
COVERED["nbody_field"] = FIELD_METHODS


@st.composite
def cluster_cases(draw):
    n = draw(st.sampled_from([1, 2, 5, 40, 150]))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = 10.0 ** draw(st.sampled_from([-100, -3, 0, 5, 100]))
    close = draw(st.sampled_from([0.0, 1e-12, 1e-9, 1e-6]))
    eps = draw(st.sampled_from([0.0, 1e-3]))
    shape = draw(st.sampled_from(["ball", "line", "plane"]))
    return n, seed, scale, close, eps, shape


def _field(method, P, m, eps):
    from propopt_case_studies.nbody import barnes_hut, fmm

    if method == "tree":
        return barnes_hut(P, m, eps=eps, theta=0.4)[0]
    if method == "tree-float32":
        return barnes_hut(P, m, eps=eps, theta=0.4, precision="float32")[0]
    if method == "direct":
        return barnes_hut(P, m, eps=eps, method="direct")[0]
    if method == "fmm":
        return fmm(P, m, eps=eps, tol=1e-4)[0]
    return pp.direct_gravity(P, m, eps=eps)[0]


def check_field_case(case) -> None:
    n, seed, scale, close, eps, shape = case
    rng = np.random.default_rng(seed)
    P = rng.normal(size=(n, 3))
    if shape == "line":
        P[:, 1:] = 0.0
    elif shape == "plane":
        P[:, 2] = 0.0
    if n >= 2 and close:
        P[1] = P[0] + close  # a pair far closer than any leaf
    P *= scale
    m = rng.uniform(0.5, 2.0, size=n)
    want, _ = gravity64(P, m, eps * scale)
    # the error of body i against the sum of the pulls on it (no cancellation)
    Q = P / scale
    pulls = np.zeros(n)
    for i in range(n):
        d2 = ((Q - Q[i]) ** 2).sum(axis=1) + eps * eps
        d2[i] = np.inf
        with np.errstate(divide="ignore"):
            pulls[i] = (m / np.where(d2 > 0, d2, np.inf)).sum() / (scale * scale)
    for method in FIELD_METHODS:
        got = _field(method, P, m, eps * scale)
        assert np.all(np.isfinite(got)), f"{method}: {got}"
        norm = np.where(pulls > 0, pulls, 1.0)[:, None]
        err = np.linalg.norm(got / norm - want / norm, axis=1)
        bound = 1e-9 if method in ("direct", "direct_gravity") else 1e-2
        assert err.max() <= bound, f"{method}: error {err.max():.2e} (body {err.argmax()})"


@pytest.mark.slow
@FAST
@given(cluster_cases())
def test_nbody_field_methods_agree(case):
    check_field_case(case)


@pytest.mark.slow
@LONG
@given(cluster_cases())
def test_nbody_field_methods_agree_long(case):
    check_field_case(case)


def test_every_backend_is_covered():
    from propopt.associativity import scan
    from propopt.associativity.topk import _backends as _topk_backends
    from propopt.symmetry import pairs
    from propopt_case_studies.mamba import scan as mamba_scan, ssd as mamba_ssd

    def host_rows(table):  # the rows on device 'cuda' run in tests/test_gpu.py on a GPU
        return {m for m, d in table if d != "cuda"}

    assert host_rows(scan._backends.BACKENDS) == set(COVERED["associative_scan"]) - {"dask"}
    assert ("tiled", "dask") in scan._backends.BACKENDS  # covered as "dask"
    assert host_rows(_topk_backends.BACKENDS) == set(COVERED["topk"]) - {"summary", "dask"}
    assert set(pairs.METHODS) - {"auto", "cuda"} == set(COVERED["pairwise_sum"])
    assert host_rows(mamba_ssd.BACKENDS) == set(COVERED["ssd_scan"])
    assert host_rows(mamba_scan.BACKENDS) == set(COVERED["selective_scan"])
    from propopt_case_studies.nbody import METHODS as NBODY_METHODS

    assert set(NBODY_METHODS) <= {m.split("-")[0] for m in COVERED["nbody_field"]}
    assert sum(len(v) for v in COVERED.values()) >= 27
