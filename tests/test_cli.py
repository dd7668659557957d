"""``python -m propopt``: the capstone table, its options and its errors."""

import json
import subprocess
import sys

import pytest

from propopt import _capstone, cli


def test_capstone_json_rows_are_measured(capsys):
    assert cli.main(["capstone", "--size", "small", "--only", "scan", "--json"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)
    assert {r["problem"] for r in rows} >= {"prefix sum", "linear recurrence (Mamba's core)"}
    for r in rows:
        assert r["baseline_ms"] > 0 and r["optimized_ms"] > 0
        assert r["speedup"] == pytest.approx(r["baseline_ms"] / r["optimized_ms"])
        assert 0 <= r["rel_error"] < 1e-4  # float32 against float64
        assert r["device"]
    assert "scan (small)" in err and "done" in err  # progress goes to stderr


def test_capstone_table_has_the_review_columns(capsys):
    assert cli.main(["capstone", "--size", "small", "--only", "scan"]) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0].split()
    for col in ("problem", "bottleneck", "property", "technique", "baseline", "speedup"):
        assert col in head
    assert "np.cumsum" in out


def test_gpu_rows_measure_on_a_gpu_and_report_a_failing_one(monkeypatch):
    assert _capstone.gpu_rows("p", lambda d: [{"device": d}]) == []  # torch sees no GPU here
    monkeypatch.setattr(_capstone, "gpu_name", lambda: "Test GPU")
    assert _capstone.gpu_rows("p", lambda d: [{"device": d}]) == [{"device": "cuda (Test GPU)"}]

    def broken(device):
        raise RuntimeError("no kernel image is available")

    with pytest.warns(
        RuntimeWarning,
        match=r"p: the GPU row failed on Test GPU \(RuntimeError: "
        r"no kernel image is available\); the table has the CPU rows only",
    ):
        assert _capstone.gpu_rows("p", broken) == []


def test_a_review_keeps_its_cpu_row_when_its_gpu_row_fails(monkeypatch):
    # torch here has no CUDA: moving the scores to the GPU raises in the GPU row
    monkeypatch.setattr(_capstone, "gpu_name", lambda: "Test GPU")
    from case_studies.streaming_topk import review

    monkeypatch.setattr(review, "SIZES", {"small": (20_000, 5000)})
    with pytest.warns(RuntimeWarning, match="Streaming top-K: the GPU row failed on Test GPU"):
        (row,) = review.review("small")
    assert row["device"].startswith("cpu") and row["rel_error"] == 0


def test_every_problem_has_a_review_function():
    for name, path in _capstone.PROBLEMS.items():
        assert callable(_capstone.resolve(path)), name


@pytest.mark.parametrize(
    "argv, words",
    [
        (["capstone", "--only", "fft"], ["--only", "'fft'", "mamba", "nbody", "topk"]),
        (["capstone", "--size", "huge"], ["--size", "'huge'", "small", "default", "large"]),
        (["capstone", "--colour"], ["--colour"]),
        (["launch"], ["'launch'", "capstone", "audit"]),
        (["audit", "no_such_module:f"], ["no_such_module", "ModuleNotFoundError"]),
        (["audit", "math:no_such_function"], ["no_such_function", "AttributeError"]),
        (["audit", "math"], ["module:function"]),
        (["audit", "math:pi"], ["float", "not a callable"]),
    ],
)
def test_user_errors_are_one_line_and_exit_2(argv, words, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("python -m propopt: error:")
    for w in words:
        assert w in err


def test_module_entry_point_exits_nonzero_without_traceback():
    p = subprocess.run(
        [sys.executable, "-m", "propopt", "capstone", "--only", "x"], capture_output=True, text=True
    )
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "invalid choice" in p.stderr


def test_progress_bar_counts_steps():
    import io

    s = io.StringIO()
    p = _capstone.Progress(2, stream=s, width=4)
    p.step("a")
    p.advance()
    p.step("b")
    p.close()
    lines = s.getvalue().splitlines()
    assert lines[0].startswith("[....] 0/2") and lines[1].startswith("[##..] 1/2")
    assert lines[-1].startswith("[####] 2/2")


def test_plot_writes_pngs(tmp_path, capsys):
    rows = [
        _capstone.Row("p", "b", "k", "t", "base", 2.0, 1.0, 2.0, 0.0, "cpu", size)
        for size in ("small", "default")
    ]
    from propopt._plots import plot_speedups

    path = plot_speedups(rows, tmp_path / "speedup.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "problem, sizes",
    [
        ("scan", {"small": 1 << 12}),
        ("mamba", {"small": (64, 32)}),
        ("topk", {"small": (20_000, 5000)}),
        ("nbody", {"small": (300, 10)}),
    ],
)
def test_each_review_adds_a_gpu_row_when_a_gpu_is_seen(problem, sizes, monkeypatch):
    """The GPU rows' plumbing, with torch's CUDA faked by the CPU.

    torch here has no CUDA: ``Tensor.cuda`` is made the identity, so each
    GPU row measures the CPU paths of the same calls (the N-body row runs
    the CUDA kernels in numba's simulator).  On a machine with a GPU the
    same code moves the data to it.
    """
    import importlib

    import torch

    monkeypatch.setattr(_capstone, "gpu_name", lambda: "Test GPU")
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(_capstone, "REPEATS", 1)
    monkeypatch.setattr(_capstone, "WARMUP_S", 0.0)
    module, _, fn = _capstone.PROBLEMS[problem].partition(":")
    mod = importlib.import_module(module)
    table = "SCAN_LENGTH" if problem == "scan" else ("SHAPES" if problem == "mamba" else "SIZES")
    monkeypatch.setattr(mod, table, sizes)
    rows = getattr(mod, fn)("small")
    cpu = [r for r in rows if r["device"].startswith("cpu")]
    gpu = [r for r in rows if r["device"] == "cuda (Test GPU)"]
    assert len(cpu) == len(gpu) >= 1 and len(rows) == len(cpu) + len(gpu)
    for c, g in zip(cpu, gpu):
        assert g["problem"] == c["problem"] and g["baseline_ms"] > 0 and g["optimized_ms"] > 0
        assert g["speedup"] == pytest.approx(g["baseline_ms"] / g["optimized_ms"])
        assert 0 <= g["rel_error"] < 5e-3


def test_a_missing_optional_dependency_is_one_line_naming_the_extra(monkeypatch, capsys):
    def no_torch(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(cli, "_capstone_cmd", no_torch)
    assert cli.main(["capstone", "--size", "small"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "the capstone needs the package 'torch'" in err and "pip install 'propopt[torch]'" in err
