"""field(): every method against the float64 oracle; one contract, theta, masses, leaf_size."""

import warnings

import numpy as np
import pytest

import propopt as pp
from propopt_case_studies.nbody import Octree, barnes_hut, field, fmm, nbody_naive, plummer_sphere
from propopt_case_studies.nbody.integrate import leapfrog
from tests.oracles import gravity

EPS = 1e-3


def _relerr(a, b):
    return np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def sphere():
    pos, _, m = plummer_sphere(1500, seed=7)
    return pos, m, gravity(pos, m, EPS**2)


# (method, options, median bound, p99 bound): the tree at its default theta, the
# FMM at its default tol (its p99 below tol), the direct sum to rounding
CASES = [
    ("tree", {}, 1e-3, 1e-2),
    ("tree", dict(theta=0.4, quadrupole=False, precision="float32"), 1e-3, 1e-2),
    ("fmm", {}, 1e-4, 1e-3),
    ("fmm", dict(tol=1e-6), 1e-7, 1e-6),
    ("direct", {}, 1e-13, 1e-12),
]


@pytest.mark.parametrize(("method", "options", "median", "p99"), CASES)
def test_every_method_against_the_oracle(sphere, method, options, median, p99):
    pos, m, (a0, p0) = sphere
    acc, pot = field(pos, m, eps=EPS, method=method, potential=True, **options)
    err = _relerr(acc, a0)
    assert np.median(err) < median and np.quantile(err, 0.99) < p99
    assert np.median(np.abs(pot / p0 - 1)) < median
    acc_only, none = field(pos, m, eps=EPS, method=method, **options)
    assert none is None
    # the tree's loops run in float32 without potentials (precision='auto'), float64 with
    f32 = options.get("precision") or method == "tree"
    assert np.max(_relerr(acc_only, acc)) < (2e-5 if f32 else 1e-12)


@pytest.mark.parametrize("method", ["tree", "fmm", "direct"])
def test_every_method_at_targets_with_their_softening(sphere, method):
    pos, m, _ = sphere
    rng = np.random.default_rng(8)
    t, te = rng.normal(size=(200, 3)), rng.uniform(0, 0.05, 200)
    a0, p0 = gravity(pos, m, EPS**2, t, te**2)
    acc, pot = field(pos, m, eps=EPS, targets=t, target_eps=te, method=method, potential=True)
    # per-target lengths mixed with the bodies' in a cell: the FMM's far field
    # softens with the mean eps^2 (docs/nbody.md), an error ~ (0.05 / d)^2
    assert np.quantile(_relerr(acc, a0), 0.99) < (1e-12 if method == "direct" else 2e-2)
    assert np.median(np.abs(pot / p0 - 1)) < (1e-12 if method == "direct" else 1e-3)


@pytest.mark.parametrize("method", ["tree", "fmm"])
@pytest.mark.parametrize("theta", [0, 0.0, np.float32(0.0), np.array(0.0)])
def test_theta_zero_is_the_exact_sum_for_tree_and_fmm(method, theta):
    rng = np.random.default_rng(9)
    pos, m = rng.normal(size=(300, 3)), rng.uniform(0.5, 1.5, 300)
    a0, p0 = gravity(pos, m, 0.01**2)
    acc, pot = field(pos, m, eps=0.01, method=method, theta=theta, leaf_size=8, potential=True)
    np.testing.assert_allclose(acc, a0, rtol=1e-10, atol=1e-12 * np.abs(a0).max())
    np.testing.assert_allclose(pot, p0, rtol=1e-10)


