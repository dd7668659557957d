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
from pathlib import Path
from types import ModuleType
from typing import Any

import numba

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
