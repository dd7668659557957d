"""One place for the numba policy: caching, and loading generated kernels.

Kernels whose body depends on a user's combine function and on the number of
arrays in an element are generated as Python source (see
``associativity/_cpu.py``).  Generated source is written to a file named by
its hash and imported from there, so that numba's on-disk cache
(``cache=True``) works for it exactly as for hand-written modules.  A user's
function enters that source through :func:`splice` (``_splice.py``): its code,
the values it captures and everything it reads, written out, so that the file
name is a key of what the kernel computes, wherever and however the function
was defined (a script, a notebook cell, a closure, a lambda).  Source that
needs objects which cannot be written out (an array, an arbitrary object) is
executed in memory instead, keyed by those objects' contents where it can be,
and compiled without caching.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numba
import numba.core.event

from . import _splice, files
from ._splice import Spliced

_loaded: dict[str, ModuleType] = {}

#: Why a generated module is compiled in memory, not cached on disk: module name -> reason
_reasons: dict[str, str] = {}

#: Compiled kernel modules per owner (a monoid) and kind: held beside the
#: owner, not in it, so that owners pickle and compare as plain objects, and
#: dropped with the owner.
_kernels: weakref.WeakKeyDictionary[Any, dict[str, dict[Any, Any]]] = weakref.WeakKeyDictionary()
_kernels_lock = threading.Lock()


def kernel_cache(owner: Any, kind: str) -> dict[Any, Any]:
    """The dict of ``owner``'s compiled ``kind`` kernels (``"cpu"``, ``"cuda"``), made once."""
    with _kernels_lock:
        per_owner = _kernels.get(owner)
        if per_owner is None:
            per_owner = _kernels[owner] = {}
        return per_owner.setdefault(kind, {})


def cache_dir() -> Path:
    """Folder for generated kernel modules: ``$PROPOPT_CACHE_DIR`` or ``~/.cache/propopt``."""
    env = os.environ.get("PROPOPT_CACHE_DIR")
    base = Path(env) if env else Path.home() / ".cache" / "propopt"
    try:
        base.mkdir(parents=True, exist_ok=True)
        probe = base / ".write-test"
        probe.touch()
        probe.unlink()
    except OSError:
        base = Path(tempfile.gettempdir()) / f"propopt-{os.getuid()}"
        base.mkdir(parents=True, exist_ok=True)
    return base


def load_module(
    source: str,
    tag: str,
    namespace: dict[str, Any] | None = None,
    *,
    key: str | None = None,
    reason: str | None = None,
) -> ModuleType:
    """Import generated ``source`` once per process.

    With ``namespace=None`` the source must be self-contained (it imports
    what it uses); it is written to a file and numba may cache it.  With a
    namespace, the source is executed in memory with those globals, once per
    ``key`` (a description of the namespace's contents; by default the
    identities of its objects); ``reason`` says why, in the compile notice.
    """
    if key is None:
        # in-memory modules are keyed by the identity of the objects they close
        # over; _loaded keeps those objects alive, so their ids are not reused
        key = repr(sorted((k, id(v)) for k, v in (namespace or {}).items()))
    digest = hashlib.sha256((source + key).encode()).hexdigest()[:20]
    # a monoid's name may hold any character ("segmented(add)"): module names
    # and file names get identifier characters only
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in tag)
    name = f"_propopt_gen_{safe}_{digest}"
    if name in _loaded:
        return _loaded[name]
    if namespace is None:
        path = cache_dir() / f"{name}.py"
        if not path.exists():
            files.write_text(path, source)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        _reasons[name] = reason or "it refers to objects that cannot be written out"
        module = ModuleType(name)
        module.__dict__.update(namespace)
        exec(compile(source, f"<propopt generated {tag}>", "exec"), module.__dict__)
    _loaded[name] = module
    return module


#: The decorator of the functions a combine calls, in the CPU kernels: a division by
#: zero gives inf or NaN, as NumPy's, instead of raising (numba passes on no
#: exception from a thread of its pool; the combine itself compiles the same way).
KERNEL_HELPER = "numba.njit(cache=False, error_model='numpy')"


def splice(py: Any, alias: str, helper: str = "numba.njit(cache=False)") -> Spliced:
    """A user's function ``py`` as generated source defining ``alias`` (see ``_splice.py``).

    ``helper`` is the decorator given to the functions ``py`` calls.
    """
    return _splice.splice(py, alias, helper)


def load_spliced(spliced: Spliced, source: str, tag: str) -> ModuleType:
    """:func:`load_module` for ``source`` that holds ``spliced``: on disk, or in memory."""
    return load_module(source, tag, spliced.namespace, key=spliced.key, reason=spliced.reason)


def region_threads() -> int:
    """Threads numba's next parallel region from this thread uses (``numba.get_num_threads``).

    Inside :func:`propopt.threads.sized` that is the count the call was
    granted; :func:`propopt.get_num_threads` is the count the next call
    would be granted (the load estimate, capped by ``set_num_threads``).
    """
    return int(numba.get_num_threads())


# ------------------------------------------------------------ compile notice
#: A kernel whose compilation lasts longer than this (seconds) is announced
#: on stderr, in one line, while it compiles; quicker ones stay silent.
NOTICE_AFTER_S = 1.0

_OURS = ("propopt.", "propopt_case_studies.", "_propopt_gen_")


