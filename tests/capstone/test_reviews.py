"""Each review at a tiny size: its rows, peers, errors and GPU rows (torch's CUDA faked)."""

import pytest

from capstone import reviews
from capstone.progress import Progress
from capstone.reviews import common

TINY = {
    "scan": {"LENGTH": {"small": 1 << 12}},
    "mamba": {"SHAPES": {"small": (32, 64)}},
    "topk": {"SIZES": {"small": (20_000, 5000)}},
    "nbody": {"SIZES": {"small": 400}, "SAMPLE": 50},
    "lowrank": {"SIZES": {"small": 120}},
}
PEERS = {
    "scan": 3,
    "mamba": 3,
    "topk": 2,
    "nbody": 2,  # the exact sum and pytreegrav (in the bench extra)
    "lowrank": 2,
}


def _shrink(monkeypatch, name):
    mod = reviews.ALL[name]
    for attr, value in TINY[name].items():
        monkeypatch.setattr(mod, attr, value)
    monkeypatch.setattr(mod, "ROUNDS", {"small": 1})
    return mod


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TINY))
def test_review_rows(name, monkeypatch):
    if name in ("nbody", "lowrank"):
        pytest.importorskip("pytreegrav" if name == "nbody" else "sklearn")
    mod = _shrink(monkeypatch, name)
    rows = mod.review("small", Progress(1.0, min_interval_s=1e9))
    assert len(rows) == PEERS[name]
    for r in rows:
        assert r.peer and r.peer_ms > 0 and r.propopt_ms > 0 and r.rounds == 1
        assert r.device.startswith("cpu")
        limit = {"ids": 0, "median rel": 5e-3}.get(r.error_kind, 1e-4)
        assert 0 <= r.error <= limit, (r.problem, r.peer, r.error)
        if name == "mamba":  # forward and floor timed in rounds of their own
            assert r.floor_x is not None and r.floor_x > 0 and r.floor_ratio == r.floor_x


def test_floor_ratio_is_the_interleaved_one_when_measured():
    from capstone.rows import Row

    args = ("p", "small", "b", "k", "t", "peer", 10.0, 2.0, 5.0, 4.0, 6.0, 3, 0.0, "max rel",
            "cpu", 0.0, False)  # fmt: skip
    assert Row(*args, floor="f", floor_ms=1.0).floor_ratio == 2.0
    assert Row(*args, floor="f", floor_ms=1.0, floor_x=1.3).floor_ratio == 1.3
    assert Row(*args).floor_ratio is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scan", "mamba", "topk", "nbody"])
def test_each_review_adds_a_gpu_row_when_a_gpu_is_seen(name, monkeypatch):
    """The GPU rows' plumbing, with torch's CUDA faked by the CPU.

    ``Tensor.cuda`` is made the identity, so each GPU row measures the CPU
    paths of the same calls (the N-body row runs the CUDA kernels in numba's
    simulator).  On a machine with a GPU the same code moves the data there.
    """
    import torch

    if name == "nbody":
        pytest.importorskip("numba.cuda")
    mod = _shrink(monkeypatch, name)
    monkeypatch.setattr(common, "gpu_name", lambda: "Test GPU")
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    rows = mod.review("small", Progress(1.0, min_interval_s=1e9))
    gpu = [r for r in rows if r.device == "cuda (Test GPU)"]
    assert len(gpu) == 1
    assert gpu[0].peer_ms > 0 and gpu[0].propopt_ms > 0 and gpu[0].error <= 5e-3
