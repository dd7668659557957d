"""A user's function as source for a generated kernel module, keyed by what it computes.

A combine (or pair kernel) is spliced into generated kernel source so that
numba compiles it inline and caches the kernel on disk.  The module is named
by a hash of its source, so the source must say everything the function
computes with:

* its code: the bytecode, constants and names (not its line numbers or file
  name, so that a notebook cell re-run or a closure made afresh on every call
  gives the same kernel);
* the values it captures (numbers, tuples of numbers, dtypes), written out as
  literals;
* every global it reads or calls: a module by its name, a library function
  (``np.exp``, ``math.log1p``) by its import path, a constant by its value,
  and a helper (a plain function or a numba dispatcher) spliced in the same
  way, recursively, so that an edit to a helper or to a module constant gives
  a new module and a new kernel.

The function itself is rebuilt in the module from its marshalled code object
with a globals dict of its own (two helpers may read one global name with
different values).  What cannot be written as source (an array, an arbitrary
object) is bound in memory instead: the module is then executed in memory,
keyed by the array's contents (or the object's identity), and ``reason``
says why it is not cached on disk and what to do about it.
"""

from __future__ import annotations

import builtins
import dis
import functools
import hashlib
import marshal
import math
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Modules whose attributes are library code: referred to by import path.
_LIBRARIES = frozenset({"math", "cmath", "numpy", "numba", "operator"})

#: propopt's own modules of numba functions that a combine may call (``propopt.vmath``):
#: referred to by import path, as a library is, and keyed by a hash of their source.
_OWN_LIBRARIES = frozenset({"propopt.vmath"})

_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})


@dataclass(frozen=True)
class Spliced:
    """A function written as module source (see the module docstring).

    ``source`` defines ``alias``; ``namespace`` holds the objects it needs
    that could not be written out (``None`` when there are none: the module
    can be written to a file and cached on disk); ``key`` identifies those
    objects by content where it can; ``reason`` says, for the compile notice,
    why the module is not cached on disk.
    """

    source: str
    namespace: dict[str, Any] | None = None
    key: str = ""
    reason: str | None = None
    #: Whether the source depends on nothing that can be rebound (a global
    #: other than a module or a library function, a captured variable): then it
    #: may be kept with the function's owner instead of being written again.
    stable: bool = False


@dataclass
class _Writer:
    helper: str  # decorator source for a helper the function calls
    lines: list[str] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)
    memory_key: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    done: dict[int, str] = field(default_factory=dict)  # id(function) -> its name here
    busy: set[int] = field(default_factory=set)
    owner: str = "the combine"
    stable: bool = True

    def fresh(self, stem: str) -> str:
        return f"_s{len(self.done) + len(self.memory)}_{stem}"


def splice(py: Any, alias: str, helper: str) -> Spliced:
    """Source that defines ``alias`` as the function ``py`` computes.

    ``helper`` is the decorator (as source) given to the functions ``py``
    calls, e.g. ``"numba.njit(cache=False)"`` or ``"cuda.jit(device=True)"``.
    """
    py = getattr(py, "py_func", py)
    w = _Writer(helper, owner=repr(getattr(py, "__name__", "the combine")))
    w.lines += ["import marshal as _marshal", "import types as _types", "import numba", ""]
    w.lines.append(_MAKE)
    name = _function(w, py)
    w.lines.append(f"{alias} = {name}")
    source = "\n".join(w.lines) + "\n"
    if not w.memory:
        return Spliced(source, stable=w.stable)
    key = hashlib.sha256("|".join(w.memory_key).encode()).hexdigest()[:16]
    return Spliced(source, dict(w.memory), key, "; ".join(dict.fromkeys(w.reasons)))


_MAKE = '''def _make(code, glb, name, closure, defaults):
    """A function from its marshalled code, its own globals and its captured values."""
    cells = tuple(_types.CellType(v) for v in closure)
    glb["__name__"] = __name__  # of this module: numba finds a called function through it
    return _types.FunctionType(marshal_code(code), glb, name, defaults, cells or None)


def marshal_code(hexed):
    return _marshal.loads(bytes.fromhex(hexed))
'''


@functools.lru_cache(maxsize=1024)
def code_key(code: types.CodeType) -> str:
    """A hash of what ``code`` computes: bytecode, constants, names; not line numbers."""
    return hashlib.sha256(repr(_canon(code)).encode()).hexdigest()[:20]


@functools.lru_cache(maxsize=1024)
def _marshalled(code: types.CodeType) -> str:
    """``code`` marshalled, in hex, with a file name and first line that do not vary."""
    return marshal.dumps(code.replace(co_filename=f"<{code.co_name}>", co_firstlineno=1)).hex()


