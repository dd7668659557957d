"""Each fenced figures block of README.md and docs/*.md is what docs/figures.json gives."""

import copy
import json
import shutil
import struct
import zlib

import pytest

from propopt_case_studies.capstone import figures, plots


def _doc():
    return json.loads(figures.JSON.read_text())


def test_committed_blocks_match_the_committed_json():
    stale = figures.update(_doc(), check=True)
    assert stale == [], (
        f"run `python -m propopt_case_studies.capstone.figures`: stale blocks {stale}"
    )


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


def test_committed_charts_come_from_the_committed_json():
    assert figures.stale_charts(_doc()) == [], (
        "run `python -m propopt_case_studies.capstone.figures`"
    )


def test_a_chart_from_another_run_is_found(tmp_path):
    pytest.importorskip("matplotlib")
    doc = _doc()
    paths = figures.draw(doc, root=tmp_path)
    assert [p.name for p in paths] == list(plots.CHARTS)
    assert figures.stale_charts(doc, root=tmp_path) == []
    import matplotlib.image

    assert matplotlib.image.imread(paths[0]).ndim == 3  # still a valid PNG after the stamp
    other = copy.deepcopy(doc)
    other["rows"][0]["speedup"] *= 2  # another run
    charts = [f"{figures.IMG}/{c}" for c in plots.CHARTS]
    assert figures.stale_charts(other, root=tmp_path) == charts
    (tmp_path / figures.IMG / "roofline.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # no stamp
    assert figures.stale_charts(doc, root=tmp_path) == [f"{figures.IMG}/roofline.png"]


def test_stamp_round_trip(tmp_path):
    path = tmp_path / "x.png"
    # the smallest PNG: a 1x1 grey image
    ihdr = b"IHDR" + bytes([0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0])
    idat = b"IDAT" + zlib.compress(b"\x00\x80")
    chunk = lambda b: struct.pack(">I", len(b) - 4) + b + struct.pack(">I", zlib.crc32(b))  # noqa: E731
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(ihdr) + chunk(idat) + chunk(b"IEND"))
    assert plots.stamp_of(path) is None
    plots.stamp(path, "0123abcd")
    assert plots.stamp_of(path) == "0123abcd"
    assert path.read_bytes().endswith(chunk(b"IEND"))
    assert plots.stamp_of(tmp_path / "missing.png") is None
