"""Snapshots survive crashes: atomic, checksummed, resumed from the newest intact one.

A snapshot is written whole or not at all (``propopt.files``), carries a
SHA-256 of its arrays, and ``resume=`` a folder skips each newer snapshot that
fails its checks with one warning line.  Every resumed run here ends bit for
bit where the uninterrupted one does.
"""

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import propopt as pp
from propopt_case_studies.nbody import plummer_sphere
from propopt_case_studies.nbody.integrate import leapfrog, load_snapshot

RUN = dict(dt=0.01, eps=0.05, method="direct")


@pytest.fixture(scope="module")
def ic():
    return plummer_sphere(48, seed=3)


@pytest.fixture(scope="module")
def whole(ic):
    return leapfrog(*ic, steps=10, **RUN)


def _crashed_run(ic, folder, steps=8):
    """Snapshots at steps 2, 4, ..., ``steps``: a run stopped there."""
    leapfrog(*ic, steps=steps, snapshot_dir=str(folder), snapshot_every=2, **RUN)
    return [folder / f"snap_{s:08d}.npz" for s in range(2, steps + 1, 2)]


def _same(run, whole):
    assert run.step == whole.step
    assert np.array_equal(run.pos, whole.pos) and np.array_equal(run.vel, whole.vel)
    assert np.array_equal(run.diag["energy"], whole.diag["energy"])