def _canon(obj: Any) -> Any:
    if isinstance(obj, types.CodeType):
        return (
            "code", obj.co_code, tuple(_canon(c) for c in obj.co_consts), obj.co_names,
            obj.co_varnames, obj.co_freevars, obj.co_cellvars, obj.co_argcount,
            obj.co_posonlyargcount, obj.co_kwonlyargcount, obj.co_flags, obj.co_name,
            getattr(obj, "co_exceptiontable", b""), sys.implementation.cache_tag,
        )  # fmt: skip
    if isinstance(obj, frozenset):
        return ("frozenset", tuple(sorted(repr(_canon(x)) for x in obj)))
    if isinstance(obj, tuple):
        return tuple(_canon(x) for x in obj)
    if isinstance(obj, float):
        return ("float", obj.hex())
    return obj


@functools.lru_cache(maxsize=1024)
def _globals_read(code: types.CodeType) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The global names ``code`` reads, each with the attribute chain read from it."""
    found: dict[tuple[str, tuple[str, ...]], None] = {}  # ordered, no repeats
    ins = list(dis.get_instructions(code))
    for i, op in enumerate(ins):
        if op.opname in _LOADS:
            chain: list[str] = []
            j = i + 1
            while j < len(ins) and ins[j].opname in ("LOAD_ATTR", "LOAD_METHOD"):
                chain.append(str(ins[j].argval))
                j += 1
            found[(str(op.argval), tuple(chain))] = None
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            found.update(dict.fromkeys(_globals_read(c)))
    return tuple(found)


def _function(w: _Writer, fn: Any) -> str:
    """Write ``fn`` (a plain function) into the module; its name there."""
    fn = getattr(fn, "py_func", fn)
    if id(fn) in w.done:
        return w.done[id(fn)]
    if id(fn) in w.busy or not isinstance(fn, types.FunctionType):
        return _in_memory(w, fn, f"it calls {fn!r}, which is not a plain function")
    w.busy.add(id(fn))
    code = fn.__code__
    glb = {}
    for gname, chain in _globals_read(code):
        if gname in fn.__globals__ or not hasattr(builtins, gname):
            glb[gname] = _global(w, fn, gname, chain)
    cells = [_cell(w, c, v) for v, c in zip(code.co_freevars, fn.__closure__ or ())]
    w.stable = w.stable and not cells
    defaults = _value(w, fn.__defaults__, "defaults") if fn.__defaults__ else "None"
    name = f"_f{len(w.done)}_{code.co_name}".replace("<", "").replace(">", "")
    w.done[id(fn)] = name
    w.busy.discard(id(fn))
    w.lines.append(f"# {code.co_name}: code sha256 {code_key(code)}")
    w.lines.append(f"{name}_g = {{{', '.join(f'{k!r}: {v}' for k, v in glb.items())}}}")
    w.lines.append(
        f"{name} = _make({_marshalled(code)!r}, {name}_g, {code.co_name!r}, "
        f"({''.join(c + ', ' for c in cells)}), {defaults})"
    )
    w.lines.append("")
    return name


def _cell(w: _Writer, cell: types.CellType, name: str) -> str:
    try:
        value = cell.cell_contents
    except ValueError:  # not yet assigned
        return _in_memory(w, None, f"it captures {name!r} before it is assigned")
    return _value(w, value, f"captured {name!r}")


def _global(w: _Writer, fn: types.FunctionType, gname: str, chain: tuple[str, ...]) -> str:
    """Source for the value of global ``gname`` of ``fn`` (read with attribute ``chain``)."""
    if gname not in fn.__globals__:
        return _in_memory(w, None, f"it reads the undefined global {gname!r}")
    value = fn.__globals__[gname]
    if isinstance(value, types.ModuleType):
        return _module(w, value, gname, chain)
    text = _callee_or_value(w, value, f"global {gname!r}")
    w.stable = w.stable and "." in text and not text.startswith("_")  # a library's name
    return text


def _module(w: _Writer, mod: types.ModuleType, gname: str, chain: tuple[str, ...]) -> str:
    """A module global: imported by name; the user's attributes read from it are keyed."""
    name = mod.__name__
    if name in _OWN_LIBRARIES:
        with open(str(mod.__file__), "rb") as f:
            w.lines.insert(0, f"# {name}: {hashlib.sha256(f.read()).hexdigest()[:16]}")
    elif name == "__main__" or name.split(".", 1)[0] not in _LIBRARIES:
        w.stable = False
        # a user's module: what is read from it is part of what the function computes
        for attr in chain[:1]:
            value = getattr(mod, attr, None)
            if isinstance(value, types.ModuleType):
                continue
            w.lines.append(f"# {gname}.{attr}: {_digest(w, value)}")
        if name == "__main__":
            return _in_memory(w, mod, f"it reads the module __main__ as {gname!r}")
    w.lines.insert(0, f"import {name}")
    return name


