"""A kernel gives the same bits whether this process compiled it or loaded it from the cache.

Each test runs the verbs in a child process on empty cache folders (numba's,
``NUMBA_CACHE_DIR``, and the generated modules', ``PROPOPT_CACHE_DIR``), so
that it compiles every kernel, then in further children that load them all
from those folders, and compares the outputs bit for bit.  A warm child also
runs the verbs in the reverse order: a kernel's result must not depend on
which kernels were loaded before it either.

Numba links a copy of each callee into its caller as a weak symbol, which the
dynamic linker binds to the first definition loaded: the callee's own
standalone code in the compiling process, the caller's copy (optimized again,
with fast-math, inside the caller) in a loading one.  ``propopt._numba_policy``
makes those copies internal to each kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from llvmlite import binding as llvm

import propopt
from propopt import _numba_policy
from propopt.jit import load_module

ROOT = Path(__file__).resolve().parents[1]

#: The child: ``python -c WORKER out.npz forward|reverse``.  One thread, so that
#: a thread count chosen from the machine's load cannot regroup a sum.
WORKER = r"""
import sys
import numpy as np
import propopt
from propopt import associative_scan, add, direct_gravity, pairwise_sum, topk
from propopt_case_studies.mamba.scan import selective_scan
from propopt_case_studies.nbody import field, fmm, plummer_sphere
from tests.symmetry.test_pairs import soft_inverse

propopt.set_num_threads(1)
out, order = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(7)
x = rng.normal(size=100_003)
pos, _, m = plummer_sphere(6000, seed=3)
X = rng.normal(size=(700, 3))
w = rng.uniform(0.5, 1.5, 700)
L, dim, N = 70, 32, 4
ssm = dict(
    u=rng.normal(size=(2, dim, L)), delta=rng.uniform(0.01, 0.5, (2, dim, L)),
    A=-np.exp(rng.normal(size=(dim, N))), B=rng.normal(size=(2, N, L)),
    C=rng.normal(size=(2, N, L)), D=rng.normal(size=dim),
)


def run():
    return {
        "scan": lambda: associative_scan(add, x),
        "topk": lambda: np.concatenate([a.ravel() for a in topk(x, 50)]),
        "tree": lambda: field(pos, m, eps=1e-2, potential=True, method="tree"),
        "tree_quadrupole_f32": lambda: field(
            pos, m, eps=1e-2, method="tree", quadrupole=True, precision="float32"
        ),
        "fmm_median": lambda: fmm(pos, m, eps=1e-2, quantile=0.5, potential=True),
        "fmm_p99": lambda: fmm(pos, m, eps=1e-2, quantile=0.99, potential=True),
        "direct_gravity": lambda: direct_gravity(pos[:1500], m[:1500], eps=1e-2, potential=True),
        "pairwise_sum": lambda: pairwise_sum(soft_inverse, X, w),
        "selective_scan": lambda: selective_scan(**ssm, delta_softplus=True),
    }


verbs = run()
names = list(verbs) if order == "forward" else list(verbs)[::-1]
res = {}
for name in names:
    got = verbs[name]()
    parts = got if isinstance(got, tuple) else (got,)
    for i, a in enumerate(parts):
        if a is not None:
            res[f"{name}_{i}"] = np.asarray(a)
np.savez(out, **res)
"""


def _run(tmp: Path, tag: str, order: str, cache: Path) -> dict[str, np.ndarray]:
    env = dict(
        os.environ,
        NUMBA_CACHE_DIR=str(cache / "numba"),
        PROPOPT_CACHE_DIR=str(cache / "propopt"),
        PROPOPT_COMPILE_NOTICE="0",
        PYTHONPATH=str(ROOT),
    )
    out = tmp / f"{tag}.npz"
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(out), order],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        pytest.fail(f"the {tag} child failed:\n{done.stderr[-3000:]}")
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


def _differences(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> list[str]:
    """Outputs whose bytes differ, each with how many entries differ."""
    assert a.keys() == b.keys()
    bad = []
    for k in sorted(a):
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            n = int(np.sum(x.view(np.uint8) != y.view(np.uint8))) if x.shape == y.shape else -1
            bad.append(f"{k} ({n} bytes of {x.nbytes})")
    return bad


@pytest.mark.slow
def test_compiled_and_cached_kernels_agree_bit_for_bit(tmp_path):
    cache = tmp_path / "cache"
    cold = _run(tmp_path, "cold", "forward", cache)
    assert any((cache / "numba").rglob("*.nbi")), "the cold child cached nothing"
    warm = _run(tmp_path, "warm", "forward", cache)
    reverse = _run(tmp_path, "reverse", "reverse", cache)
    assert len(cold) >= 12
    assert _differences(cold, warm) == []
    assert _differences(cold, reverse) == []


RESUME = r"""
import glob
import re
import sys
import numpy as np
import propopt
from propopt_case_studies.nbody import plummer_sphere
from propopt_case_studies.nbody.integrate import leapfrog