def _resume(folder, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = leapfrog(resume=str(folder), steps=10, **RUN, **kw)
    return run, [str(w.message) for w in caught]


def test_a_truncated_latest_snapshot_resumes_from_the_one_before(ic, whole, tmp_path):
    snaps = _crashed_run(ic, tmp_path)
    data = snaps[-1].read_bytes()
    snaps[-1].write_bytes(data[: len(data) // 2])  # a kill mid-write, without atomic writes
    run, said = _resume(tmp_path)
    _same(run, whole)
    assert len(said) == 1 and "\n" not in said[0]
    assert said[0].startswith("skipped the newer snapshot(s) snap_00000008.npz (truncated or not")
    assert said[0].endswith(f"resuming from {str(snaps[-2])!r}")


def test_a_damaged_file_names_the_snapshot_to_use(ic, tmp_path):
    snaps = _crashed_run(ic, tmp_path)
    snaps[-1].write_bytes(snaps[-1].read_bytes()[:100])
    with pytest.raises(ValueError) as err:
        leapfrog(resume=str(snaps[-1]), steps=10, **RUN)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"snapshot {str(snaps[-1])!r} is damaged (truncated or not a snapshot")
    assert msg.endswith(
        f"resume from {str(snaps[-2])!r}, the newest intact snapshot in that folder"
    )
    for s in snaps[:-1]:
        s.unlink()
    with pytest.raises(ValueError, match=r"no other snapshot in that folder is intact: start"):
        load_snapshot(str(snaps[-1]))


def test_altered_arrays_are_refused(ic, whole, tmp_path):
    snaps = _crashed_run(ic, tmp_path)
    with np.load(snaps[-1]) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["pos"][7, 1] += 1e-12  # unzips fine, holds other data
    np.savez(snaps[-1], **arrays)
    with pytest.raises(
        ValueError, match=r"is damaged \(checksum mismatch: its arrays are not those written"
    ):
        load_snapshot(str(snaps[-1]))
    run, said = _resume(tmp_path)
    _same(run, whole)
    assert len(said) == 1 and "snap_00000008.npz (checksum mismatch" in said[0]


def test_a_snapshot_under_another_steps_name_is_refused(ic, tmp_path):
    snaps = _crashed_run(ic, tmp_path)
    shutil.copy(snaps[-2], snaps[-1])
    with pytest.raises(ValueError, match=r"it holds step 6, not the step 8 of its name"):
        load_snapshot(str(snaps[-1]))


def test_a_checksum_less_snapshot_with_a_short_array_is_refused(ic, tmp_path):
    snaps = _crashed_run(ic, tmp_path)
    with np.load(snaps[-1]) as z:
        arrays = {k: z[k] for k in z.files if k != "checksum"}
    arrays["mass"] = arrays["mass"][:5]
    np.savez(snaps[-1], **arrays)
    with pytest.raises(ValueError, match=r"is damaged \(mass has shape \(5,\), not \(n,\)\)"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no checksum
            load_snapshot(str(snaps[-1]))


def test_no_intact_snapshot(ic, tmp_path):
    for s in _crashed_run(ic, tmp_path, steps=4):
        s.write_bytes(b"")
    with pytest.raises(ValueError) as err:
        leapfrog(resume=str(tmp_path), steps=10, **RUN)
    assert str(err.value).startswith(f"no intact snapshot in {str(tmp_path)!r}: snap_00000004.npz")
    assert "snap_00000002.npz" in str(err.value) and "\n" not in str(err.value)


def test_a_snapshot_without_checksum_loads_with_a_warning(ic, whole, tmp_path):
    snaps = _crashed_run(ic, tmp_path)
    with np.load(snaps[-1]) as z:
        arrays = {k: z[k] for k in z.files if k != "checksum"}
    np.savez(snaps[-1], **arrays)  # as written before snapshots carried a checksum
    run, said = _resume(tmp_path)
    _same(run, whole)
    assert said == [
        f"snapshot {str(snaps[-1])!r} has no checksum (written before snapshots carried one): "
        "its arrays are used unverified"
    ]


def test_a_full_disk_keeps_the_previous_snapshot(ic, whole, tmp_path, monkeypatch):
    real = np.savez
    calls = []

    def savez(file, **arrays):  # the second snapshot runs out of space partway
        calls.append(file)
        if len(calls) < 2:
            return real(file, **arrays)
        file.write(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", savez)
    with pytest.raises(OSError) as err:
        leapfrog(*ic, steps=10, snapshot_dir=str(tmp_path), snapshot_every=2, **RUN)
    monkeypatch.undo()
    target = tmp_path / "snap_00000004.npz"
    assert str(err.value) == (
        f"[Errno 28] No space left on device: could not write {str(target)!r} "
        "(a file already there is unchanged)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap_00000002.npz"]
    run, said = _resume(tmp_path)
    assert said == []
    _same(run, whole)


# ----------------------------------------------------------------- SIGKILL


CHILD = textwrap.dedent(
    """
    import os, sys, time
    import propopt as pp
    from propopt_case_studies.nbody import plummer_sphere
    from propopt_case_studies.nbody.integrate import leapfrog

    fsync = os.fsync
    hold, writes = int(sys.argv[2]), []

    def slow_fsync(fd):  # between a file's data and its rename
        path = os.readlink(f"/proc/self/fd/{{fd}}")
        writes.append("/.snap_" in path)
        if sum(writes) == hold and writes[-1]:  # the snapshot to be killed in: wait for it
            print("W", path, flush=True)
            time.sleep(60)
        time.sleep(0.02)
        fsync(fd)

    os.fsync = slow_fsync
    pp.set_num_threads(1)
    x, v, m = plummer_sphere(48, seed=3)
    print("R", flush=True)
    leapfrog(x, v, m, dt=0.01, eps=0.05, method="direct", steps={steps},
             snapshot_dir=sys.argv[1], snapshot_every=1)
    print("D", flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_sigkill_at_random_moments_then_resume(ic, tmp_path):
    steps, kills = 60, 20
    with pp.set_num_threads(1):
        want = leapfrog(*ic, steps=steps, **RUN)
    rng = random.Random(42)
    script = CHILD.format(steps=steps)
    mid_write = 0
    for i in range(kills):
        folder = tmp_path / f"run{i}"
        hold = rng.randrange(1, steps) if i % 2 == 0 else 0
        proc = subprocess.Popen([sys.executable, "-c", script, str(folder), str(hold)],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert proc.stdout.readline() == "R\n"
        if hold:  # during a write: between a snapshot's data and its rename
            line = proc.stdout.readline()
            assert line.startswith("W "), "the run ended before its kill"
            tmp = line.split()[1]
        else:  # at any moment of the run (60 snapshots take 2.4 s at least)
            time.sleep(rng.uniform(0.0, 1.5))
            tmp = None
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL, "the run ended before its kill"
        if tmp is not None:  # killed mid-write: the data are there, under no final name
            final = folder / f"snap_{hold:08d}.npz"
            assert os.path.basename(tmp).startswith(f".{final.name}.")
            assert os.path.exists(tmp) and not final.exists()
            if hold > 1:  # the snapshot before it is the newest
                assert int(load_snapshot(str(folder))["step"]) == hold - 1
            mid_write += 1
        # every snapshot under its final name is whole: nothing to skip
        for name in os.listdir(folder) if folder.exists() else []:
            if not name.startswith("."):
                load_snapshot(str(folder / name))
        with pp.set_num_threads(1), warnings.catch_warnings():
            warnings.simplefilter("error")
            if folder.exists() and any(n.startswith("snap_") for n in os.listdir(folder)):
                got = leapfrog(resume=str(folder), steps=steps, snapshot_dir=str(folder),
                               snapshot_every=1, **RUN)  # fmt: skip
            else:
                got = leapfrog(*ic, steps=steps, **RUN)
        _same(got, want)
    assert mid_write == kills // 2


# ----------------------------------------------------------------- run ids


def test_a_second_run_into_a_used_folder_is_refused_and_the_first_kept(ic, whole, tmp_path):
    # the second run overwrote the first's snapshots under the same names, and
    # resume= then continued the first run from its newest file
    x, v, m = ic
    first = _crashed_run(ic, tmp_path, steps=6)
    before = {p.name: p.read_bytes() for p in first}
    said = r"^snapshot_dir=.* already holds snap_00000002.npz, a snapshot of run [0-9a-f]{32}; "
    with pytest.raises(ValueError, match=said + r"write to a new folder, or resume=") as info:
        leapfrog(x[:30], v[:30], m[:30], steps=4, snapshot_dir=str(tmp_path), snapshot_every=2,
                 **RUN)  # fmt: skip
    assert "\n" not in str(info.value)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    # the first run goes on, under its own id, into its own folder
    run_id = str(load_snapshot(str(tmp_path))["run_id"])
    run, said = _resume(tmp_path, snapshot_dir=str(tmp_path), snapshot_every=2)
    assert said == [] and run.run_id == run_id
    _same(run, whole)
    assert str(load_snapshot(str(tmp_path / "snap_00000010.npz"))["run_id"]) == run_id


def test_resume_takes_one_run_of_a_mixed_folder_and_says_which(ic, whole, tmp_path):
    x, v, m = ic
    a, b = tmp_path / "a", tmp_path / "b"
    _crashed_run(ic, a, steps=4)
    other = leapfrog(x[:30], v[:30], m[:30], steps=6, snapshot_dir=str(b), snapshot_every=6,
                     **RUN)  # fmt: skip
    shutil.copy(b / "snap_00000006.npz", a)  # a folder that two runs wrote to
    run, said = _resume(a)
    assert run.run_id == other.run_id and run.pos.shape == (30, 3)
    assert len(said) == 1 and f"resuming run {other.run_id} from snap_00000006.npz" in said[0]
    assert "2 file(s) of other runs ignored" in said[0]  # steps 2 and 4 of the first run
    with pytest.raises(ValueError, match=r"already holds snap_00000002.npz, a snapshot of run"):
        leapfrog(resume=str(a), steps=8, snapshot_dir=str(a), snapshot_every=2, **RUN)
    (a / "snap_00000006.npz").unlink()  # one run again: resumed, and ended as if never stopped
    run, said = _resume(a)
    assert said == [] and run.pos.shape == (48, 3)
    _same(run, whole)


def _rewrite_with_checksum(path, **changes):
    """The snapshot at ``path`` with ``changes``, under a correct SHA-256 (as the format's)."""
    import hashlib

    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files if k != "checksum"}
    arrays.update({k: np.asarray(v) for k, v in changes.items()})
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    np.savez(path, checksum=np.asarray(h.hexdigest()), **arrays)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda s: dict(pos=np.where(np.arange(48)[:, None] == 3, np.nan, s["pos"])),
         r"pos\[3\] is not finite"),
        (lambda s: dict(mass=-s["mass"]), r"mass\[0\] is negative"),
        (lambda s: dict(vel=s["vel"].astype(np.float32)), r"vel has dtype float32, not float64"),
        (lambda s: dict(step=np.int64(-8)), r"step -8 is not a count of steps"),
        (lambda s: dict(t=np.float64(np.inf)), r"t inf is not a finite time"),
        (lambda s: dict(run_id=np.int64(7)), r"its run_id is not a string"),
    ],
)  # fmt: skip
def test_a_valid_checksum_does_not_make_broken_arrays_a_snapshot(ic, whole, tmp_path, change, why):
    snaps = _crashed_run(ic, tmp_path)
    _rewrite_with_checksum(snaps[-1], **change(load_snapshot(str(snaps[-1]))))
    with pytest.raises(ValueError, match=rf"is damaged \({why}"):
        load_snapshot(str(snaps[-1]))
    run, said = _resume(tmp_path)  # the folder goes on from the snapshot before it
    assert len(said) == 1 and "snap_00000008.npz" in said[0]
    _same(run, whole)