def _is_ours(dispatcher: Any) -> bool:
    py = getattr(dispatcher, "py_func", None)
    module = getattr(py, "__module__", None) or ""
    return module.startswith(_OURS)


def _describe(dispatcher: Any) -> tuple[str, str | None]:
    """A kernel's name for the notice, and why numba does not cache it on disk (or None)."""
    py = dispatcher.py_func
    module = py.__module__
    why = _reasons.get(module)
    if module.startswith("_propopt_gen_"):  # generated: _propopt_gen_<tag>_<hash>
        module = "generated " + module[len("_propopt_gen_") :].rsplit("_", 1)[0]
    cache = getattr(dispatcher, "_cache", None)
    if why is None and (cache is None or type(cache).__name__ == "NullCache"):
        why = "it is compiled in memory"
    return f"{py.__qualname__.replace('<locals>.', '')} ({module})", why


class _CompileNotice(numba.core.event.Listener):
    """Announces each of propopt's kernels whose compilation lasts over :data:`NOTICE_AFTER_S`.

    Only the outermost compilation is timed (a kernel compiles the functions
    it calls as part of its own compilation); compilations in other threads
    are timed apart.
    """

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream
        self.local = threading.local()

    def on_start(self, event: Any) -> None:
        disp = (event.data or {}).get("dispatcher")
        if not _is_ours(disp):
            return
        depth = getattr(self.local, "depth", 0)
        self.local.depth = depth + 1
        if depth == 0:
            timer = threading.Timer(NOTICE_AFTER_S, self._say, (disp,))
            timer.daemon = True
            self.local.timer = timer
            timer.start()

    def on_end(self, event: Any) -> None:
        disp = (event.data or {}).get("dispatcher")
        if not _is_ours(disp):
            return
        self.local.depth -= 1
        if self.local.depth == 0:
            self.local.timer.cancel()

    def _say(self, disp: Any) -> None:
        name, why = _describe(disp)
        after = (
            "cached on disk afterwards, so later runs skip this"
            if why is None
            else f"not cached on disk ({why}), so each new process repeats this"
        )
        stream = self.stream or sys.stderr
        stream.write(f"propopt: compiling {name} with numba on first use; {after}\n")
        stream.flush()


_notice: _CompileNotice | None = None


def install_compile_notice() -> None:
    """Register the compile notice with numba once (``PROPOPT_COMPILE_NOTICE=0`` turns it off)."""
    global _notice
    if _notice is None and os.environ.get("PROPOPT_COMPILE_NOTICE", "1") != "0":
        _notice = _CompileNotice()
        numba.core.event.register("numba:compile", _notice)


_NOISE = ("Failed in ", "During:", "File ", "<source", "Return of:", "^", "There are ")


def _gist(err: BaseException) -> str:
    """The one line of a numba typing error that says what is wrong."""
    lines = [ln.strip() for ln in str(err).splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(_NOISE)]
    if not lines:
        return type(err).__name__
    gist = lines[0]
    if gist.endswith(":") and len(lines) > 1:
        gist = f"{gist} {lines[1].lstrip('>').strip()}"
    return gist


def _compiling(err: BaseException) -> bool:
    """Whether ``err`` came out of numba's compiler (typing, lowering), not out of running code."""
    from numba.core.errors import NumbaError

    if isinstance(err, NumbaError):
        return True
    tb = err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(_NUMBA_CORE):
            return True
        tb = tb.tb_next
    return False


_NUMBA_CORE = os.path.join(os.path.dirname(numba.__file__), "core", "")


def _raised(what: str, err: Exception) -> Exception:
    """``err`` raised by the caller's compiled function, as one line that names it."""
    line = f"{what} raised {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    try:
        return type(err)(line.rstrip(": "))
    except Exception:  # an exception type that takes other arguments
        return RuntimeError(line.rstrip(": "))


@contextlib.contextmanager
def user_code(what: str, fix: str, *, runs: bool = False) -> Iterator[None]:
    """Turn numba's many-line error about a caller's function into one line.

    ``what`` names the caller's function (``"kernel=potential"``), ``fix``
    says what it must do; the line also quotes numba's own reason.  Any
    failure inside numba's compiler counts (a typing error, or an error
    lowering what the function does).  With ``runs=True`` the block only runs
    compiled code that holds the caller's function, so an exception it raises
    is the function's: it is raised again, of the same type, naming it.
    """
    try:
        yield
    except Exception as err:
        if _compiling(err):
            raise TypeError(
                f"{what} could not be compiled by numba ({_gist(err)}); {fix}"
            ) from None
        if runs:
            raise _raised(what, err) from err
        raise


@contextlib.contextmanager
def small_grids() -> Iterator[None]:
    """Launch kernels whose small grids are by design without numba's low-occupancy warning.

    A scan of a few thousand elements and the per-row digit picks of top-k
    use a handful of blocks on purpose; numba would warn the user
    ("Grid size 1 will likely result in GPU under-utilization") for each,
    and formatting that warning costs time at every launch.  The setting is
    numba's own (``CUDA_LOW_OCCUPANCY_WARNINGS``), restored on exit.
    """
    from numba.cuda import dispatcher

    config: Any = getattr(dispatcher, "config", None)  # absent in the simulator
    old = getattr(config, "CUDA_LOW_OCCUPANCY_WARNINGS", None)
    if old:
        config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
    try:
        yield
    finally:
        if old:
            config.CUDA_LOW_OCCUPANCY_WARNINGS = old
