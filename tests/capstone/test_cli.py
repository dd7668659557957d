"""The capstone from the command line: ``python -m propopt capstone`` finds it by entry point."""

import json
import subprocess
import sys

import pytest

from propopt import cli as propopt_cli
from propopt_case_studies.capstone import cli, reviews
from propopt_case_studies.capstone.reviews import common
from propopt_case_studies.capstone.rows import (
    ERROR_KINDS,
    HEAD,
    MAX_WIDTH,
    MIN_WIDTH,
    SHORT_HEAD,
    Row,
    short_cells,
    short_table,
)


def _tiny(monkeypatch):
    monkeypatch.setattr(reviews.scan, "LENGTH", {"small": 1 << 12})
    monkeypatch.setattr(reviews.scan, "ROUNDS", {"small": 3})


def test_json_rows_name_their_peer_error_kind_and_spread(monkeypatch, capsys):
    _tiny(monkeypatch)
    assert propopt_cli.main(["capstone", "--size", "small", "--only", "scan", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert {"cpu", "cores", "sgemm_gflops", "copy_gbs"} <= set(doc["machine"])
    peers = {r["peer"].split(",")[0] for r in doc["rows"]}
    assert peers == {"np.cumsum (1 thread)", "torch.cumsum", "sequential numba loop"}
    for r in doc["rows"]:
        assert r["peer_ms"] > 0 and r["propopt_ms"] > 0 and r["rounds"] == 3
        assert r["spread_lo"] <= r["speedup"] <= r["spread_hi"]
        assert r["error_kind"] in ERROR_KINDS and 0 <= r["error"] < 1e-4
        assert r["floor_ms"] > 0 and r["load"] >= 0
    assert "scan (small)" in err and "s left" in err  # progress with an ETA on stderr


def test_the_table_has_one_metric_per_column(monkeypatch, capsys):
    _tiny(monkeypatch)
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(["--size", "small", "--only", "scan"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "sgemm" in lines[0] and "GFLOP/s" in lines[0]
    assert lines[1].split() == ["problem", "peer", "speedup", "(IQR)", "floor", "error"]
    assert "max rel" in " ".join(out.split()) and "copy" in out
    assert max(len(line) for line in lines[1:]) <= 100  # the table; line 0 is the machine
    table = [line for line in lines[1:] if not line.startswith("* busy:")]
    peers = _columns("\n".join(table))[1]
    for peer in ("np.cumsum (1 thread)", "torch.cumsum", "sequential numba loop"):
        assert "".join(peer.split()) in peers


def test_wide_and_json_keep_every_field(monkeypatch, capsys):
    _tiny(monkeypatch)
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["--size", "small", "--only", "scan", "--wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for col in HEAD:
        assert col in lines[1]
    body = lines[3:6]
    assert len(body) == 3 and all("cpu (" in line and "associativity" in line for line in body)
    assert max(len(line) for line in lines) > 120  # not cut to the terminal
    assert cli.main(["--size", "small", "--only", "scan", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    fields = set(Row.__dataclass_fields__)
    assert len(doc["rows"]) == 3 and all(set(r) == fields for r in doc["rows"])
    assert {"machine record", "compile ahead", "scan (small)"} <= set(doc["phases"])


def _long_rows(busy=False):
    peer = "pytreegrav.Accel defaults (theta 0.7, monopole, parallel), 2 torch threads"
    return [
        Row("prefix sum, 2^24 float32", "default", "b", "k", "t", "np.cumsum (1 thread)", 48.2,
            17.8, 2.8, 1.5, 3.5, 7, 1.6e-5, "max rel", "cpu", 0.7, busy, "copy", 10.0),
        Row("N-body, Plummer sphere, N=50,000", "default", "b", "k", "t" * 100, peer, 149.0,
            47.3, 3.2, 3.2, 3.2, 3, 4.1e-4, "median rel", "cpu", 0.0, False),
        Row("streaming top-1000, 1e7 float32 in chunks of 1e6", "default", "b", "k", "t",
            "mamba_ssm selective_scan_ref", 62.6, 6.1, 99.7, 97.4, 112.5, 7, 0.0, "ids", "cpu",
            0.0, False, "read pass", 1.0, 7.3),
    ]  # fmt: skip


def _columns(text):
    """Each column's text, its lines joined without spaces (rich wraps cells onto more lines)."""
    lines = text.splitlines()
    head = lines[0]
    starts = [head.index(name) for name in SHORT_HEAD]
    assert set(lines[1]) == {"─"}  # the rule under the header
    cols = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else None
        cols.append("".join(line[start:end].replace(" ", "") for line in lines[2:]))
    return cols


@pytest.mark.parametrize("width", [400, MAX_WIDTH, 100, 80, MIN_WIDTH, 20])
@pytest.mark.parametrize("busy", [False, True])
def test_the_default_table_fits_its_width_and_keeps_every_cell(width, busy):
    rows = _long_rows(busy)
    text = short_table(rows, width)
    limit = max(MIN_WIDTH, min(MAX_WIDTH, width))
    assert max(len(line) for line in text.splitlines()) <= limit
    want = ["".join("".join(c.split()) for c in col) for col in zip(*map(short_cells, rows))]
    assert _columns(text) == want
    assert ("*" in text) == busy


def test_the_default_width_is_the_terminals_within_bounds(monkeypatch):
    from propopt_case_studies.capstone.rows import width_here

    for columns, want in (("100", 100), ("300", MAX_WIDTH), ("30", MIN_WIDTH)):
        monkeypatch.setenv("COLUMNS", columns)
        assert width_here() == want
        text = short_table(_long_rows())
        assert max(len(line) for line in text.splitlines()) <= want


def test_gpu_rows_measure_on_a_gpu_and_report_a_failing_one(monkeypatch):
    assert common.gpu_rows("p", lambda d: [d]) == []  # torch sees no GPU here
    monkeypatch.setattr(common, "gpu_name", lambda: "Test GPU")
    assert common.gpu_rows("p", lambda d: [d]) == ["cuda (Test GPU)"]

    def broken(device):
        raise RuntimeError("no kernel image is available")

    with pytest.warns(RuntimeWarning, match=r"p: the GPU row failed on Test GPU \(RuntimeError"):
        assert common.gpu_rows("p", broken) == []


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--only", "fft"], ["--only", "'fft'", "mamba", "nbody", "topk"]),
        (["--size", "huge"], ["--size", "'huge'", "small", "default", "large"]),
        (["--colour"], ["--colour"]),
    ],
)
def test_user_errors_are_one_line_and_exit_2(argv, words, capsys):
    assert propopt_cli.main(["capstone", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("python -m propopt capstone: error:")
    for w in words:
        assert w in err


def test_the_library_finds_the_capstone_by_entry_point_only():
    assert propopt_cli.command("capstone") is cli.main
    assert propopt_cli.command("no-such-command") is None
    src = open(propopt_cli.__file__).read()
    assert (
        "import propopt_case_studies.capstone" not in src
        and "from propopt_case_studies.capstone" not in src
    )


def test_a_missing_optional_dependency_is_one_line_naming_the_extra(monkeypatch, capsys):
    def no_torch(args):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(cli, "_run", no_torch)
    assert cli.main(["--size", "small"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "the capstone needs the package 'torch'" in err and "pip install 'propopt[torch]'" in err


def test_a_missing_rich_names_the_extra_that_installs_it(monkeypatch, capsys):
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    def no_rich(args):
        raise ModuleNotFoundError("No module named 'rich'", name="rich")

    monkeypatch.setattr(cli, "_run", no_rich)
    assert cli.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install 'propopt[bench]'" in err
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert any(d.startswith("rich") for d in extras["bench"])
    assert "bench" in extras["all"][0]  # the capstone runs from .[all]


def test_module_entry_point_exits_nonzero_without_traceback():
    p = subprocess.run(
        [sys.executable, "-m", "propopt", "capstone", "--only", "x"], capture_output=True, text=True
    )
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "invalid choice" in p.stderr


def test_plot_writes_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    from propopt_case_studies.capstone.plots import plot_speedups

    rows = [Row("p, n=1", size, "b", "k", "t", "peer", 2.0, 1.0, 2.0, 1.9, 2.1, 3, 0.0, "max rel",
                "cpu", 0.0, False) for size in ("small", "default")]  # fmt: skip
    path = plot_speedups(rows, tmp_path / "speedup.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(HEAD) == 10