propopt.set_num_threads(1)
kind, folder, out = sys.argv[1], sys.argv[2], sys.argv[3]
kw = dict(dt=0.01, steps=20, eps=0.02, method="fmm", quantile=0.5)
if kind == "whole":
    pos, vel, m = plummer_sphere(2500, seed=5)
    run = leapfrog(pos, vel, m, snapshot_dir=folder, snapshot_every=10, **kw)
else:
    at10 = [p for p in glob.glob(folder + "/snap_*.npz") if int(re.sub(r"\D", "", p[-16:])) == 10]
    run = leapfrog(resume=at10[0], **kw)
np.savez(out, pos=run.pos, vel=run.vel)
"""


@pytest.mark.slow
def test_a_run_resumed_in_a_warm_process_matches_the_cold_uninterrupted_run(tmp_path):
    cache = tmp_path / "cache"
    env = dict(
        os.environ,
        NUMBA_CACHE_DIR=str(cache / "numba"),
        PROPOPT_CACHE_DIR=str(cache / "propopt"),
        PROPOPT_COMPILE_NOTICE="0",
        PYTHONPATH=str(ROOT),
    )
    snaps = tmp_path / "snaps"
    res = {}
    for kind in ("whole", "resumed"):
        out = tmp_path / f"{kind}.npz"
        done = subprocess.run(
            [sys.executable, "-c", RESUME, kind, str(snaps), str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            pytest.fail(f"the {kind} child failed:\n{done.stderr[-3000:]}")
        with np.load(out) as f:
            res[kind] = {k: f[k] for k in f.files}
    assert len(list(snaps.glob("snap_*.npz"))) >= 2
    assert _differences(res["whole"], res["resumed"]) == []


#: A parallel caller and the fast-math callee it links in (not inlined by numba): the
#: caller links in the parfor's gufunc, which numba defines ``weak_odr``, and the callee.
PAIR = """
import numpy as np
from numba import njit, prange


@njit(cache=False, fastmath=True)
def callee(x, c):
    s = 0.0
    for i in range(x.size):
        s += c[2] / np.sqrt(x[i] * x[i] + c[1])
    return s


@njit(cache=False, parallel=True)
def caller(x, c, out):
    for j in prange(out.size):
        out[j] = callee(x[j:], c)
"""


def _linkages(ir: str) -> dict[str, str]:
    """The linkage of each function the module defines, by name."""
    mod = llvm.parse_assembly(ir)
    return {f.name: f.linkage.name for f in mod.functions if not f.is_declaration}


def test_a_propopt_kernel_defines_what_it_links_in_internally(tmp_path, monkeypatch):
    monkeypatch.setenv("PROPOPT_CACHE_DIR", str(tmp_path))
    mod = load_module(PAIR + f"# {tmp_path.name}\n", "policy_test")
    x = np.linspace(0.0, 1.0, 101)
    c = np.array([0.0, 0.5, 1.0])
    out = np.zeros(7)
    mod.caller(x, c, out)
    want = [sum(1.0 / np.sqrt(v * v + 0.5) for v in x[j:]) for j in range(7)]
    np.testing.assert_allclose(out, want, rtol=1e-12)
    defs = _linkages(mod.caller.inspect_llvm(mod.caller.signatures[0]))
    gufunc = [n for n in defs if n.startswith("__gufunc__")]
    assert gufunc, "the parfor's gufunc is not in the caller's module"
    assert [defs[n] for n in gufunc] == ["internal"] * len(gufunc)
    assert {n: k for n, k in defs.items() if k in ("linkonce_odr", "weak_odr")} == {}


def test_internalize_linked_leaves_the_modules_own_functions_external():
    ir = """
define linkonce_odr i32 @callee(i32 %x) { ret i32 %x }
define weak_odr i32 @wrapper(i32 %x) { ret i32 %x }
define weak_odr i32 @own_weak(i32 %x) { ret i32 %x }
define i32 @kernel(i32 %x) {
  %a = call i32 @callee(i32 %x)
  %b = call i32 @wrapper(i32 %a)
  %c = call i32 @own_weak(i32 %b)
  ret i32 %c
}
"""
    mod = llvm.parse_assembly(ir)
    assert _numba_policy.internalize_linked(mod, {"callee", "wrapper", "kernel"}) == 2
    link = {f.name: f.linkage for f in mod.functions}
    assert link["callee"] == llvm.Linkage.internal
    assert link["wrapper"] == llvm.Linkage.internal
    assert link["own_weak"] == llvm.Linkage.weak_odr
    assert link["kernel"] == llvm.Linkage.external


def test_the_policy_is_installed_once_on_import():
    from numba.core import codegen

    method = codegen.CPUCodeLibrary._optimize_final_module
    assert hasattr(method, "__wrapped__")
    _numba_policy.install()
    assert codegen.CPUCodeLibrary._optimize_final_module is method
    assert propopt.__version__
