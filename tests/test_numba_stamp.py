"""propopt's cached kernels follow edits of the propopt modules they call (propopt._numba_stamp)."""

import subprocess
import sys
import textwrap

import pytest

KERNEL = """
import numba
from . import helper

@numba.njit(cache=True)
def kernel(x):
    return helper.f(x) + 1.0
"""

CHILD = """
import sys
sys.path.insert(0, {root!r})
import propopt._numba_stamp as stamp
if {ours}:
    stamp.PACKAGES = (*stamp.PACKAGES, "stamppkg")
from stamppkg.kern import kernel
print(kernel(1.0))
"""


def _helper(root, scale):
    (root / "stamppkg" / "helper.py").write_text(
        f"import numba\n\n\n@numba.njit(cache=True)\ndef f(x):\n    return {scale} * x\n"
    )


def _run(root, ours):
    child = textwrap.dedent(CHILD.format(root=str(root), ours=ours))
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return float(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("ours", [True, False], ids=["stamped", "numba-alone"])
def test_an_edit_of_a_called_module_reaches_the_next_process(tmp_path, ours):
    """With the stamp the kernel is rebuilt after its helper's edit; numba alone keeps it."""
    pkg = tmp_path / "stamppkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kern.py").write_text(KERNEL)
    _helper(tmp_path, 2.0)
    assert _run(tmp_path, ours) == 3.0
    assert _run(tmp_path, ours) == 3.0  # from the cache
    assert list((pkg / "__pycache__").glob("kern.kernel-*.nbi")), "the kernel was not cached"
    _helper(tmp_path, 5.0)
    got = _run(tmp_path, ours)
    if ours:
        assert got == 6.0
    else:  # numba keys the cache by kern.py alone: the stale kernel (what the stamp prevents)
        assert got == 3.0


def test_propopt_kernels_are_stamped_by_what_they_call():
    """The logaddexp scan's module reaches propopt.vmath; the stamp has one hash per module."""
    import propopt  # noqa: F401  (installs the locators)
    from propopt import _numba_stamp
    from propopt.associativity import _cpu_logsum  # noqa: F401

    names = [name for name, _ in _numba_stamp.stamp("propopt.associativity._cpu_logsum")]
    assert "propopt.vmath" in names and "propopt.associativity._cpu_logsum" in names
    assert names == sorted(set(names))
    assert _numba_stamp._ours("_propopt_gen_cpu_add_float32")
    assert not _numba_stamp._ours("numpy.linalg")
