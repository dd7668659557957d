"""Kick-drift-kick leapfrog with conservation diagnostics, a progress bar and resumable snapshots.

One step of length ``dt`` (second order, symplectic, time-reversible)::

    v += a(x) dt / 2 ;  x += v dt ;  v += a(x) dt / 2

The forces come from :func:`propopt_case_studies.nbody.field`: the Barnes-Hut tree,
rebuilt each step (``method="tree"``), the fast multipole method (``method="fmm"``,
``tol`` and ``quantile``; on the median, its mutual method, whose forces sum to 0 up to
rounding), or the exact sum (``method="direct"``).
Energy ``E = sum m v^2 / 2 + sum m phi / 2``, momentum ``P = sum m v`` and
angular momentum ``L = sum m x x v`` are recorded every
``diag_every`` steps; leapfrog keeps ``E`` bounded (no secular drift for the
exact force) and conserves ``P`` and ``L`` up to the force error.
"""

from __future__ import annotations

import math
import os
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from propopt.arrays import flag, points, real, shown
from propopt.symmetry.gravity import check_masses

from . import _snapshots, api
from ._args import check_theta
from ._snapshots import load_snapshot
from .barnes_hut import THETA

__all__ = ["FORCES", "Run", "diagnostics", "leapfrog", "load_snapshot"]

FORCES = ("tree", "fmm", "direct")
"""The forces :func:`leapfrog` runs (``method=``, that of :func:`.field`)."""
_DIAG = ("t", "kinetic", "potential", "energy", "px", "py", "pz", "lx", "ly", "lz")


@dataclass
class Run:
    """The end state of :func:`leapfrog` and its diagnostics (one row per record)."""

    pos: np.ndarray
    vel: np.ndarray
    mass: np.ndarray
    t: float
    step: int
    diag: dict[str, np.ndarray] = field(default_factory=dict)
    run_id: str = ""
    """The run's id, stored in each of its snapshots (a resumed run keeps it)."""

    @property
    def energy_drift(self) -> float:
        """``max |E(t) - E(0)| / |E(0)|`` over the records."""
        e = self.diag["energy"]
        return float(np.max(np.abs(e - e[0])) / abs(e[0])) if e.size and e[0] else 0.0


def diagnostics(pos: np.ndarray, vel: np.ndarray, mass: np.ndarray, pot: np.ndarray) -> dict:
    """Kinetic, potential and total energy, momentum and angular momentum (float64)."""
    x, v, m = (np.asarray(a, np.float64) for a in (pos, vel, mass))
    kin = 0.5 * float(np.sum(m * np.einsum("ij,ij->i", v, v)))
    w = 0.5 * float(np.sum(m * np.asarray(pot, np.float64)))
    p = (m[:, None] * v).sum(axis=0)
    ang = (m[:, None] * np.cross(x, v)).sum(axis=0)
    return dict(kinetic=kin, potential=w, energy=kin + w, px=p[0], py=p[1], pz=p[2],
                lx=ang[0], ly=ang[1], lz=ang[2])  # fmt: skip


class _Bar:
    """tqdm when it is installed, else a line every tenth of the run."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar: Any = None
        self.total, self.done, self.enabled = total, 0, enabled
        if enabled:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, unit="step", desc="leapfrog")
            except ImportError:
                pass

    def update(self, info: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(info, refresh=False)
        elif self.enabled and (self.done % max(self.total // 10, 1) == 0):
            print(f"leapfrog {self.done}/{self.total} {info}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _saved(val: float | None) -> float:
    """An optional number as a snapshot holds it: NaN for "not given"."""
    return math.nan if val is None else float(val)


def _array_mismatch(name: str, val: np.ndarray, saved: np.ndarray) -> str:
    """One short line: where an array argument first differs from the snapshot's, and how often."""
    fix = (
        f"resume with the snapshot's {name} to continue that run (or start a new run from its "
        "pos and vel)"
    )
    if val.shape != saved.shape:
        return f"{name} has shape {val.shape} but the snapshot's has shape {saved.shape}: {fix}"
    differ = ~((val == saved) | (np.isnan(val) & np.isnan(saved)))
    where = np.argwhere(differ)
    i = tuple(int(j) for j in where[0])
    at = ", ".join(map(str, i))
    return (
        f"{name} differs from the snapshot's at {where.shape[0]} of {val.size} entries, first "
        f"at {name}[{at}] = {val[i].item()!r} (the snapshot's: {saved[i].item()!r}): {fix}"
    )


