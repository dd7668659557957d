"""A cached kernel is fresh only while the source of everything it calls in propopt is unchanged.

numba keys a function's on-disk cache by the source file that defines it,
and by nothing else: a kernel of ``propopt/associativity/_cpu_logsum.py``
that calls :func:`propopt.vmath.fexp` was loaded from the cache after an
edit of ``vmath.py``, and ran the old ``fexp``.  :func:`install` puts cache
locators in front of numba's for functions defined in propopt's packages
(and in the modules ``propopt._jit`` generates): their stamp is the content
hash of the defining file together with those of every propopt module that
the defining module reaches through its globals (a module it imports, or a
function, overload or kernel imported from one), transitively.

The stamp is worked out when numba first reads or writes the cache, not when
a kernel is decorated: by then the modules are imported whole, so the same
code gives the same stamp in every process.  A user's own numba functions
keep numba's locators.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from functools import cache
from typing import Any

from numba.core import caching

#: Top-level packages whose modules' kernels get the stamp (and whose modules count in it).
PACKAGES = ("propopt", "propopt_case_studies")

_lock = threading.Lock()
_installed = False


def _ours(name: str) -> bool:
    return name.split(".", 1)[0] in PACKAGES or name.startswith("_propopt_gen_")


def _referenced(mod: types.ModuleType) -> set[str]:
    """Names of propopt's modules that ``mod``'s globals are, or were imported from.

    A package's own submodules are left out: importing one anywhere sets it
    as an attribute of the package, so they would depend on what the process
    imported before.
    """
    out = set()
    for value in list(vars(mod).values()):
        name: Any
        if isinstance(value, types.ModuleType):
            name = value.__name__
            if name.startswith(mod.__name__ + "."):  # a submodule: set by any import of it
                continue
        else:
            name = getattr(value, "__module__", None)
            if name is None and hasattr(value, "py_func"):
                name = getattr(value.py_func, "__module__", None)
        if isinstance(name, str) and name != mod.__name__ and _ours(name) and name in sys.modules:
            out.add(name)
    return out


def _file_hash(path: str) -> bytes:
    st = os.stat(path)
    return bytes(caching._hash_source_file(path, st.st_mtime, st.st_size))


@cache
def _closure(module: str) -> tuple[str, ...]:
    """``module`` and the propopt modules it reaches, sorted (memoized per process)."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen or name not in sys.modules:
            continue
        seen.add(name)
        todo.extend(_referenced(sys.modules[name]))
    return tuple(sorted(seen))


def stamp(module: str) -> tuple[tuple[str, bytes], ...]:
    """The content hashes of ``module``'s file and of the propopt modules it reaches."""
    out = []
    for name in _closure(module):
        path = getattr(sys.modules[name], "__file__", None)
        if path and os.path.exists(path):
            out.append((name, _file_hash(path)))
    return tuple(out)


class _Stamp:
    """numba's stamp of the defining file with the modules' stamp, computed on first comparison."""

    def __init__(self, own: Any, module: str) -> None:
        self._own, self._module = own, module
        self._value: Any = None

    def value(self) -> Any:
        if self._value is None:
            self._value = (self._own, stamp(self._module))
        return self._value

    def __eq__(self, other: object) -> bool:
        return bool(self.value() == (other.value() if isinstance(other, _Stamp) else other))

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:  # written into numba's index as a plain tuple
        return (tuple, (self.value(),))


def _locator(base: type) -> type:
    class Locator(base):  # type: ignore[misc, valid-type]
        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if not _ours(getattr(py_func, "__module__", None) or ""):
                return None
            return super().from_function(py_func, py_file)

        def get_source_stamp(self) -> Any:
            return _Stamp(super().get_source_stamp(), self._propopt_module)

        def __init__(self, py_func: Any, py_file: str) -> None:
            super().__init__(py_func, py_file)
            self._propopt_module = py_func.__module__

    Locator.__name__ = Locator.__qualname__ = f"Propopt{base.__name__}"
    return Locator


def install() -> None:
    """Put the locators for propopt's kernels first in numba's list (once per process)."""
    global _installed
    with _lock:
        if _installed:
            return
        classes: list[Any] = caching.CacheImpl._locator_classes  # type: ignore[assignment]
        ours = [_locator(c) for c in (caching.UserProvidedCacheLocator,
                                      caching.InTreeCacheLocator,
                                      caching.UserWideCacheLocator)]  # fmt: skip
        classes[:0] = ours
        _installed = True
