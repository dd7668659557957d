"""Every parallel numba kernel of the case studies runs under propopt's thread policy.

Each module-level dispatcher compiled with ``parallel=True`` is wrapped so
that a call made from Python records whether it ran inside
:func:`propopt.threads.sized` (which :func:`propopt.threads.parallel` and the
library's verbs enter); then each case study's verbs run on small inputs.
"""

import importlib
import pkgutil

import numpy as np
import pytest
from numba.core.registry import CPUDispatcher

import propopt_case_studies
from propopt import threads

torch = pytest.importorskip("torch")


def _parallel_kernels():
    for info in pkgutil.walk_packages(propopt_case_studies.__path__, "propopt_case_studies."):
        if ".capstone" in info.name:
            continue  # measurement code: it times peers, it is not the library
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher) and obj.targetoptions.get("parallel"):
                yield mod, name, obj


@pytest.fixture
def calls(monkeypatch):
    seen = []
    for mod, name, kernel in list(_parallel_kernels()):

        def wrapped(*args, _k=kernel, _where=f"{mod.__name__}.{name}", **kw):
            seen.append((_where, getattr(threads._local, "depth", 0) > 0))
            return _k(*args, **kw)

        monkeypatch.setattr(mod, name, wrapped)
    return seen


def test_the_case_studies_have_parallel_kernels():
    names = {f"{m.__name__}.{n}" for m, n, _ in _parallel_kernels()}
    assert len(names) >= 10, names


def test_every_parallel_kernel_runs_sized(calls):
    from propopt_case_studies.mamba import chapter_scan, selective_scan, ssd_scan
    from propopt_case_studies.nbody import Octree, fmm, plummer_sphere

    rng = np.random.default_rng(0)
    b, d, L, n = 1, 8, 64, 4
    u, delta = rng.normal(size=(b, d, L)), rng.uniform(0.1, 1, (b, d, L))
    A, B, C = -rng.uniform(0.5, 1, (d, n)), rng.normal(size=(b, n, L)), rng.normal(size=(b, n, L))
    selective_scan(u, delta, A, B, C, z=u)
    Bc, Cc = (np.ascontiguousarray(v + 1j * v).view(np.float64) for v in (B, C))
    Ac = A + 1j * rng.normal(size=(d, n))
    selective_scan(u, delta, Ac, Bc, Cc)
    tc = [torch.tensor(v, requires_grad=True) for v in (u, delta, Ac, Bc, Cc)]
    selective_scan(*tc).real.sum().backward()  # the complex backward kernel
    chapter_scan(u.transpose(0, 2, 1), A, B.transpose(0, 2, 1), C.transpose(0, 2, 1),
                 delta.transpose(0, 2, 1))  # fmt: skip
    t = [torch.tensor(v, requires_grad=True) for v in (u, delta, A, B, C)]
    selective_scan(*t, z=t[0]).sum().backward()
    x = rng.normal(size=(1, 32, 2, 4))
    dt, Ah = rng.uniform(0.1, 1, (1, 32, 2)), -rng.uniform(0.5, 1, 2)
    Bs, Cs = rng.normal(size=(1, 32, 1, 4)), rng.normal(size=(1, 32, 1, 4))
    ssd_scan(x, dt, Ah, Bs, Cs, chunk_size=8)
    tt = [torch.tensor(v, requires_grad=True) for v in (x, dt, Ah, Bs, Cs)]
    ssd_scan(*tt, chunk_size=8).sum().backward()
    pos, _, mass = plummer_sphere(500, seed=1)
    Octree.build(pos, mass, eps=0.01).field(potential=True)
    fmm(pos, mass, eps=0.01)
    ran = {w for w, _ in calls}
    assert len(ran) >= 10 and "propopt_case_studies.mamba.scan._complex.backward" in ran, ran
    outside = sorted({w for w, sized in calls if not sized})
    assert calls and outside == [], f"parallel kernels run outside threads.sized: {outside}"


@pytest.fixture
def hf_compiled():
    """The decode kernels compiled (or loaded) before ``calls`` wraps the parallel ones: a
    kernel that calls a wrapped one (``_mamba_block`` calls ``_gemv``) cannot be typed."""
    pytest.importorskip("transformers")
    from propopt_case_studies.mamba import hf

    from .case_studies.mamba.test_hf import _build

    for which in ("mamba", "mamba2"):
        model = _build(which)
        ids = torch.randint(0, model.config.vocab_size, (1, 8))
        with torch.no_grad():
            hf.accelerate(model).generate(ids, max_new_tokens=3, do_sample=False)


def test_the_hf_decode_kernels_run_sized(hf_compiled, calls):
    from propopt_case_studies.mamba import exps_only, hf

    from .case_studies.mamba.test_hf import _build

    rng = np.random.default_rng(0)
    exps_only(rng.uniform(0.1, 1, (1, 16, 64)), -rng.uniform(0.5, 1, (64, 4)))
    for which in ("mamba", "mamba2"):
        model = _build(which)
        ids = torch.randint(0, model.config.vocab_size, (1, 8))
        with torch.no_grad():
            hf.accelerate(model).generate(ids, max_new_tokens=3, do_sample=False)
    ran = {w for w, _ in calls}
    assert {
        w for w in ran if "mamba.hf._kernels" in w
    } and "propopt_case_studies.mamba.floor._exps" in ran
    outside = sorted({w for w, sized in calls if not sized})
    assert outside == [], f"parallel kernels run outside threads.sized: {outside}"