def _check_resume(snap: dict[str, Any], steps: int, **params: Any) -> None:
    """A resumed run must go on with its snapshot's parameters, up to a later step.

    Anything else would not be the run the snapshot belongs to: a one-line
    ``ValueError`` naming the argument, both values and the fix.  Parameters a
    snapshot does not hold (written by an older version) are not checked.
    """
    for name, val in params.items():
        if name not in snap:
            continue
        saved = snap[name]
        same = (
            str(saved) == str(val)
            if saved.dtype.kind in "US"
            else np.shape(saved) == np.shape(val)
            and bool(np.array_equal(saved, np.asarray(val), equal_nan=saved.dtype.kind == "f"))
        )
        if not same and (saved.ndim or np.ndim(val)) and saved.dtype.kind not in "US":
            raise ValueError(_array_mismatch(name, np.asarray(val), saved))
        if not same:
            was = saved.item() if saved.ndim == 0 else saved.tolist()
            if isinstance(was, float) and math.isnan(was):
                was = None  # not given
            if isinstance(val, float) and math.isnan(val):
                val = None
            raise ValueError(
                f"{name}={val!r} differs from the snapshot's {name}={was!r}: resume with "
                f"{name}={was!r} to continue that run (or start a new run from its pos and vel)"
            )
    done = int(snap["step"])
    if steps < done:
        raise ValueError(
            f"steps={steps} is below the snapshot's step {done}: steps counts the whole run, "
            f"so pass steps >= {done} (the snapshot's step plus the steps still to go)"
        )


