"""The repository's layout: the design card's top level, and the packages that install."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later

ROOT = Path(__file__).resolve().parents[1]

#: The design card's top level, and what may stand beside it.
CARD = {"pyproject.toml", "README.md", "propopt", "case_studies", "benchmarks", "tests", "docs"}
BESIDE = {"ci", "asv.conf.json", "asv.large.conf.json", ".ci", ".gitignore"}


def _tracked_top_level() -> set[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return {line.split("/", 1)[0] for line in out.splitlines() if line}


def test_top_level_is_the_design_cards() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    top = _tracked_top_level()
    assert CARD <= top, f"missing from the top level: {sorted(CARD - top)}"
    assert top <= CARD | BESIDE, f"not on the design card: {sorted(top - CARD - BESIDE)}"


def test_case_studies_hold_the_three_studies() -> None:
    for study in ("mamba", "nbody", "streaming_topk"):
        assert (ROOT / "case_studies" / study / "__init__.py").is_file()
    assert not (ROOT / "propopt_case_studies").exists()


def test_listed_packages_are_the_folders() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = {"propopt": "propopt", **conf["package-dir"]}
    assert mapping["propopt_case_studies"] == "case_studies"
    found = set()
    for name, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join((name, *rel.parts)))
    assert set(conf["packages"]) == found


def test_import_name_maps_to_the_folder() -> None:
    import propopt_case_studies.nbody as nbody

    assert Path(nbody.__file__).resolve().parent == ROOT / "case_studies" / "nbody" or (
        "site-packages" in nbody.__file__  # an installed wheel, not the checkout
    )
