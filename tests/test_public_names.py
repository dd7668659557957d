"""No public name is removed or renamed: each module's ``__all__`` against a stored list.

``tests/public_names.json`` holds, per public module, the names it exported
(``__all__``: propopt, its subpackages and their public modules, the case
studies and theirs) and, for public modules without an ``__all__``, the names
that callers import from them (``names``).  A module may export more; every
stored name must stay exported and importable.  When a name is meant to go,
deprecate it first and then remove it from the file in the same change.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

STORED = json.loads((Path(__file__).parent / "public_names.json").read_text())


@pytest.mark.parametrize("module", sorted(STORED["__all__"]))
def test_all_keeps_every_stored_name(module):
    mod = importlib.import_module(module)
    exported = set(getattr(mod, "__all__", ()))
    missing = sorted(set(STORED["__all__"][module]) - exported)
    assert not missing, f"{module}.__all__ no longer has {missing}"
    unresolved = sorted(n for n in exported if not hasattr(mod, n))
    assert not unresolved, f"{module}.__all__ names {unresolved}, which the module lacks"


@pytest.mark.parametrize("module", sorted(STORED["names"]))
def test_public_module_keeps_its_names(module):
    mod = importlib.import_module(module)
    missing = sorted(n for n in STORED["names"][module] if not hasattr(mod, n))
    assert not missing, f"{module} no longer has {missing}"


def test_the_stored_list_covers_every_package():
    """Every public (sub)package with an ``__all__`` is in the stored list (add a new one)."""
    import pkgutil

    import propopt
    import propopt_case_studies

    stored = set(STORED["__all__"]) | set(STORED["names"])
    unlisted = []
    for root in (propopt, propopt_case_studies):
        for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
            public = not any(p.startswith("_") for p in info.name.split("."))
            if info.ispkg and public and ".capstone" not in info.name:
                if hasattr(importlib.import_module(info.name), "__all__"):
                    unlisted += [] if info.name in stored else [info.name]
    assert not unlisted, f"add {unlisted} to tests/public_names.json"