def leapfrog(
    pos: Any = None,
    vel: Any = None,
    mass: Any = None,
    *,
    dt: float,
    steps: int,
    eps: float = 0.0,
    softening: str = "plummer",
    method: str = "tree",
    theta: float | None = None,
    quadrupole: bool = True,
    tol: float | None = None,
    quantile: float | None = None,
    diag_every: int = 1,
    snapshot_dir: str | None = None,
    snapshot_every: int = 0,
    resume: str | None = None,
    progress: bool = False,
) -> Run:
    """Integrate ``steps`` kick-drift-kick leapfrog steps of self-gravitating bodies (G = 1).

    Parameters
    ----------
    pos, vel : arrays (n, 3)
        Initial positions and velocities (ignored with ``resume``).
    mass : array (n,)
        Finite masses ``>= 0``, as in every gravity verb (docs/nbody.md,
        Masses).
    dt : float
        Time step, ``> 0``.
    steps : int
        Total number of steps of the run (a resumed run goes on up to it).
    eps : float
        Softening length: Plummer's ``eps``, or the support ``h`` of
        ``softening='spline'`` (pytreegrav's kernel; see :meth:`Octree.build`).
    softening : {'plummer', 'spline'}
    method : {'tree', 'fmm', 'direct'}
        Barnes-Hut (``theta``, ``quadrupole``), the fast multipole method
        (``tol``, ``quantile``, ``theta``; :func:`.fmm`) or the exact direct sum.
        With ``method='fmm', quantile=0.5`` the forces come from the mutual
        method: each pair of cells interacts once for both, so momentum is
        conserved to rounding (docs/nbody.md, section 7).
    theta : float, optional
        The tree's opening angle (default ``THETA``, 0.7); the FMM's, overriding
        the one of ``tol``, when given.
    tol, quantile : float, optional
        The FMM's error knob (:func:`.fmm`; defaults 1e-3 and 0.99); only with
        ``method='fmm'``.
    diag_every : int
        Record diagnostics every this many steps (and at the start and end).
    snapshot_dir, snapshot_every : str, int
        Write ``snap_<step>.npz`` (positions, velocities, masses, accelerations,
        potentials, time, step, the parameters, the diagnostics so far and a
        checksum of them all) every ``snapshot_every`` steps and at the end,
        atomically: a crash leaves the previous snapshots whole.  Each run has
        an id (:attr:`Run.run_id`) that its snapshots hold: a new run refuses a
        folder that already holds snapshots (``ValueError``: use a new folder,
        or ``resume=`` it), and a resumed run one that holds another run's.
    resume : str, optional
        A snapshot file or folder (its newest intact snapshot, see
        :func:`load_snapshot`) to continue from: the continued run is the same
        as an uninterrupted one, bit for bit, and keeps its run id.
        ``dt``, ``eps``, ``softening``, ``method``, ``theta``, ``quadrupole``,
        ``tol`` and ``quantile`` must be the snapshot's and ``steps`` at least its step (else a
        ``ValueError``).
    progress : bool
        Show a progress bar (tqdm if installed).

    Returns
    -------
    Run

    Examples
    --------
    >>> from propopt_case_studies.nbody import plummer_sphere
    >>> from propopt_case_studies.nbody.integrate import leapfrog
    >>> x, v, m = plummer_sphere(200, seed=0)
    >>> run = leapfrog(x, v, m, dt=0.01, steps=20, eps=0.05, method="direct")
    >>> run.step, bool(run.energy_drift < 1e-3)
    (20, True)
    """
    if method not in FORCES:
        raise ValueError(f"method={method!r} is not one of {', '.join(map(repr, FORCES))}")
    dt = real("dt", dt)  # a NumPy scalar or 0-d array too; not '0.1'
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt={dt!r}: the time step must be finite and > 0")
    if method != "fmm":
        for name, val in (("tol", tol), ("quantile", quantile)):
            if val is not None:
                raise ValueError(
                    f"{name}={val!r} is an option of method='fmm', not of method={method!r}: "
                    "leave it out"
                )
    if theta is None and method != "fmm":  # the FMM's comes from tol unless given
        theta = THETA
    if theta is not None:
        theta = check_theta(theta, "fmm" if method == "fmm" else "tree")
    quadrupole, progress = flag("quadrupole", quadrupole), flag("progress", progress)
    for name, val in (
        ("steps", steps),
        ("diag_every", diag_every),
        ("snapshot_every", snapshot_every),
    ):
        if (
            isinstance(val, bool)
            or not isinstance(val, (int, np.integer))
            or val < (name != "steps" and name != "snapshot_every")
        ):
            raise ValueError(f"{name}={shown(val)}: must be an int >= {int(name == 'diag_every')}")
    if snapshot_every and snapshot_dir is None:
        raise ValueError("snapshot_every > 0 needs snapshot_dir (a folder to write to)")
    diag: dict[str, list[float]] = {k: [] for k in _DIAG}
    if resume is not None:
        s = _snapshots.load_snapshot(resume)
        x, v, m, acc, pot = s["pos"], s["vel"], s["mass"], s["acc"], s["pot"]
        t, step = float(s["t"]), int(s["step"])
        run_id = str(s["run_id"]) if "run_id" in s else ""  # '': written before run ids
        _check_resume(s, steps, dt=dt, eps=eps, method=method, softening=softening,
                      theta=_saved(theta), quadrupole=quadrupole, tol=_saved(tol),
                      quantile=_saved(quantile))  # fmt: skip
        for k in _DIAG:
            diag[k] = list(s["diag_" + k])
    else:
        for name, val, what in (("pos", pos, "positions"), ("vel", vel, "velocities")):
            if val is None:
                raise TypeError(
                    f"{name} is missing: pass the initial {what} as an (n, 3) array, or "
                    "resume= a snapshot to continue a run"
                )
        x = np.array(points("pos", pos, 3), dtype=np.float64)
        v = np.array(points("vel", vel, 3), dtype=np.float64)
        if v.shape != x.shape:
            raise ValueError(f"vel has shape {v.shape}: must match pos {x.shape}")
        m = check_masses(mass, x.shape[0])
        t, step = 0.0, 0
        acc = pot = None
        run_id = uuid.uuid4().hex
    if snapshot_every:
        _snapshots.check_folder(os.fspath(snapshot_dir), run_id, resumed=resume is not None)  # type: ignore[arg-type]

    given: dict[str, Any] = dict(theta=theta, quadrupole=quadrupole, tol=tol, quantile=quantile)
    opts = {k: val for k, val in given.items() if k in api.OPTIONS[method] and val is not None}

    def force(xx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, p = api.field(xx, m, method=method, eps=eps, softening=softening, potential=True, **opts)
        assert p is not None  # potential=True
        return a, p

    def record() -> None:
        d = diagnostics(x, v, m, pot)
        diag["t"].append(t)
        for k, val in d.items():
            diag[k].append(val)

    def snapshot() -> None:
        os.makedirs(snapshot_dir, exist_ok=True)  # type: ignore[arg-type]
        extra = {"diag_" + k: np.asarray(diag[k]) for k in _DIAG}
        _snapshots.write_snapshot(
            os.path.join(snapshot_dir, f"snap_{step:08d}.npz"),  # type: ignore[arg-type]
            dict(pos=x, vel=v, mass=m, acc=acc, pot=pot, t=t, step=step, dt=dt, eps=eps,
                 softening=softening, theta=_saved(theta), quadrupole=quadrupole,
                 method=method, tol=_saved(tol), quantile=_saved(quantile), run_id=run_id,
                 **extra),
        )  # fmt: skip

    if acc is None:
        acc, pot = force(x)
        record()
    bar = _Bar(steps - step, progress)
    try:
        while step < steps:
            v += 0.5 * dt * acc
            x += dt * v
            acc, pot = force(x)
            v += 0.5 * dt * acc
            t += dt
            step += 1
            if step % diag_every == 0 or step == steps:
                record()
                e = diag["energy"]
                bar.update(f"dE/E={(e[-1] - e[0]) / abs(e[0] or 1):+.2e}")
            else:
                bar.update("")
            if snapshot_every and (step % snapshot_every == 0 or step == steps):
                snapshot()
    finally:
        bar.close()
    return Run(x, v, m, t, step, {k: np.asarray(val) for k, val in diag.items()}, run_id)
