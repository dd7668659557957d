"""softening='spline' in the tree: pytreegrav's cubic-spline kernel and its meaning of h."""

import numpy as np
import pytest

from propopt import direct_gravity
from propopt_case_studies.nbody import Octree, barnes_hut, plummer_sphere

pytreegrav = pytest.importorskip("pytreegrav")


@pytest.fixture(scope="module")
def bodies():
    pos, _, m = plummer_sphere(1500, seed=3)
    h = np.random.default_rng(0).uniform(0.01, 0.08, pos.shape[0])  # per-body supports
    return pos, m, h


def _maxrel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def test_theta_zero_matches_pytreegrav_brute_force(bodies):
    pos, m, h = bodies
    a, p = barnes_hut(pos, m, eps=h, theta=0.0, softening="spline", potential=True)
    assert _maxrel(a, pytreegrav.Accel(pos, m, h, method="bruteforce")) < 1e-12
    assert _maxrel(p, pytreegrav.Potential(pos, m, h, method="bruteforce")) < 1e-12


def test_theta_zero_at_targets_matches_pytreegrav(bodies):
    pos, m, h = bodies
    t = np.random.default_rng(1).normal(size=(300, 3))
    ht = np.full(300, 0.05)
    a, _ = barnes_hut(pos, m, eps=h, theta=0.0, softening="spline", targets=t, target_eps=ht)
    want = pytreegrav.AccelTarget(
        t, pos, m, softening_target=ht, softening_source=h, method="bruteforce"
    )
    assert _maxrel(a, want) < 1e-12


# pytreegrav's tree is a jitclass, which numba cannot cache: 20 s of
# compilation in every run, so the default set leaves it to -m slow (CI).
@pytest.mark.slow
def test_tree_error_is_tree_sized_and_below_pytreegrav(bodies):
    pos, m, h = bodies
    exact = pytreegrav.Accel(pos, m, h, method="bruteforce")
    a, _ = barnes_hut(pos, m, eps=h, theta=0.7, softening="spline")
    ptg = pytreegrav.Accel(pos, m, h, theta=0.7, method="tree")

    def err(x):
        return np.linalg.norm(x - exact, axis=1) / np.linalg.norm(exact, axis=1)

    assert np.median(err(a)) < 2e-3
    assert np.quantile(err(a), 0.99) <= np.quantile(err(ptg), 0.99)


def test_direct_method_and_plummer_default_unchanged(bodies):
    pos, m, h = bodies
    tree = Octree.build(pos, m, eps=h, softening="spline")
    a, p = tree.field(method="direct", potential=True)
    a0, p0 = direct_gravity(pos, m, eps=h, softening="spline", potential=True)
    assert _maxrel(a, a0) < 1e-12 and _maxrel(p, p0) < 1e-12
    ap, _ = barnes_hut(pos, m, eps=0.05, theta=0.0)  # Plummer stays the default
    assert _maxrel(ap, direct_gravity(pos, m, eps=0.05)[0]) < 1e-12


def test_bad_softening_is_named(bodies):
    pos, m, _ = bodies
    with pytest.raises(ValueError, match=r"softening='gauss' is not one of 'plummer', 'spline'"):
        barnes_hut(pos, m, softening="gauss")
    tree = Octree.build(pos, m, eps=0.01, softening="spline")
    with pytest.raises(ValueError, match="the CUDA walk has Plummer softening only"):
        tree.field(device="cuda")
