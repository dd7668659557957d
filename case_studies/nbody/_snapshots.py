"""Snapshots of :func:`.integrate.leapfrog`: written atomically, checksummed, one run per folder.

A snapshot ``snap_<step>.npz`` holds a run's arrays, its parameters, its run
id and a SHA-256 of them all.  It is read back only when it loads, its
checksum matches and its arrays keep the invariants of a run
(:func:`load_snapshot`); a folder holds the snapshots of one run
(:func:`check_folder`).
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from typing import Any

import numpy as np

from propopt.files import atomic_write

__all__ = ["check_folder", "load_snapshot", "write_snapshot"]

_SNAP = re.compile(r"snap_(\d+)\.npz")
_BODIES = ("pos", "vel", "mass", "acc", "pot")


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of every array but ``checksum``: its name, dtype, shape and bytes."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        if k != "checksum":
            a = np.ascontiguousarray(arrays[k])
            h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def write_snapshot(path: str, arrays: dict[str, Any]) -> None:
    """``np.savez`` of ``arrays`` and their checksum, written atomically (:mod:`propopt.files`)."""
    out = {k: np.asarray(a) for k, a in arrays.items()}
    out["checksum"] = np.asarray(_checksum(out))
    with atomic_write(path) as f:
        np.savez(f, **out)  # type: ignore[arg-type]  # the stub takes any key for allow_pickle


class _Damaged(Exception):
    """A snapshot that does not load or fails its own checks (the message says which)."""


def _read_snapshot(path: str) -> dict[str, Any]:
    """Load one snapshot and check it: every array readable, the checksum, shapes, step."""
    with open(path, "rb") as fh:
        try:
            z = np.load(fh)
            if not hasattr(z, "files"):
                raise ValueError("an .npy array, not an .npz archive")
            with z:
                snap = {k: z[k] for k in z.files}
        except Exception as e:  # zipfile.BadZipFile, EOFError, ValueError, zlib.error, ...
            why = " ".join(str(e).split()) or type(e).__name__
            raise _Damaged(f"truncated or not a snapshot: {why}") from None
    missing = [k for k in (*_BODIES, "t", "step") if k not in snap]
    if missing:
        raise _Damaged(f"not a snapshot: no {', '.join(missing)}")
    if "checksum" not in snap:
        warnings.warn(
            f"snapshot {path!r} has no checksum (written before snapshots carried one): "
            "its arrays are used unverified",
            RuntimeWarning,
            stacklevel=3,
        )
    elif str(snap["checksum"]) != _checksum(snap):
        raise _Damaged("checksum mismatch: its arrays are not those written (altered or corrupted)")
    n = snap["pos"].shape[0] if snap["pos"].ndim else -1
    for k, shape, want in (("pos", (n, 3), "(n, 3)"), ("vel", (n, 3), "(n, 3)"),
                           ("acc", (n, 3), "(n, 3)"), ("mass", (n,), "(n,)"),
                           ("pot", (n,), "(n,)"), ("step", (), "a scalar")):  # fmt: skip
        if snap[k].shape != shape:
            raise _Damaged(f"{k} has shape {snap[k].shape}, not {want}")
    why = _broken(snap)
    if why:
        raise _Damaged(why)
    step = int(snap["step"])
    named = _SNAP.fullmatch(os.path.basename(path))
    if named and int(named.group(1)) != step:
        raise _Damaged(f"it holds step {step}, not the step {int(named.group(1))} of its name")
    return snap


def _run_of(path: str) -> str | None:
    """The run id a snapshot file holds: ``''`` for one written before snapshots carried
    one, None when the file does not load (a damaged snapshot)."""
    try:
        with open(path, "rb") as fh, np.load(fh) as z:
            if "run_id" not in z.files:
                return ""
            run = z["run_id"]
            return str(run) if run.dtype.kind == "U" and run.shape == () else None
    except Exception:  # zipfile.BadZipFile, EOFError, ValueError, OSError, ...
        return None


def check_folder(folder: str, run_id: str, resumed: bool) -> None:
    """``snapshot_dir`` holds no snapshot of another run, or a one-line ValueError.

    A new run needs a folder without snapshots: its files would otherwise
    replace another run's under the same names and leave the folder holding
    two runs.  A resumed run may write among its own snapshots (and damaged
    ones, which :func:`load_snapshot` skips), never among another run's.
    """
    if not os.path.isdir(folder):
        return
    for path in _snapshots(folder):
        found = _run_of(path)
        if found == run_id or (resumed and found is None):
            continue
        whose = "of another run" if found is None else f"of run {found or '(no id)'}"
        raise ValueError(
            f"snapshot_dir={folder!r} already holds {os.path.basename(path)}, a snapshot "
            f"{whose}; write to a new folder, or resume={folder!r} to continue that run"
        )


def _broken(snap: dict[str, Any]) -> str:
    """Which invariant of a run the arrays of a snapshot break, or ``''``: a checksum
    says they are the arrays written, not that a run wrote them."""
    for k in _BODIES:
        if snap[k].dtype != np.float64:
            return f"{k} has dtype {snap[k].dtype}, not float64"
    for k in ("pos", "vel", "mass"):
        bad = np.flatnonzero(~np.isfinite(snap[k]).reshape(snap[k].shape[0], -1).all(axis=1))
        if bad.size:
            return f"{k}[{bad[0]}] is not finite"
    if snap["mass"].size and snap["mass"].min() < 0:
        return f"mass[{int(np.argmin(snap['mass']))}] is negative"
    if snap["step"].dtype.kind not in "iu" or int(snap["step"]) < 0:
        return f"step {snap['step'].item()!r} is not a count of steps"
    if snap["t"].shape != () or snap["t"].dtype.kind != "f" or not np.isfinite(snap["t"]):
        return f"t {snap['t'].item()!r} is not a finite time"
    if "run_id" in snap and (snap["run_id"].dtype.kind != "U" or snap["run_id"].shape != ()):
        return "its run_id is not a string"
    return ""


def _snapshots(folder: str) -> list[str]:
    """The ``snap_<step>.npz`` files in ``folder``, oldest step first."""
    found = [(int(m.group(1)), name) for name in os.listdir(folder)
             if (m := _SNAP.fullmatch(name))]  # fmt: skip
    return [os.path.join(folder, name) for _, name in sorted(found)]


def _newest_intact(folder: str, skip: str = "") -> tuple[str | None, dict[str, Any], list[str]]:
    """The newest snapshot of ``folder`` that passes its checks, its arrays, and why each
    newer one did not."""
    failed: list[str] = []
    for path in reversed(_snapshots(folder)):
        if os.path.abspath(path) == os.path.abspath(skip):
            continue
        try:
            return path, _read_snapshot(path), failed
        except (_Damaged, OSError) as e:
            failed.append(f"{os.path.basename(path)} ({e})")
    return None, {}, failed


def load_snapshot(path: str) -> dict[str, Any]:
    """Read a snapshot into a dict: a file, or the newest intact ``snap_*.npz`` of a folder.

    A snapshot is intact when every array loads, its checksum matches and
    its shapes and step agree.  In a folder, each newer snapshot that is not
    intact is skipped with one ``RuntimeWarning`` line naming it and why.  A
    damaged file, or a folder with no intact snapshot, raises a one-line
    ``ValueError`` naming the file and the snapshot to use instead.  A
    snapshot without a checksum (written by an older version) loads with a
    ``RuntimeWarning``.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        if not _snapshots(path):
            raise FileNotFoundError(f"resume={path!r}: no snap_*.npz in that folder")
        found, snap, failed = _newest_intact(path)
        if found is None:
            raise ValueError(
                f"no intact snapshot in {path!r}: {'; '.join(failed)}; start a new run "
                "from pos and vel"
            )
        run = str(snap["run_id"]) if "run_id" in snap else ""
        others = [p for p in _snapshots(path) if _run_of(p) not in (run, None)]
        if others:  # a folder written to by two runs before run ids were checked
            warnings.warn(
                f"{path!r} holds snapshots of more than one run; resuming run "
                f"{run or '(no id)'} from {os.path.basename(found)}, its newest intact "
                f"snapshot ({len(others)} file(s) of other runs ignored)",
                RuntimeWarning,
                stacklevel=2,
            )
        if failed:
            warnings.warn(
                f"skipped the newer snapshot(s) {'; '.join(failed)}; resuming from {found!r}",
                RuntimeWarning,
                stacklevel=2,
            )
        return snap
    try:
        return _read_snapshot(path)
    except _Damaged as e:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # only its name is wanted here
            other, _, _ = _newest_intact(os.path.dirname(path) or ".", skip=path)
        fix = (
            f"resume from {other!r}, the newest intact snapshot in that folder"
            if other
            else "no other snapshot in that folder is intact: start a new run from pos and vel"
        )
        raise ValueError(f"snapshot {path!r} is damaged ({e}): {fix}") from None