@pytest.mark.parametrize("method", ["tree", "fmm"])
def test_theta_takes_numpy_scalars_and_0d_arrays_alike(method):
    pos = np.random.default_rng(10).normal(size=(200, 3))
    want, _ = field(pos, method=method, theta=0.5)
    for theta in (np.float64(0.5), np.float32(0.5), np.array(0.5), np.array(0.5, np.float32)):
        got, _ = field(pos, method=method, theta=theta)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("method", "theta", "exc", "msg"),
    [
        ("tree", -0.1, ValueError, r"^theta=-0.1: the opening angle must be finite and >= 0 for "
         r"method='tree' \(0 opens every node: the exact sum\)$"),
        ("tree", np.inf, ValueError, r"^theta=inf: the opening angle must be finite and >= 0"),
        ("fmm", 1.0, ValueError, r"^theta=1.0: the opening angle must be in \[0, 1\) for "
         r"method='fmm' \(two cells' expansions converge only while"),
        ("fmm", -0.1, ValueError, r"^theta=-0.1: the opening angle must be in \[0, 1\)"),
        ("fmm", np.nan, ValueError, r"^theta=nan: the opening angle must be in \[0, 1\)"),
        ("tree", "0.5", TypeError, r"^theta='0.5': must be a real number"),
        ("fmm", True, TypeError, r"^theta=True: must be a real number, not a bool"),
        ("tree", np.ones(2), TypeError, r"^theta=<array of shape \(2,\), dtype float64>: must"),
    ],
)  # fmt: skip
def test_theta_errors_are_one_rule(method, theta, exc, msg):
    pos = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(exc, match=msg):
        field(pos, method=method, theta=theta)
    verb = barnes_hut if method == "tree" else fmm
    with pytest.raises(exc, match=msg):
        verb(pos, theta=theta)


def test_the_tree_takes_theta_above_one():
    # a node is also opened within its largest radius: its multipoles converge at any theta
    pos, _, m = plummer_sphere(500, seed=1)
    a0, _ = gravity(pos, m, EPS**2)
    acc, _ = field(pos, m, eps=EPS, theta=1.5)
    assert np.median(_relerr(acc, a0)) < 2e-2


NEGATIVE = r"masses must be >= 0 in every gravity verb .*use propopt\.pairwise_sum"


def test_negative_masses_are_refused_by_every_gravity_verb_with_the_way_out():
    rng = np.random.default_rng(11)
    pos, m = rng.normal(size=(100, 3)), rng.uniform(0.5, 1.5, 100)
    m[::3] *= -1  # charges of both signs
    for call in (
        lambda: field(pos, m),  # auto, which would pick the exact sum at this size
        lambda: field(pos, m, method="tree"),
        lambda: field(pos, m, method="fmm"),
        lambda: field(pos, m, method="direct"),
        lambda: barnes_hut(pos, m),
        lambda: fmm(pos, m),
        lambda: Octree.build(pos, m),
        lambda: pp.direct_gravity(pos, m),
        lambda: nbody_naive(pos, m),
        lambda: leapfrog(pos, np.zeros_like(pos), m, dt=0.01, steps=1),
        lambda: leapfrog(pos, np.zeros_like(pos), m, dt=0.01, steps=1, method="direct"),
    ):
        with pytest.raises(ValueError, match=rf"^mass\[0\] = -\d\.\d+: {NEGATIVE}"):
            call()
    for method in ("tree", "direct"):
        with pytest.raises(ValueError, match=rf"^mass=-1.0: {NEGATIVE}"):
            field(pos, -1.0, method=method)


def test_sources_of_both_signs_are_pairwise_sums_of_the_same_kernel():
    from propopt.symmetry import GRAVITY_SYMMETRY, plummer

    rng = np.random.default_rng(12)
    pos, q = rng.normal(size=(100, 3)), rng.uniform(0.5, 1.5, 100)
    q[::3] *= -1
    out = pp.pairwise_sum(plummer, pos, q, symmetry=GRAVITY_SYMMETRY, args=(0.1**2,))
    a0, p0 = gravity(pos, q, np.full(100, 0.1**2))
    np.testing.assert_allclose(out[:, :3], a0, rtol=1e-12, atol=1e-12 * np.abs(a0).max())
    np.testing.assert_allclose(out[:, 3], p0, rtol=1e-12, atol=1e-12 * np.abs(p0).max())


def test_non_finite_masses_name_the_body_to_fix():
    pos = np.zeros((3, 3))
    for method in ("tree", "fmm"):
        with pytest.raises(ValueError, match=r"^mass\[1\] = nan: masses must be finite and >= 0 "
                                             r"\(fix or drop body 1\)$"):  # fmt: skip
            field(pos, [1.0, np.nan, 1.0], method=method)


