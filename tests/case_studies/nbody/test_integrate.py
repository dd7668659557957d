"""Leapfrog: conservation, reversibility, snapshots and resume, progress bar."""

import numpy as np
import pytest

from propopt_case_studies.nbody import plummer_sphere
from propopt_case_studies.nbody.integrate import diagnostics, leapfrog, load_snapshot


@pytest.fixture(scope="module")
def ic():
    return plummer_sphere(300, seed=5)


def test_energy_momentum_angular_momentum(ic):
    x, v, m = ic
    run = leapfrog(x, v, m, dt=0.005, steps=60, eps=0.05, method="direct")
    assert run.energy_drift < 1e-4
    p = np.stack([run.diag[k] for k in ("px", "py", "pz")], 1)
    ang = np.stack([run.diag[k] for k in ("lx", "ly", "lz")], 1)
    np.testing.assert_allclose(p - p[0], 0, atol=1e-12)  # exact pair antisymmetry
    np.testing.assert_allclose(ang - ang[0], 0, atol=1e-12)
    tree = leapfrog(x, v, m, dt=0.005, steps=60, eps=0.05, theta=0.5, diag_every=10)
    assert tree.energy_drift < 1e-3 and len(tree.diag["t"]) == 7
    np.testing.assert_allclose(tree.pos, run.pos, atol=1e-3)


def test_time_reversible(ic):
    x, v, m = ic
    fwd = leapfrog(x, v, m, dt=0.01, steps=20, eps=0.05, method="direct")
    back = leapfrog(fwd.pos, -fwd.vel, m, dt=0.01, steps=20, eps=0.05, method="direct")
    np.testing.assert_allclose(back.pos, x, atol=1e-9)


def test_resume_is_bit_identical(ic, tmp_path):
    x, v, m = ic
    whole = leapfrog(x, v, m, dt=0.01, steps=10, eps=0.05)
    d = str(tmp_path / "snaps")
    leapfrog(x, v, m, dt=0.01, steps=6, eps=0.05, snapshot_dir=d, snapshot_every=3)
    s = load_snapshot(d)
    assert int(s["step"]) == 6 and s["pos"].shape == (300, 3)
    rest = leapfrog(dt=0.01, steps=10, eps=0.05, resume=d)
    assert rest.step == 10
    np.testing.assert_array_equal(rest.pos, whole.pos)
    np.testing.assert_array_equal(rest.vel, whole.vel)
    np.testing.assert_array_equal(rest.diag["energy"], whole.diag["energy"])


def test_progress_bar(ic, capsys):
    x, v, m = ic
    leapfrog(x[:20], v[:20], m[:20], dt=0.01, steps=3, eps=0.05, progress=True)
    assert "leapfrog" in capsys.readouterr().err


def test_diagnostics_two_bodies():
    d = diagnostics(
        np.array([[1.0, 0, 0], [-1.0, 0, 0]]),
        np.array([[0, 1.0, 0], [0, -1.0, 0]]),
        np.array([1.0, 1.0]),
        np.array([-0.5, -0.5]),
    )
    assert d["kinetic"] == 1.0 and d["potential"] == -0.5 and d["lz"] == 2.0 and d["px"] == 0.0


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        (dict(dt=0.0, steps=1), r"dt=0.0: the time step must be finite and > 0"),
        (dict(dt=0.1, steps=-1), r"steps=-1: must be an int >= 0"),
        (
            dict(dt=0.1, steps=1, method="rk4"),
            r"method='rk4' is not one of 'tree', 'fmm', 'direct'",
        ),
        (dict(dt=0.1, steps=1, snapshot_every=2), r"snapshot_every > 0 needs snapshot_dir"),
        (
            dict(dt=0.1, steps=1, mass=np.r_[1.0, 1.0, np.nan, np.ones(297)]),
            r"mass\[2\] = nan: masses must be finite and >= 0 \(fix or drop body 2\)",
        ),
    ],
)
def test_errors(ic, kwargs, msg):
    x, v, m = ic
    kwargs = dict(mass=m) | kwargs
    with pytest.raises(ValueError, match=msg):
        leapfrog(x, v, **kwargs)


def test_switches_and_missing_arrays(ic):
    x, v, m = ic
    x, v, m = x[:20], v[:20], m[:20]
    for name in ("progress", "quadrupole"):  # 'no' switched the progress bar on
        with pytest.raises(TypeError, match=rf"^{name}='no': must be True or False$"):
            leapfrog(x, v, m, dt=0.1, steps=1, method="direct", **{name: "no"})
    with pytest.raises(TypeError, match=r"^theta='a': must be a real number"):
        leapfrog(x, v, m, dt=0.1, steps=1, method="direct", theta="a")
    # a missing pos said 'pos has dtype object'
    with pytest.raises(TypeError, match=r"^pos is missing: pass the initial positions"):
        leapfrog(dt=0.1, steps=1)
    with pytest.raises(TypeError, match=r"^vel is missing: pass the initial velocities"):
        leapfrog(x, dt=0.1, steps=1)
    want = leapfrog(x, v, m, dt=0.01, steps=2, method="direct")
    got = leapfrog(x, v, m, dt=np.array(0.01), steps=np.int64(2), method="direct",
                   progress=np.False_)  # fmt: skip
    assert np.array_equal(got.pos, want.pos)