def _digest(w: _Writer, value: Any) -> str:
    """A description of ``value`` that changes when it does (for a comment in the source).

    A function is written into the module (unused there), so that its code and
    everything it reads in turn are part of the source.
    """
    py = getattr(value, "py_func", value)
    if isinstance(py, types.FunctionType):
        return "function " + _function(w, py)
    return _value(w, value, "a module attribute")


def _callee_or_value(w: _Writer, value: Any, what: str) -> str:
    py = getattr(value, "py_func", None)
    if isinstance(value, types.FunctionType) or isinstance(py, types.FunctionType):
        inner = _function(w, value)
        opts = getattr(value, "targetoptions", {}) or {}
        keep = {k: opts[k] for k in ("fastmath", "error_model") if k in opts}
        helper = w.helper
        if keep and helper.startswith("numba.njit("):
            for k in keep:  # the helper's own option replaces the default one
                helper = re.sub(rf", {k}=[^,)]*", "", helper)
            helper = helper[:-1] + "".join(f", {k}={v!r}" for k, v in keep.items()) + ")"
        jitted = f"{inner}_jit"
        if not any(ln.startswith(f"{jitted} = ") for ln in w.lines):
            w.lines.append(f"{jitted} = {helper}({inner})")
        return jitted
    mod = getattr(value, "__module__", None)
    qual = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if (
        mod and qual and mod.split(".", 1)[0] in _LIBRARIES | {"builtins"}
        and _resolve(mod, qual) is value
    ):  # fmt: skip
        w.lines.insert(0, f"import {mod}")
        return f"{mod}.{qual}"
    return _value(w, value, what)


def _resolve(mod: str, qual: str) -> Any:
    obj: Any = sys.modules.get(mod)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    return obj


def _value(w: _Writer, v: Any, what: str) -> str:
    """``v`` as a literal, or a name bound in memory."""
    if v is None or isinstance(v, (bool, int, str)):
        return repr(v)
    if isinstance(v, float):
        return f"float.fromhex({v.hex()!r})" if math.isfinite(v) else f"float({str(v)!r})"
    if isinstance(v, complex):
        return f"complex({_value(w, v.real, what)}, {_value(w, v.imag, what)})"
    if isinstance(v, np.generic) and v.dtype.kind in "biufc":
        w.lines.insert(0, "import numpy")
        return f"numpy.{v.dtype.name}({_value(w, v.item(), what)})"
    if isinstance(v, np.dtype):
        w.lines.insert(0, "import numpy")
        return f"numpy.dtype({v.str!r})"
    if isinstance(v, tuple):
        return "(" + "".join(_value(w, x, what) + ", " for x in v) + ")"
    if isinstance(v, types.ModuleType):
        return _module(w, v, what, ())
    if isinstance(v, type) or callable(v):
        return _callee_or_value(w, v, what) if not isinstance(v, type) else _type(w, v, what)
    if isinstance(v, np.ndarray):
        return _array(w, v, what)
    return _in_memory(w, v, f"it captures {type(v).__name__} ({what})")


#: Arrays up to this many bytes are written into the source by value (numba
#: compiles a captured or global array as a constant); larger ones are bound
#: in memory, keyed by a hash of their contents.
ARRAY_BYTES = 1 << 16


def _array(w: _Writer, v: np.ndarray, what: str) -> str:
    w.stable = False  # its contents can change under the same name
    c = np.ascontiguousarray(v)
    if c.dtype.kind in "biufc" and c.nbytes <= ARRAY_BYTES:
        w.lines.insert(0, "import numpy")
        return (
            f"numpy.frombuffer(bytes.fromhex({c.tobytes().hex()!r}), "
            f"numpy.dtype({c.dtype.str!r})).reshape({c.shape!r})"
        )
    digest = hashlib.sha256(c.view(np.uint8).data).hexdigest()[:16]
    why = (
        f"{what} is an array of {c.nbytes} bytes, above {ARRAY_BYTES}: pass it as an element "
        "of the scan instead"
    )
    return _in_memory(w, v, why, f"{c.dtype}{c.shape}{digest}")


def _type(w: _Writer, t: type, what: str) -> str:
    mod, qual = t.__module__, t.__qualname__
    if mod.split(".", 1)[0] in _LIBRARIES | {"builtins"} and _resolve(mod, qual) is t:
        w.lines.insert(0, f"import {mod}")
        return f"{mod}.{qual}"
    return _in_memory(w, t, f"it uses the class {qual} ({what})")


def _in_memory(w: _Writer, obj: Any, why: str, content: str | None = None) -> str:
    """Bind ``obj`` in memory (the module cannot be cached on disk); keyed by ``content``."""
    name = w.fresh("obj")
    w.memory[name] = obj
    w.memory_key.append(f"{name}={content if content is not None else id(obj)}")
    w.reasons.append(why)
    return name
