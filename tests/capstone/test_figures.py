"""Each fenced figures block of README.md and docs/*.md is what docs/figures.json gives."""

import json
import shutil

import pytest

from capstone import figures


def _doc():
    return json.loads(figures.JSON.read_text())


def test_committed_blocks_match_the_committed_json():
    stale = figures.update(_doc(), check=True)
    assert stale == [], f"run `python -m capstone.figures`: stale blocks {stale}"


def test_the_readme_shows_the_comparison():
    text = (figures.ROOT / "README.md").read_text()
    block = text.split("<!-- figures:compare -->")[1].split("<!-- /figures:compare -->")[0]
    assert "| workload | peer |" in block
    assert block.count("\n|") >= 4


def test_an_edited_figure_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copy(figures.ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(figures.ROOT / "docs" / "capstone.md", tmp_path / "docs" / "capstone.md")
    doc = _doc()
    assert figures.update(doc, root=tmp_path, check=True) == []
    page = tmp_path / "docs" / "capstone.md"
    text = page.read_text()
    head, rest = text.split("<!-- figures:review -->\n", 1)
    page.write_text(head + "<!-- figures:review -->\n" + rest.replace("x (", "x  (", 1))
    assert figures.update(doc, root=tmp_path, check=True) == ["docs/capstone.md:review"]
    figures.update(doc, root=tmp_path)  # rewriting restores the block
    assert figures.update(doc, root=tmp_path, check=True) == []


def test_an_unknown_block_is_an_error(tmp_path):
    (tmp_path / "README.md").write_text("<!-- figures:nosuch -->\nx\n<!-- /figures:nosuch -->\n")
    with pytest.raises(KeyError, match="nosuch"):
        figures.update(_doc(), root=tmp_path, check=True)