def test_resume_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no snap_"):
        leapfrog(dt=0.1, steps=1, resume=str(tmp_path))


@pytest.mark.parametrize(
    ("change", "msg"),
    [
        (dict(dt=0.02), r"dt=0.02 differs from the snapshot's dt=0.01: resume with dt=0.01"),
        (dict(eps=0.1), r"eps=0.1 differs from the snapshot's eps=0.05: resume with eps=0.05"),
        (
            dict(method="direct"),
            r"method='direct' differs from the snapshot's method='tree': resume with "
            r"method='tree'",
        ),
        (dict(theta=0.5), r"theta=0.5 differs from the snapshot's theta=0.7"),
        (dict(softening="spline"), r"softening='spline' differs from the snapshot's"),
        (dict(quadrupole=False), r"quadrupole=False differs from the snapshot's quadrupole=True"),
        (dict(steps=3), r"steps=3 is below the snapshot's step 4: .* pass steps >= 4"),
        (
            dict(method="fmm", tol=1e-3),
            r"method='fmm' differs from the snapshot's method='tree'",
        ),
    ],
)
def test_resume_refuses_other_parameters(ic, tmp_path, change, msg):
    x, v, m = ic
    d = str(tmp_path / "snaps")
    leapfrog(x[:30], v[:30], m[:30], dt=0.01, steps=4, eps=0.05, snapshot_dir=d,
             snapshot_every=4)  # fmt: skip
    kw = dict(dt=0.01, steps=6, eps=0.05) | change
    with pytest.raises(ValueError, match=msg):
        leapfrog(resume=d, **kw)
    assert leapfrog(resume=d, dt=0.01, steps=4, eps=0.05).step == 4  # nothing left to do


def test_fmm_forces_conserve_momentum_to_rounding(ic, tmp_path):
    """On the median, the FMM's forces are mutual (each pair of cells once, for both):
    momentum is conserved to rounding, where the tree's forces drift at their error."""
    x, v, m = plummer_sphere(3000, seed=5)

    def momentum_drift(run):
        p = np.stack([run.diag[k] for k in ("px", "py", "pz")], 1)
        return np.abs(p - p[0]).max() / (m * np.linalg.norm(run.vel, axis=1)).sum()

    mutual = leapfrog(x, v, m, dt=0.01, steps=20, eps=0.05, method="fmm", tol=1e-3,
                      quantile=0.5)  # fmt: skip
    tree = leapfrog(x, v, m, dt=0.01, steps=20, eps=0.05)
    assert momentum_drift(mutual) < 1e-9 < 1e-7 < momentum_drift(tree)
    assert mutual.energy_drift < 1e-4
    np.testing.assert_allclose(mutual.pos, tree.pos, atol=1e-3)
    # resumed bit for bit; another tol, or none, is refused by name
    d = str(tmp_path / "snaps")
    whole = leapfrog(x, v, m, dt=0.01, steps=6, eps=0.05, method="fmm", tol=1e-3, quantile=0.5)
    leapfrog(x, v, m, dt=0.01, steps=3, eps=0.05, method="fmm", tol=1e-3, quantile=0.5,
             snapshot_dir=d, snapshot_every=3)  # fmt: skip
    again = leapfrog(dt=0.01, steps=6, eps=0.05, method="fmm", tol=1e-3, quantile=0.5, resume=d)
    assert np.array_equal(again.pos, whole.pos) and np.array_equal(again.vel, whole.vel)
    with pytest.raises(ValueError, match=r"^tol=None differs from the snapshot's tol=0.001"):
        leapfrog(dt=0.01, steps=6, eps=0.05, method="fmm", quantile=0.5, resume=d)
    with pytest.raises(ValueError, match=r"^tol=0.001 is an option of method='fmm', not of "):
        leapfrog(x, v, m, dt=0.01, steps=1, eps=0.05, tol=1e-3)


def test_resume_with_other_per_body_eps_names_the_first_difference(ic, tmp_path):
    # the message held both whole arrays (60,181 characters for 2000 bodies)
    x, v, m = ic
    d = str(tmp_path / "snaps")
    eps = np.full(30, 0.05)
    leapfrog(x[:30], v[:30], m[:30], dt=0.01, steps=2, eps=eps, snapshot_dir=d,
             snapshot_every=2, method="direct")  # fmt: skip
    other = eps.copy()
    other[[7, 20]] = 0.1
    first = r"^eps differs from the snapshot's at 2 of 30 entries, first at eps\[7\] = 0.1 "
    with pytest.raises(ValueError, match=first + r"\(the snapshot's: 0.05\): resume") as info:
        leapfrog(resume=d, dt=0.01, steps=4, eps=other, method="direct")
    assert len(str(info.value)) < 300 and "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"^eps has shape \(\) but the snapshot's has shape"):
        leapfrog(resume=d, dt=0.01, steps=4, eps=0.05, method="direct")
    assert leapfrog(resume=d, dt=0.01, steps=4, eps=eps, method="direct").step == 4
