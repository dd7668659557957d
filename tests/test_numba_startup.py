"""Numba's start-up under propopt skips ``scipy.linalg``, and BLAS still works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("scipy.linalg")

_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    if sys.argv[1] == "user-first":
        import numba
        numba.njit(lambda v: v + 1.0)(1.0)   # a user's numba function runs before propopt
    import propopt as pp
    x = np.arange(1.0, 9.0, dtype=np.float32)
    h = pp.associative_scan(pp.add, x)
    before = "scipy.linalg" in sys.modules
    import numba
    import numba.np.arraymath as am
    dot = numba.njit(lambda a, b: np.dot(a, b))
    a = np.arange(4.0)
    print(json.dumps({
        "scan": h.tolist(),
        "linalg_before_dot": before,
        "have_blas": bool(am._HAVE_BLAS),
        "dot": float(dot(a, a)),
        "matmul": np.asarray(numba.njit(lambda m: m @ m)(np.eye(3) * 2.0)).tolist(),
        "linalg_after_dot": "scipy.linalg" in sys.modules,
    }))
    """
)


def _child(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _expect_results(r: dict) -> None:
    assert r["scan"] == [float(sum(range(1, i + 1))) for i in range(1, 9)]
    assert r["have_blas"] is True  # numba's answer, as if it had imported scipy.linalg
    assert r["dot"] == 0.0 + 1.0 + 4.0 + 9.0
    assert r["matmul"] == [[4.0, 0.0, 0.0], [0.0, 4.0, 0.0], [0.0, 0.0, 4.0]]
    assert r["linalg_after_dot"] is True  # numba imported it where a kernel needed it


def test_a_propopt_kernel_does_not_import_scipy_linalg_and_blas_still_works() -> None:
    r = _child("propopt-first")
    assert r["linalg_before_dot"] is False
    _expect_results(r)


def test_after_a_users_numba_function_nothing_changes() -> None:
    r = _child("user-first")
    assert r["linalg_before_dot"] is True  # numba's own start-up ran before propopt was imported
    _expect_results(r)


def test_the_probe_answers_from_the_installed_files() -> None:
    from propopt import _numba_startup

    before = "scipy.linalg" in sys.modules
    assert _numba_startup._blas_installed() is True
    assert ("scipy.linalg" in sys.modules) == before
