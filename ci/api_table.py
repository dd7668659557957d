"""docs/api.md: every public verb's parameters, generated from the code.

    python ci/api_table.py           # rewrite docs/api.md
    python ci/api_table.py --check   # exit 1 when docs/api.md is stale

``tests/test_api.py`` runs the check and the vocabulary rules below.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

from propopt.files import write_text

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"

#: The packages whose ``__all__`` names are the public verbs: its functions (numba's
#: compiled ones too), and the public methods of its classes.  A name exported by two
#: packages is listed under the first.
PACKAGES = (
    "propopt",
    "propopt.associativity",
    "propopt.locality",
    "propopt.symmetry",
    "propopt.separability",
    "propopt.redundancy",
    "propopt.audit",
    "propopt.testing",
    "propopt.files",
    "propopt_case_studies.mamba",
    "propopt_case_studies.nbody",
    "propopt_case_studies.streaming_topk",
)

#: One name for one thing across verbs: the name a verb must use -> what it means.
VOCABULARY: dict[str, str] = {
    "axis": "the axis a scan or a selection runs along",
    "k": "how many to keep; every verb takes k >= 0",
    "largest": "the k largest (True) or smallest (False)",
    "nan": "where NaN ranks: 'ignore', 'largest' or 'smallest'",
    "out": "where to write the result, as NumPy's out=",
    "pos": "body positions (n, 3)",
    "mass": "one mass per body, or a scalar for all",
    "eps": "softening length per body, or a scalar",
    "targets": "where a field is evaluated (default: at the bodies)",
    "target_eps": "the targets' softening lengths",
    "softening": "'plummer' or 'spline'",
    "G": "the gravitational constant",
    "potential": "also return the potential: every N-body verb returns (acc, pot or None)",
    "theta": "opening angle of a tree or an FMM",
    "leaf_size": "most bodies in a tree leaf",
    "tol": "error target of the FMM",
    "method": "the algorithm (or 'auto')",
    "device": "where it runs: 'auto', 'cpu', 'cuda' or 'dask'",
    "points": "points of any kind (n, d) (morton order, moments)",
    "ndim": "how many coordinates a point has (NumPy's word; dim is torch's axis)",
    "seed": "a NumPy random seed or generator",
}

#: Names another verb uses for a thing of :data:`VOCABULARY`: never in a public verb.
SYNONYMS: dict[str, str] = {
    "dim": "axis",
    "masses": "mass",
    "m": "mass",
    "positions": "pos",
    "x_targets": "targets",
    "softening_length": "eps",
    "opening_angle": "theta",
    "n_threads": "threads",
    "num_threads": "threads",
    "topk": "k",
    "backend": "method",
    "impl": "method",
}

#: Names that follow a peer's own API on purpose (what users of that peer type).
PEER_NAMES: dict[str, str] = {
    "propopt_case_studies.mamba": "mamba_ssm's selective_scan_fn / mamba_chunk_scan_combined "
    "(u, delta, dt, delta_bias, dt_bias, initial_state(s), chunk_size, seq_idx, cu_seqlens)",
    "propopt.associative_scan": "jax.lax.associative_scan (fn, elems, reverse, axis)",
}


def _function(obj: Any) -> Any:
    """The Python function behind ``obj`` (a numba dispatcher's too), or None."""
    obj = getattr(obj, "py_func", obj)
    return obj if inspect.isfunction(obj) else None


def verbs() -> list[tuple[str, str, Any]]:
    """(package, name, function) of every public verb, in ``__all__`` order: functions as
    ``name``, a class's own public methods as ``Class.method``."""
    import importlib

    out: list[tuple[str, str, Any]] = []
    seen: set[int] = set()
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if isinstance(obj, type):
                found = [
                    (f"{name}.{attr}", _function(getattr(obj, attr)))
                    for attr, raw in vars(obj).items()
                    if not attr.startswith("_")
                    and (isinstance(raw, (classmethod, staticmethod)) or inspect.isfunction(raw))
                ]
            else:
                found = [(name, _function(obj))]
            for label, fn in found:
                if fn is not None and id(fn) not in seen:
                    seen.add(id(fn))
                    out.append((pkg, label, fn))
    return out


def _param(p: inspect.Parameter) -> str:
    if p.default is inspect.Parameter.empty:
        return f"`{p.name}`"
    d = p.default
    shown = d.__name__ if isinstance(d, type) else repr(d)
    if len(shown) > 24:
        shown = "..."
    return f"`{p.name}={shown}`"


def render() -> str:
    lines = [
        "# API: every public verb and its parameters",
        "",
        "Generated from the code by `python ci/api_table.py`; `tests/test_api.py`",
        "fails when this page and the code differ, or when a verb uses a name",
        "outside the vocabulary below for a thing the vocabulary names.",
        "",
    ]
    current = None
    for pkg, name, fn in verbs():
        if pkg != current:
            lines += [
                "",
                f"## `{pkg}`",
                "",
                "| verb | positional | keyword only |",
                "|---|---|---|",
            ]
            current = pkg
        params = inspect.signature(fn).parameters.values()
        pos = [_param(p) for p in params if p.kind != p.KEYWORD_ONLY and p.kind != p.VAR_KEYWORD]
        kw = [_param(p) for p in params if p.kind == p.KEYWORD_ONLY]
        lines.append(f"| `{name}` | {', '.join(pos) or '-'} | {', '.join(kw) or '-'} |")
    lines += ["", "## Vocabulary", "", "| name | means |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in VOCABULARY.items()]
    lines += ["", "Never used for these: " + ", ".join(
        f"`{k}` (say `{v}`)" for k, v in SYNONYMS.items()) + "."]  # fmt: skip
    lines += ["", "Names that follow a peer's API on purpose:", ""]
    lines += [f"* `{k}`: {v}." for k, v in PEER_NAMES.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not DOC.exists() or DOC.read_text() != text:
            print("docs/api.md is stale: run python ci/api_table.py", file=sys.stderr)
            return 1
        return 0
    write_text(DOC, text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
