"""Each compiled kernel calls its own copies of the functions it calls.

Numba compiles a jitted function that another one calls (without
``inline='always'``) as a library of its own, and links a copy of it into
every caller, as a *weak* (``linkonce_odr``) definition.  The caller's copy
is optimized a second time inside the caller's module, where fast-math flags
(``afn``, ``arcp``, ``reassoc``, ``contract``) let LLVM rewrite it
differently: measured in the tree walk of the N-body field, the standalone
float32 near field computes three ``1 / sqrt`` by ``vsqrtss`` and
``vdivss`` where the copy inside the walk uses an ``rsqrtss`` estimate.  The
dynamic linker binds a weak symbol to the first definition loaded into the
process.  So the process that compiles a kernel calls the callee's
standalone code (compiled just before), a process that loads the kernel
from numba's on-disk cache calls the copy in the kernel's own object code
(the callee is never loaded), and a process that loaded another kernel with
a copy of the same callee first calls that one: a result depended on whether
its kernel was compiled or cached, and on what ran before it.

:func:`install` makes the linked-in copies *internal* to the kernel that
links them, before the kernel's module is optimized: a kernel then always
runs exactly the code that was compiled for it (and written to the cache),
whatever else the process has loaded.  Only libraries that define one of
propopt's functions are changed; a user's own numba functions are left as
numba builds them.  Kernels cached before this policy keep their weak copies
until numba recompiles them (an edit of their source file, or an emptied
cache folder).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from llvmlite import binding as llvm
from numba.core import codegen

#: Mangled names of propopt's functions contain one of these (numba mangles
#: ``propopt.x.f`` to ``_ZN7propopt1x1f...``; generated kernel modules are
#: named ``_propopt_gen_<tag>_<hash>``).
_OURS = ("7propopt", "20propopt_case_studies", "_propopt_gen_")

_lock = threading.Lock()
_installed = False


def _ours(module: Any) -> bool:
    """Whether ``module`` defines one of propopt's functions with external linkage."""
    for fn in module.functions:
        if not fn.is_declaration and fn.linkage == llvm.Linkage.external:
            if any(tag in fn.name for tag in _OURS):
                return True
    return False


#: Linkages of a definition that the dynamic linker may replace by one loaded before.
_WEAK = frozenset(
    {
        llvm.Linkage.linkonce_odr,
        llvm.Linkage.weak_odr,
        llvm.Linkage.linkonce_any,
        llvm.Linkage.weak_any,
    }
)


def internalize_linked(module: Any, linked: Any = None) -> int:
    """Give the weak function definitions of ``module`` internal linkage.

    ``linked``: the names defined by the libraries linked in (the callees'
    copies, parfor gufuncs and their wrappers, numba's runtime helpers); with
    None, every weak definition.  The module's own functions are external
    and keep their linkage.  Returns how many definitions were changed.
    """
    changed = 0
    for fn in module.functions:
        if fn.is_declaration or fn.linkage not in _WEAK:
            continue
        if linked is None or fn.name in linked:
            fn.linkage = "internal"
            changed += 1
    return changed


def _linked_names(library: Any) -> set[str] | None:
    """Names of the functions that ``library``'s linking libraries define (None if unknown)."""
    libs = getattr(library, "_linking_libraries", None)
    if libs is None:
        return None
    names: set[str] = set()
    for lib in libs:
        for fn in lib._get_module_for_linking().functions:
            if not fn.is_declaration:
                names.add(fn.name)
    return names


def install() -> None:
    """Make numba's CPU libraries that define propopt's functions call their own copies.

    Idempotent.  Wraps ``CPUCodeLibrary._optimize_final_module`` (the step of
    ``finalize`` after the linking libraries are linked in); where numba no
    longer has that step, warns once in one line and changes nothing.
    """
    global _installed
    with _lock:
        if _installed:
            return
        cls = codegen.CPUCodeLibrary
        original = getattr(cls, "_optimize_final_module", None)
        if original is None:  # a numba without that step: warn, and run as numba builds
            warnings.warn(
                "propopt: this numba has no CPUCodeLibrary._optimize_final_module, so a kernel "
                "compiled in this process may round differently from the same kernel loaded "
                "from the cache; pin numba<=0.68 for results that do not depend on it",
                RuntimeWarning,
                stacklevel=2,
            )
            _installed = True
            return

        def _optimize_final_module(self: Any) -> None:
            module = self._final_module
            if _ours(module):
                internalize_linked(module, _linked_names(self))
            original(self)

        _optimize_final_module.__wrapped__ = original  # type: ignore[attr-defined]
        cls._optimize_final_module = _optimize_final_module  # type: ignore[method-assign]
        _installed = True