@pytest.mark.parametrize("method", ["tree", "fmm"])
@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "8"])
def test_leaf_size_errors(method, bad):
    with pytest.raises(ValueError, match=rf"^leaf_size={bad!r}: must be an int >= 1$"):
        field(np.zeros((4, 3)), method=method, leaf_size=bad)


@pytest.mark.parametrize("leaf_size", [1, 5, 32])
def test_leaf_size_is_the_most_bodies_in_a_leaf(leaf_size):
    pos = np.random.default_rng(12).normal(size=(400, 3))
    tree = Octree.build(pos, leaf_size=leaf_size)
    start, end, leaf = tree.start, tree.end, tree.leaf
    assert (end[leaf] - start[leaf]).max() <= leaf_size
    assert (end[~leaf] - start[~leaf]).min() > leaf_size


@pytest.mark.parametrize("leaf_size", [1, 5, 32])
def test_the_tree_and_the_fmm_build_on_one_tree(leaf_size, monkeypatch):
    import importlib

    fmm_module = importlib.import_module("propopt_case_studies.nbody.fmm")

    rng = np.random.default_rng(12)
    pos, m, e = rng.normal(size=(400, 3)), rng.uniform(0.5, 1, 400), np.full(400, 0.01)
    tree = Octree.build(pos, m, eps=e, leaf_size=leaf_size)
    built = []
    real = fmm_module.bodies
    monkeypatch.setattr(
        fmm_module, "bodies", lambda *a, **k: built.append(real(*a, **k)) or built[-1]
    )
    fmm(pos, m, eps=e, leaf_size=leaf_size)
    (b,) = built
    for name in ("order", "start", "end", "nxt", "leaf"):
        assert np.array_equal(getattr(b, name), getattr(tree, name if name != "nxt" else "next"))
    assert np.array_equal(b.src, tree.src)  # the same bodies in the same tree units


@pytest.mark.parametrize("leaf_size", [16, 32, 64])
def test_fmm_tol_holds_with_leaves_of_16_and_more(sphere, leaf_size):
    # tol's table is calibrated with leaves of 64; leaves of 8 and fewer gave p99
    # errors up to 5 tol at tol 1e-5 (more M2L translations per target): fmm()'s
    # docstring says so
    pos, m, (a0, _) = sphere
    acc, _ = field(pos, m, eps=EPS, method="fmm", leaf_size=leaf_size, tol=1e-5)
    assert np.quantile(_relerr(acc, a0), 0.99) < 1e-5


def _field_of(pos, m, method):
    return lambda **kw: field(pos, m, method=method, **kw)


def test_the_return_contract_of_every_verb():
    pos, _, m = plummer_sphere(64, seed=2)
    tree = Octree.build(pos, m, eps=0.01)
    verbs = {
        "barnes_hut": lambda **kw: barnes_hut(pos, m, eps=0.01, **kw),
        "Octree.field": lambda **kw: tree.field(**kw),
        "Octree.field targets": lambda **kw: tree.field(pos[:5], **kw),
        "fmm": lambda **kw: fmm(pos, m, eps=0.01, **kw),
        "direct_gravity": lambda **kw: pp.direct_gravity(pos, m, eps=0.01, **kw),
        "nbody_naive": lambda **kw: nbody_naive(pos, m, **kw),
        **{f"field {method}": _field_of(pos, m, method) for method in ("tree", "fmm", "direct")},
    }
    for name, call in verbs.items():
        n = 5 if "targets" in name else 64
        res = call()
        assert type(res) is tuple and len(res) == 2, name
        acc, pot = res
        assert acc.shape == (n, 3) and pot is None, name
        acc2, pot2 = call(potential=True)
        assert pot2.shape == (n,) and np.all(pot2 < 0), name
        # the tree walks in float32 without potentials (precision='auto'), float64 with
        f32 = name in ("barnes_hut", "field tree") or name.startswith("Octree")
        rtol = 1e-5 if f32 else 1e-12
        np.testing.assert_allclose(acc2, acc, rtol=rtol, atol=1e-6 * np.abs(acc).max(),
                                   err_msg=name)  # fmt: skip
        with pytest.raises(TypeError, match=r"^potential='yes': must be True or False$"):
            call(potential="yes")


