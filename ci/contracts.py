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
