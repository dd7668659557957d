"""One place for the numba policy: caching, and loading generated kernels.

Kernels whose body depends on a user's combine function and on the number of
arrays in an element are generated as Python source (see
``associativity/_cpu.py``).  Generated source is written to a file named by
its hash and imported from there, so that numba's on-disk cache
(``cache=True``) works for it exactly as for hand-written modules.  Source
that refers to objects which cannot be imported by name (a lambda, a closure)
is executed in memory instead and compiled without caching.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numba
import numba.core.event

_loaded: dict[str, ModuleType] = {}


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


def load_module(source: str, tag: str, namespace: dict[str, Any] | None = None) -> ModuleType:
    """Import generated ``source`` once per process.

    With ``namespace=None`` the source must be self-contained (it imports
    what it uses); it is written to a file and numba may cache it.  With a
    namespace, the source is executed in memory with those globals.
    """
    # In-memory modules are keyed by the identity of the objects they close
    # over (two different lambdas must not share a kernel); _loaded keeps
    # those objects alive, so their ids are not reused.
    ident = sorted((k, id(v)) for k, v in (namespace or {}).items())
    key = hashlib.sha256((source + repr(ident)).encode()).hexdigest()[:20]
    name = f"_propopt_gen_{tag}_{key}"
    if name in _loaded:
        return _loaded[name]
    if namespace is None:
        path = cache_dir() / f"{name}.py"
        if not path.exists():
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        module = ModuleType(name)
        module.__dict__.update(namespace)
        exec(compile(source, f"<propopt generated {tag}>", "exec"), module.__dict__)
    _loaded[name] = module
    return module


def num_threads() -> int:
    """Threads numba's parallel regions use now (``numba.set_num_threads``)."""
    return int(numba.get_num_threads())


# ------------------------------------------------------------ compile notice
#: A burst of compilation that lasts longer than this (seconds) is announced
#: on stderr, in one line; quicker ones stay silent.
NOTICE_AFTER_S = 1.0

#: Compilations closer together than this (seconds) belong to one burst
#: (one call of a verb compiles several kernels in a row).
BURST_GAP_S = 0.5

_OURS = ("propopt.", "case_studies.", "_propopt_gen_")


def _is_ours(dispatcher: Any) -> bool:
    py = getattr(dispatcher, "py_func", None)
    module = getattr(py, "__module__", None) or ""
    return module.startswith(_OURS)


def _describe(dispatcher: Any) -> tuple[str, bool]:
    """A kernel's name for the notice, and whether numba caches it on disk."""
    py = dispatcher.py_func
    module = py.__module__
    if module.startswith("_propopt_gen_"):  # generated: _propopt_gen_<tag>_<hash>
        module = "generated " + module[len("_propopt_gen_") :].rsplit("_", 1)[0]
    cache = getattr(dispatcher, "_cache", None)
    cached = cache is not None and type(cache).__name__ != "NullCache"
    return f"{py.__qualname__} ({module})", cached


class _CompileNotice(numba.core.event.Listener):
    """Announces a burst of compilation of propopt's kernels that lasts over a second."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.depth = 0
        self.burst_start = 0.0
        self.last_end = -1e9
        self.timer: threading.Timer | None = None
        self.said = False

    def on_start(self, event: Any) -> None:
        disp = (event.data or {}).get("dispatcher")
        if not _is_ours(disp):
            return
        with self.lock:
            self.depth += 1
            if self.depth > 1:
                return
            now = time.monotonic()
            if now - self.last_end > BURST_GAP_S:  # a new burst
                self.burst_start, self.said = now, False
            if not self.said and self.timer is None:
                wait = max(0.0, NOTICE_AFTER_S - (now - self.burst_start))
                self.timer = threading.Timer(wait, self._say, (disp,))
                self.timer.daemon = True
                self.timer.start()

    def on_end(self, event: Any) -> None:
        disp = (event.data or {}).get("dispatcher")
        if not _is_ours(disp):
            return
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                self.last_end = time.monotonic()
                if self.timer is not None:
                    self.timer.cancel()
                    self.timer = None

    def _say(self, disp: Any) -> None:
        with self.lock:
            if self.said or self.timer is None:
                return
            self.said, self.timer = True, None
        name, cached = _describe(disp)
        after = (
            "cached on disk afterwards, so later runs skip this"
            if cached
            else "not cached (a lambda or closure), so each new process repeats this"
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
