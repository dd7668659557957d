"""Every ```python block in README.md and docs/ runs, so the docs cannot rot."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks():
    for page in PAGES:
        for i, code in enumerate(BLOCK.findall(page.read_text())):
            yield pytest.param(code, id=f"{page.name}-{i}")


def test_docs_have_code():
    assert len(list(_blocks())) >= 5


@pytest.mark.parametrize("code", list(_blocks()))
def test_doc_block_runs(code):
    exec(compile(code, "<doc>", "exec"), {"__name__": "__doc__"})
