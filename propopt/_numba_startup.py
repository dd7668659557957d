"""Numba's start-up without SciPy's linear algebra, where no kernel needs it.

The first compiled function a process calls (compiled or loaded from the
cache) makes numba build its typing and lowering registries, and one of the
modules that does, ``numba.np.arraymath``, asks at import whether a BLAS is
there by importing ``scipy.linalg.cython_blas``.  That import is
``scipy.linalg`` as a whole, about 0.2 s of a 0.35 s start-up on a 2-core
AMD EPYC, paid by every process that runs any propopt kernel, though none of
them calls BLAS.

:func:`install` answers that one question from the installed files instead
(``importlib.util.find_spec``, which imports nothing of ``scipy.linalg``),
so the start-up no longer imports it.  Numba still imports it, and still
runs its own checks, the first time a kernel uses linear algebra
(``np.dot``, ``np.linalg``): every later call of ``ensure_blas`` is numba's
own.  Where ``numba.np.arraymath`` is already imported (a user's numba
function ran first), nothing is left to do and nothing is changed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from typing import Any

_TARGET = "numba.np.linalg"
_lock = threading.Lock()
_installed = False


def _blas_installed() -> bool:
    """Whether SciPy's Cython BLAS is installed, without importing ``scipy.linalg``."""
    try:
        scipy = importlib.util.find_spec("scipy")
    except (ImportError, ValueError):
        return False
    if scipy is None or not scipy.submodule_search_locations:
        return False
    locations = list(scipy.submodule_search_locations)
    linalg = importlib.machinery.PathFinder.find_spec("scipy.linalg", locations)
    if linalg is None or not linalg.submodule_search_locations:
        return False
    blas = importlib.machinery.PathFinder.find_spec(
        "scipy.linalg.cython_blas", list(linalg.submodule_search_locations)
    )
    return blas is not None


def _patch(linalg: Any) -> None:
    """Let ``numba.np.arraymath``'s one import-time BLAS probe skip the import."""
    real = linalg.ensure_blas

    def ensure_blas() -> None:
        arraymath: Any = sys.modules.get("numba.np.arraymath")
        probing = arraymath is not None and not hasattr(arraymath, "_HAVE_BLAS")
        if probing and _blas_installed():
            arraymath.ensure_blas = real  # later calls from arraymath are numba's own
            return
        real()

    ensure_blas.__wrapped__ = real  # type: ignore[attr-defined]
    linalg.ensure_blas = ensure_blas


class _Loader(importlib.abc.Loader):
    """Runs the real loader of ``numba.np.linalg``, then :func:`_patch`."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``numba.np.linalg`` as the path finder does, with :class:`_Loader` around it."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)  # once: numba.np.linalg is imported once
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Arrange for numba's start-up to skip the ``scipy.linalg`` import.  Idempotent."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        if "numba.np.arraymath" in sys.modules:
            return
        if _TARGET in sys.modules:
            _patch(sys.modules[_TARGET])
        else:
            sys.meta_path.insert(0, _Finder())
