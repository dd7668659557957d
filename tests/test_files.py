"""Files written whole or not at all: propopt.files and every writer that uses it.

Each writer is run with the final rename failing: a writer that wrote under
the final name directly would leave the new bytes there; through
:func:`propopt.files.atomic_write` the old bytes stay, no temporary file is
left, and the error is one line naming the file.
"""

import errno
import json
import os

import numpy as np
import pytest

import propopt as pp
from propopt import files


def _rename_fails(monkeypatch):
    def replace(src, dst):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", replace)


def _old(path, data=b"old"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def _assert_kept(path, old, err):
    assert path.read_bytes() == old
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    msg = str(err.value)
    assert "\n" not in msg and os.fspath(path.name) in msg and "Input/output error" in msg


def test_atomic_write_writes_whole_files(tmp_path):
    files.write_bytes(tmp_path / "a.bin", b"\x00\x01")
    files.write_text(tmp_path / "a.txt", "caf\u00e9\n")
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "caf\u00e9\n"
    files.write_text(tmp_path / "a.txt", "new")  # replaces
    assert (tmp_path / "a.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "a.txt"]
    with pytest.raises(ValueError, match=r"^mode='a': atomic_write writes a new file"):
        with files.atomic_write(tmp_path / "b", "a"):
            pass


def test_a_failed_block_leaves_the_old_file(tmp_path):
    path = tmp_path / "f.txt"
    old = _old(path)
    with pytest.raises(RuntimeError, match="stop"):
        with files.atomic_write(path) as f:
            f.write(b"half of the new")
            raise RuntimeError("stop")
    assert path.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_full_disk_leaves_the_old_file(tmp_path, monkeypatch, where):
    path = tmp_path / "f.bin"
    old = _old(path)
    full = OSError(errno.ENOSPC, "No space left on device")

    def fail(*args):
        raise full

    if where != "write":
        monkeypatch.setattr(os, where, fail)
    with pytest.raises(OSError) as err:
        with files.atomic_write(path) as f:
            f.write(b"new")
            if where == "write":
                fail()
    assert err.value.errno == errno.ENOSPC
    assert str(err.value) == (
        f"[Errno 28] No space left on device: could not write {str(path)!r} "
        "(a file already there is unchanged)"
    )
    assert path.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_an_unwritable_folder_is_one_line(tmp_path):
    with pytest.raises(OSError, match=r"^\[Errno 2\] No such file or directory: could not write"):
        files.write_bytes(tmp_path / "missing" / "f", b"")


def test_leapfrog_snapshot(tmp_path, monkeypatch):
    from propopt_case_studies.nbody import plummer_sphere
    from propopt_case_studies.nbody.integrate import leapfrog

    x, v, m = plummer_sphere(16, seed=0)
    run = dict(dt=0.01, steps=4, eps=0.1, method="direct", snapshot_dir=str(tmp_path),
               snapshot_every=2)  # fmt: skip
    leapfrog(x, v, m, **run)  # a run writes only among its own snapshots: snap_4 is rewritten
    path = tmp_path / "snap_00000004.npz"
    old = path.read_bytes()
    _rename_fails(monkeypatch)
    with pytest.raises(OSError) as err:
        leapfrog(resume=str(tmp_path / "snap_00000002.npz"), **run)
    _assert_kept(path, old, err)


def test_topk_save(tmp_path, monkeypatch):
    path = tmp_path / "s.topk"
    old = _old(path)
    s = pp.TopK.empty(3, np.float64).update(np.arange(10.0))
    _rename_fails(monkeypatch)
    with pytest.raises(OSError) as err:
        s.save(path)
    _assert_kept(path, old, err)


def test_generated_kernel_modules(tmp_path, monkeypatch):
    from propopt import _jit

    monkeypatch.setattr(_jit, "cache_dir", lambda: tmp_path)
    _rename_fails(monkeypatch)
    with pytest.raises(OSError, match=r"could not write .*_propopt_gen_atomic_test_"):
        _jit.load_module("X = 1\n", "atomic_test")
    assert list(tmp_path.iterdir()) == []  # neither the module nor a temporary file
    monkeypatch.undo()
    monkeypatch.setattr(_jit, "cache_dir", lambda: tmp_path)
    assert _jit.load_module("X = 1\n", "atomic_test").X == 1


def test_figures_json_and_pages(tmp_path, monkeypatch):
    from propopt_case_studies.capstone import figures

    path = tmp_path / "figures.json"
    old = _old(path)
    _rename_fails(monkeypatch)
    with pytest.raises(OSError) as err:
        figures.write_json({"machine": {}, "rows": []}, path)
    _assert_kept(path, old, err)

    page = tmp_path / "README.md"
    old = _old(page, b"<!-- figures:machine -->\nstale\n<!-- /figures:machine -->\n")
    doc = json.loads(figures.JSON.read_text())
    with pytest.raises(OSError) as err:
        figures.update(doc, root=tmp_path)
    _assert_kept(page, old, err)


def test_charts(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from propopt.locality import RooflineReport, plot_roofline
    from propopt_case_studies.capstone import figures, plots

    doc = json.loads(figures.JSON.read_text())
    olds = {
        name: _old(tmp_path / name, b"\x89PNG\r\n\x1a\nold\0\0\0\0IEND\0\0\0\0")
        for name in plots.CHARTS
    }
    _rename_fails(monkeypatch)
    with pytest.raises(OSError) as err:
        plots.write_plots(doc, tmp_path)
    _assert_kept(tmp_path / "speedup.png", olds["speedup.png"], err)
    with pytest.raises(OSError) as err:
        plots.stamp(tmp_path / "roofline.png", "0123")
    _assert_kept(tmp_path / "roofline.png", olds["roofline.png"], err)
    with pytest.raises(OSError) as err:
        plot_roofline(RooflineReport(100.0, 10.0, [], "float32", 0, 0), tmp_path / "roofline.png")
    _assert_kept(tmp_path / "roofline.png", olds["roofline.png"], err)
    monkeypatch.undo()
    plots.write_plots(doc, tmp_path)  # and with a working rename, stamped charts
    assert plots.stamp_of(tmp_path / "speedup.png") == plots.digest(doc)
    assert plots.stamp_of(tmp_path / "roofline.png") == plots.digest(doc)


def test_api_page(tmp_path, monkeypatch):
    from ci import api_table

    path = tmp_path / "api.md"
    old = _old(path)
    monkeypatch.setattr(api_table, "DOC", path)
    _rename_fails(monkeypatch)
    with pytest.raises(OSError) as err:
        api_table.main([])
    _assert_kept(path, old, err)


def test_every_writer_goes_through_propopt_files():
    # a new writer that opens its final name directly fails here: route it
    # through propopt.files (atomic_write, write_bytes, write_text)
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    direct = re.compile(
        r"open\([^)]*['\"][wax]b?['\"]|(?<!files)\.write_(text|bytes)\(|\.to_csv\(|\.tofile\("
        r"|(\.savefig|np\.save\w*|json\.dump)\((?!f\b)"
    )
    found = [
        f"{path.relative_to(root)}:{n}: {line.strip()}"
        for folder in ("propopt", "case_studies", "ci", "benchmarks")
        for path in sorted((root / folder).rglob("*.py"))
        if path.name != "files.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if direct.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []
