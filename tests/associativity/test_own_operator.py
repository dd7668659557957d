"""A user's combine is keyed by what it computes, not by its object.

Each case runs in subprocesses against a fresh kernel cache: a combine
written in ``__main__``, as a closure made afresh on every call, or as a
lambda compiles once per machine, and an edit to anything it computes with
(its body, a captured constant, a module global, a helper) gives a new
kernel and the new result.  The expected values are sequential float64 loops
written here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import propopt as pp
from propopt import _jit
from propopt.associativity import _cpu

# Counts the compilations and the cache loads of the kernels that ran, and
# prints the scan's last value: the child's report, as one JSON line.
_REPORT = """
import json as _json, sys as _sys
from propopt import _jit as _j
_mods = [m for n, m in _j._loaded.items() if n.startswith("_propopt_gen_cpu_")]
_disp = [d for m in _mods for d in vars(m).values() if hasattr(d, "stats")]
_hits = sum(sum(d.stats.cache_hits.values()) for d in _disp)
_miss = sum(sum(d.stats.cache_misses.values()) for d in _disp)
print(_json.dumps({"last": [float(v) for v in RESULT], "hits": _hits, "misses": _miss}))
"""


def _run(folder: Path, script: str, cache: Path) -> dict:
    env = dict(os.environ, PROPOPT_CACHE_DIR=str(cache / "gen"), NUMBA_CACHE_DIR=str(cache / "nb"))
    env["PROPOPT_COMPILE_NOTICE"] = "0"
    env["PYTHONPATH"] = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")])
    (folder / "main.py").write_text(_PRELUDE + textwrap.dedent(script) + _REPORT)
    out = subprocess.run(
        [sys.executable, str(folder / "main.py")], env=env, capture_output=True, text=True,
        timeout=300, cwd=folder,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


A = [0.5, 0.9, 0.7, 0.95]
B = [1.0, 2.0, -3.0, 4.0]
_PRELUDE = f"""
import numpy as np
import propopt as pp
a = np.array({A}, np.float64)
b = np.array({B}, np.float64)
"""


def _affine_loop(cap: float = np.inf, scale: float = 1.0) -> float:
    """The sequential fold of ``(a1 a2, min(a2 b1 + scale b2, cap))``, the first element as is."""
    h = B[0]
    for a, b in zip(A[1:], B[1:]):
        h = min(a * h + scale * b, cap)
    return h


@pytest.mark.slow
def test_main_closure_and_lambda_compile_once_per_machine(tmp_path):
    script = """
    def step():
        def affine(a1, b1, a2, b2):          # a closure made afresh on every call
            return a1 * a2, a2 * b1 + b2
        return pp.associative_scan(pp.Monoid(affine, identity=(1.0, 0.0)), (a, b))
    for _ in range(3):
        res = step()
    lam = pp.Monoid(lambda x, y: x + y, 0)
    import numba
    @numba.njit
    def twice(v):                             # a helper, called (not inlined) by the kernel
        return 2.0 * v
    dbl = pp.Monoid(lambda x, y: x + twice(y), 0.0)
    starts = np.array([True, False, True, False])
    RESULT = [res[1][-1], pp.associative_scan(lam, b)[-1], pp.associative_scan(dbl, b)[-1],
              pp.associative_scan(pp.add, b, reset=starts, method="tiled")[-1]]
    """
    cache = tmp_path / "cache"
    first = _run(tmp_path, script, cache)
    second = _run(tmp_path, script, cache)
    expected = [_affine_loop(), sum(B), B[0] + 2 * sum(B[1:]), B[2] + B[3]]
    assert first["last"] == pytest.approx(expected, rel=1e-12)
    assert second["last"] == first["last"]
    assert first["misses"] > 0  # compiled in the first process...
    assert second["misses"] == 0 and second["hits"] > 0  # ...and only loaded in the second


_EDITS = {
    "body": ("return a1 * a2, a2 * b1 + b2", "return a1 * a2, a2 * b1 + 2.0 * b2"),
    "constant": ("CAP = 5.0", "CAP = 3.25"),
    "captured": ("cap = 5.0", "cap = 3.25"),
    "helper": ("return v", "return 2.0 * v"),
}


@pytest.mark.slow
@pytest.mark.parametrize("what", list(_EDITS))
def test_an_edit_between_processes_gives_a_new_kernel(tmp_path, what):
    module = """
    import numba
    CAP = 5.0

    @numba.njit
    def scale(v):
        return v

    def capped(a1, b1, a2, b2):
        return a1 * a2, min(a2 * b1 + scale(b2), CAP)

    def make():
        cap = 5.0

        def closed(a1, b1, a2, b2):
            return a1 * a2, min(a2 * b1 + b2, cap)

        return closed
    """
    module = module.replace(
        "return a1 * a2, min(a2 * b1 + scale(b2), CAP)",
        "return a1 * a2, min(a2 * b1 + scale(b2), CAP)"
        if what != "body"
        else "return a1 * a2, a2 * b1 + b2",
    )
    script = """
    from usermod import capped, make
    if WHAT == "captured":
        capped = make()
    RESULT = [pp.associative_scan(pp.Monoid(capped, identity=(1.0, 0.0)), (a, b))[1][-1]]
    """
    cache = tmp_path / "cache"
    (tmp_path / "usermod.py").write_text(textwrap.dedent(module))
    script = f"WHAT = {what!r}\n" + textwrap.dedent(script)
    before = _run(tmp_path, script, cache)["last"][0]
    old, new = _EDITS[what]
    edited = textwrap.dedent(module).replace(old, new)
    assert edited != textwrap.dedent(module)
    (tmp_path / "usermod.py").write_text(edited)
    after = _run(tmp_path, script, cache)["last"][0]
    if what == "body":
        assert (before, after) == pytest.approx((_affine_loop(), _affine_loop(scale=2.0)))
    elif what in ("constant", "captured"):
        assert (before, after) == pytest.approx((_affine_loop(5.0), _affine_loop(3.25)))
    else:
        assert (before, after) == pytest.approx((_affine_loop(5.0), _affine_loop(5.0, 2.0)))


def test_a_captured_constant_is_part_of_the_key():
    def make(cap):
        def capped(a1, b1, a2, b2):
            return a1 * a2, min(a2 * b1 + b2, cap)

        return pp.Monoid(capped, identity=(1.0, 0.0))

    ab = (np.array(A), np.array(B))
    got = [pp.associative_scan(make(c), ab)[1][-1] for c in (5.0, 3.25, 5.0)]
    assert got == pytest.approx([_affine_loop(5.0), _affine_loop(3.25), _affine_loop(5.0)])
    f64 = np.dtype(np.float64)
    assert _cpu.kernels(make(5.0), f64) is _cpu.kernels(make(5.0), f64)
    assert _cpu.kernels(make(5.0), f64) is not _cpu.kernels(make(3.25), f64)


def test_a_closure_made_afresh_reuses_its_kernel():
    def make():
        def affine(a1, b1, a2, b2):
            return a1 * a2, a2 * b1 + b2

        return pp.Monoid(affine, identity=(1.0, 0.0))

    f32 = np.dtype(np.float32)
    assert _cpu.kernels(make(), f32) is _cpu.kernels(make(), f32)
    lam = [pp.Monoid(lambda x, y: x * y, 1) for _ in range(2)]
    assert _cpu.kernels(lam[0], f32) is _cpu.kernels(lam[1], f32)
    other = pp.Monoid(lambda x, y: x + y, 0)
    assert _cpu.kernels(other, f32) is not _cpu.kernels(lam[0], f32)


def test_a_captured_array_is_read_as_it_is_at_each_call(capsys):
    w = np.array([3.0, 0.0])

    def weighted(a, b):
        return a + w[0] * b

    m = pp.Monoid(weighted, 0.0)
    x = np.ones(4)
    assert pp.associative_scan(m, x).tolist() == [1.0, 4.0, 7.0, 10.0]
    w[0] = 1.0
    assert pp.associative_scan(m, x).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert _jit.splice(weighted, "_f").namespace is None  # small: written out, cached on disk


def test_the_notice_says_why_a_kernel_is_not_cached():
    from propopt._splice import ARRAY_BYTES

    w = np.zeros(ARRAY_BYTES // 8 + 1)
    w[0] = 2.0

    def scaled(a, b):
        return a + w[0] * b

    spliced = _jit.splice(scaled, "_f")
    assert spliced.namespace is not None
    mod = _jit.load_spliced(spliced, spliced.source + "def g(a, b):\n    return _f(a, b)\n", "t")
    reason = _jit._reasons[mod.__name__]
    assert "captured 'w' is an array" in reason and "pass it as an element" in reason
    assert pp.associative_scan(pp.Monoid(scaled, 0.0), np.ones(3)).tolist() == [1.0, 3.0, 5.0]
    w[0] = 1.0
    assert pp.associative_scan(pp.Monoid(scaled, 0.0), np.ones(3)).tolist() == [1.0, 2.0, 3.0]


def test_splice_writes_what_the_function_reads():
    import math

    k = 2.5

    def f(a, b):
        return math.exp(a) + np.float32(k) * b

    spliced = _jit.splice(f, "_f")
    assert spliced.namespace is None
    ns: dict = {}
    exec(compile(spliced.source, "<t>", "exec"), ns)
    assert ns["_f"](0.0, 2.0) == pytest.approx(1.0 + 2.5 * 2.0)
    assert _jit.splice(f, "_f").source == spliced.source  # deterministic


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_a_combine_numba_cannot_lower_is_one_line_naming_it():
    def to_text(a, b):
        return float(str(a))  # numba types str(float) but cannot lower it

    with pytest.raises(TypeError) as err:
        pp.associative_scan(pp.Monoid(to_text, 0.0), np.ones(5))
    assert "combine 'to_text' could not be compiled by numba" in _one_line(err)


def test_a_combine_that_raises_is_named():
    def fussy(a, b):
        if a > 2.0:
            raise ValueError("too big")
        return a + b

    with pytest.raises(ValueError) as err:
        pp.associative_scan(pp.Monoid(fussy, 0.0), np.ones(5))
    assert _one_line(err) == "combine 'fussy' raised ValueError: too big"


@pytest.mark.parametrize("kinds", ["z", "", "fz", 3])
def test_monoid_kinds_are_checked_when_it_is_made(kinds):
    with pytest.raises(ValueError) as err:
        pp.Monoid(lambda a, b: a + b, 0, kinds=kinds)
    assert f"kinds={kinds!r}" in _one_line(err) and "'iufc'" in str(err.value)
