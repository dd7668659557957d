"""The capstone from the command line: ``python -m propopt capstone`` finds it by entry point."""

import json
import subprocess
import sys

import pytest

from propopt import cli as propopt_cli
from propopt_case_studies.capstone import cli, reviews
from propopt_case_studies.capstone.reviews import common
from propopt_case_studies.capstone.rows import ERROR_KINDS, HEAD, Row


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
    assert cli.main(["--size", "small", "--only", "scan"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "sgemm" in lines[0] and "GFLOP/s" in lines[0]
    for col in ("problem", "peer", "speedup (IQR)", "vs floor", "error"):
        assert col in lines[1]
    assert "max rel" in out and "copy" in out


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
