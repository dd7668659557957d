"""A contract type for import-linter: a module's private parts stay inside its package.

``X._y`` (any module or package whose name starts with one underscore) may
be imported only by ``X`` and modules inside ``X``.  import-linter's wildcards
replace whole module names, so this rule needs a contract of its own.
"""

from __future__ import annotations

from typing import Any

from importlinter import Contract, ContractCheck, fields, output


def _owner(module: str) -> str | None:
    """``X`` for ``X._y[.z]``: the package whose private part ``module`` is, or None."""
    parts = module.split(".")
    for k in range(1, len(parts)):
        if parts[k].startswith("_") and not parts[k].startswith("__"):
            return ".".join(parts[:k])
    return None


class PrivateModulesContract(Contract):
    """No module imports another package's underscore modules.

    Configuration: ``packages``, the root packages whose imports are checked.
    """

    type_name = "private_modules"
    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        roots = tuple(self.packages)  # type: ignore[attr-defined]
        broken = []
        for importer in sorted(graph.modules):
            if not importer.startswith(roots):
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                owner = _owner(imported)
                if owner is None or importer == owner or importer.startswith(owner + "."):
                    continue
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    broken.append((importer, imported, detail["line_number"]))
                if not graph.get_import_details(importer=importer, imported=imported):
                    broken.append((importer, imported, 0))
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, line in check.metadata["broken"]:
            output.print_error(f"{importer} (line {line}) imports the private {imported}")


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    part.append(m)
                    if m == node:
                        break
                if len(part) > 1 or node in edges.get(node, ()):
                    found.append(sorted(part))
    return found


class AcyclicModulesContract(Contract):
    """No import cycle between any two modules, a package and its own modules included.

    ``acyclic_siblings`` compares siblings only, so a package whose
    ``__init__`` imports a module that imports the package back passes it;
    this contract looks at every module.  Configuration: ``packages``.
    """

    type_name = "acyclic_modules"
    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        roots = tuple(self.packages)  # type: ignore[attr-defined]
        mine = {m for m in graph.modules if m.startswith(roots)}
        edges = {m: set(graph.find_modules_directly_imported_by(m)) & mine for m in mine}
        return ContractCheck(kept=not _cycles(edges), metadata={"cycles": _cycles(edges)})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error("import cycle: " + " <-> ".join(cycle))