def test_renamed_arguments_warn_and_name_the_new_spelling():
    pos, m = np.array([[0.0, 0, 0], [2.0, 0, 0]]), np.array([1.0, 3.0])
    want, _ = nbody_naive(pos, m)
    with pytest.warns(DeprecationWarning, match=r"nbody_naive\(positions=\.\.\.\) is deprecated: "
                                                r"pass pos=\.\.\."):  # fmt: skip
        got, _ = nbody_naive(positions=pos, mass=m)
    np.testing.assert_array_equal(got, want)
    with pytest.warns(DeprecationWarning, match=r"nbody_naive\(masses=\.\.\.\) is deprecated: "
                                                r"pass mass=\.\.\."):  # fmt: skip
        got, _ = nbody_naive(pos, masses=m)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match=r"got both masses= and mass=: pass mass= only"):
        nbody_naive(pos, masses=m, mass=m)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling is silent
        nbody_naive(pos=pos, mass=m)


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        (dict(method="fast"), r"^method='fast' is not one of 'auto', 'tree', 'fmm', 'direct'$"),
        (dict(device="gpu"), r"^device='gpu' is not one of 'auto', 'cpu', 'cuda', 'dask'$"),
        (dict(method="fmm", device="cuda"), r"^method='fmm' runs on device 'cpu', not "
         r"device='cuda'; pass another device or method$"),
        (dict(method="direct", device="dask"), r"^method='direct' runs on device 'cpu' or "
         r"'cuda', not device='dask'"),
        (dict(tol=1e-5, quadrupole=False), r"^method='auto': tol=1e-05 asks for the FMM, but "
         r"quadrupole= only the tree takes; leave out one or the other, or name the method$"),
        (dict(order=4, device="cuda"), r"^method='auto': order= asks for the FMM, which runs on "
         r"device 'cpu' only; pass device='cpu', or method='tree' without order=$"),
        (dict(tol=1e-3, method="tree"), r"^tol=0.001 is an option of method='fmm', not of "
         r"method='tree': leave it out$"),
        (dict(method="fmm", quadrupole=False), r"^quadrupole=False is an option of "
         r"method='tree', not of method='fmm'"),
        (dict(method="fmm", precision="float32"), r"^precision='float32' is an option of "
         r"method='tree'"),
        (dict(method="direct", theta=0.5), r"^theta=0.5 is an option of method='tree' or "
         r"'fmm', not of method='direct'"),
        (dict(method="direct", leaf_size=8), r"^leaf_size=8 is an option of method='tree' or "
         r"'fmm'"),
        (dict(chunk=10), r"^chunk= is for device='dask' \(got device='cpu'\): leave it out$"),
        (dict(device="dask", targets=np.zeros((2, 3))), r"^device='dask' needs client="),
        (dict(target_eps=0.1), r"^target_eps is given without targets: pass targets=, or "
         r"leave it out$"),
        (dict(softening="gauss"), r"^softening='gauss' is not one of 'plummer', 'spline'$"),
    ],
)  # fmt: skip
def test_field_argument_errors(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        field(np.random.default_rng(0).normal(size=(10, 3)), **kwargs)


def test_target_eps_without_targets_is_refused_by_every_verb():
    pos = np.random.default_rng(0).normal(size=(10, 3))
    msg = r"^target_eps is given without targets: pass targets=, or leave it out$"
    for call in (
        lambda: barnes_hut(pos, target_eps=0.1),
        lambda: Octree.build(pos).field(target_eps=0.1),
        lambda: fmm(pos, target_eps=0.1),
        lambda: pp.direct_gravity(pos, target_eps=0.1),
    ):
        with pytest.raises(ValueError, match=msg):
            call()


def _spline64(pos, m, h, targets=None, th=None):
    """Float64 cubic-spline field (Monaghan and Lattanzio; pytreegrav's kernel), pair
    support ``max(h_i, h_j)``, written out here: shares no code with propopt."""
    T = pos if targets is None else targets
    th = h if targets is None else th
    acc, pot = np.zeros((len(T), 3)), np.zeros(len(T))
    for i, t in enumerate(T):
        d = pos - t
        r = np.sqrt((d * d).sum(1))
        H = np.maximum(th[i], h)
        q = r / np.where(H > 0, H, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton_g, newton_p = 1 / r**3, -1 / r
            g_in = (32 / 3 + q**2 * (32 * q - 38.4)) / H**3
            p_in = (-2.8 + q**2 * (16 / 3 + q**2 * (6.4 * q - 9.6))) / H
            g_out = (64 / 3 - 48 * q + 38.4 * q**2 - 32 / 3 * q**3 - 1 / 15 / q**3) / H**3
            p_out = (-3.2 + 1 / 15 / q + q**2 * (32 / 3 + q * (-16 + q * (9.6 - 32 / 15 * q)))) / H
            g = np.where(q >= 1, newton_g, np.where(q <= 0.5, g_in, g_out))
            p = np.where(q >= 1, newton_p, np.where(q <= 0.5, p_in, p_out))
        skip = (r == 0) & (H == 0)
        if targets is None:
            skip[i] = True
        g, p = np.where(skip, 0, g), np.where(skip, 0, p)
        acc[i] = (m[:, None] * g[:, None] * d).sum(0)
        pot[i] = (m * p).sum()
    return acc, pot


@pytest.mark.parametrize("method", ["tree", "fmm", "direct"])
def test_spline_softening_of_every_method_against_its_definition(method):
    pos, _, m = plummer_sphere(600, seed=3)
    rng = np.random.default_rng(1)
    h = rng.uniform(0.02, 0.3, 600)  # many pairs inside a support
    a0, p0 = _spline64(pos, m, h)
    for theta in (None, 0.0) if method != "direct" else (None,):
        a, p = field(pos, m, eps=h, softening="spline", method=method, theta=theta,
                     potential=True)  # fmt: skip
        exact = method == "direct" or theta == 0.0
        # the tree at theta 0.7 (p99 ~ 3e-3 here), the FMM at tol 1e-3
        bound = 1e-10 if exact else {"tree": 1e-2, "fmm": 1e-3}[method]
        assert np.quantile(_relerr(a, a0), 0.99) < bound
        assert np.median(np.abs(p / p0 - 1)) < bound
    t, th = rng.normal(size=(100, 3)), rng.uniform(0, 0.2, 100)
    a0, p0 = _spline64(pos, m, h, t, th)
    a, p = field(pos, m, eps=h, targets=t, target_eps=th, softening="spline", method=method,
                 potential=True)  # fmt: skip
    bound = {"tree": 1e-2, "fmm": 1e-3, "direct": 1e-10}[method]
    assert np.quantile(_relerr(a, a0), 0.99) < bound
    assert np.median(np.abs(p / p0 - 1)) < bound


def test_fmm_spline_keeps_tol_and_is_exact_at_theta_zero(sphere):
    pos, m, _ = sphere
    h = np.full(len(m), 2.8 * EPS)  # pytreegrav's h for the softening EPS
    a0, p0 = pp.direct_gravity(pos, m, eps=h, softening="spline", potential=True)
    for tol in (1e-3, 1e-6):
        a, p = fmm(pos, m, eps=h, softening="spline", tol=tol, potential=True)
        assert np.quantile(_relerr(a, a0), 0.99) <= tol
        assert np.median(np.abs(p / p0 - 1)) <= tol
    a, p = fmm(pos, m, eps=h, softening="spline", theta=0.0, potential=True)
    np.testing.assert_allclose(a, a0, rtol=1e-10, atol=1e-12 * np.abs(a0).max())
    np.testing.assert_allclose(p, p0, rtol=1e-10)
    with pytest.raises(ValueError, match=r"^softening='gauss' is not one of 'plummer', 'spline'"):
        fmm(pos, m, softening="gauss")


def test_every_method_and_device_named_has_a_backend():
    from propopt_case_studies.nbody import api

    assert {m for m, _ in api.BACKENDS} == set(api.METHODS)
    assert {d for _, d in api.BACKENDS} == set(api.DEVICES)
    assert set(api.AUTO) == set(api.AUTO_REFUSE) == set(api.BACKENDS)


def test_device_auto_is_where_the_arrays_are_in_every_verb():
    import inspect

    for verb in (field, barnes_hut, Octree.field, pp.direct_gravity):
        assert inspect.signature(verb).parameters["device"].default == "auto", verb
    pos = np.random.default_rng(0).normal(size=(50, 3))
    for call in (
        lambda d: field(pos, eps=0.1, method="tree", device=d),
        lambda d: barnes_hut(pos, eps=0.1, device=d),
        lambda d: Octree.build(pos, eps=0.1).field(device=d),
    ):
        np.testing.assert_array_equal(call("auto")[0], call("cpu")[0])


def test_auto_picks_by_accuracy_and_size(monkeypatch):
    import importlib

    api = importlib.import_module("propopt_case_studies.nbody.api")
    ran = []
    for name in ("_run_tree", "_run_fmm", "_run_direct"):
        real = getattr(api, name)
        monkeypatch.setitem(
            api.BACKENDS,
            next(k for k, b in api.BACKENDS.items() if b.run is real),
            api.dispatch.Backend(
                api.dispatch.takes_any, lambda p, _r=real, _n=name: ran.append(_n) or _r(p)
            ),
        )
    rng = np.random.default_rng(3)
    small, big = rng.normal(size=(500, 3)), rng.normal(size=(1500, 3))
    cases = [
        (dict(pos=small), "_run_direct"),  # 2.5e5 pairs: the exact sum is as fast
        (dict(pos=big), "_run_tree"),  # 2.25e6 pairs
        (dict(pos=small, targets=big[:1000]), "_run_direct"),
        (dict(pos=big, tol=1e-4), "_run_fmm"),  # below the tree's own error
        (dict(pos=big, tol=1e-2), "_run_tree"),  # the tree at its defaults meets it
        (dict(pos=small, theta=0.5), "_run_tree"),
        (dict(pos=small, order=4), "_run_fmm"),
        (dict(pos=small, group_size=64), "_run_tree"),
    ]
    for kw, want in cases:
        ran.clear()
        acc, pot = field(kw.pop("pos"), eps=0.01, **kw)
        assert ran == [want], (kw, ran)
        assert pot is None and np.isfinite(acc).all()
    a0, _ = gravity(big, np.ones(len(big)), np.full(len(big), 0.01**2))
    acc, _ = field(big, eps=0.01, tol=1e-4)  # what auto promises: the error asked for
    assert np.quantile(_relerr(acc, a0), 0.99) < 1e-4


def test_torch_bfloat16_masses_are_taken_as_their_float32_values():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    pos = rng.normal(size=(300, 3)).astype(np.float32)
    m16 = torch.from_numpy(rng.uniform(0.5, 1.5, 300).astype(np.float32)).to(torch.bfloat16)
    m32 = m16.float().numpy()  # bfloat16 values are exact in float32
    for call in (
        lambda m: barnes_hut(pos, m, eps=0.1),
        lambda m: fmm(pos, m, eps=0.1),
        lambda m: Octree.build(pos, m, eps=0.1).field(),
        lambda m: field(pos, m, eps=0.1, method="tree"),
        lambda m: field(pos, m, eps=0.1, method="fmm"),
        lambda m: field(pos, m, eps=0.1, method="direct"),
    ):
        acc, _ = call(m16)
        want, _ = call(m32)
        assert acc.dtype == np.float32
        np.testing.assert_array_equal(acc, want)


def test_device_auto_reads_a_dask_pos_here_without_a_client():
    da = pytest.importorskip("dask.array")
    pos = np.random.default_rng(6).normal(size=(60, 3))
    want, _ = field(pos, eps=0.1)
    got, _ = field(da.from_array(pos, chunks=20), eps=0.1)
    np.testing.assert_array_equal(got, want)
