"""A progress bar that moves within each problem and shows an ETA.

Work is planned in seconds: each problem announces how long it expects to
take and ticks as it goes (one tick per timed round), so the bar moves while
a slow baseline runs.  The ETA scales the plan by how fast the run has gone
so far against it.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """A one-line bar on a stream (a line per update when it is not a terminal).

    Parameters
    ----------
    plan_s : float
        Seconds the whole run is expected to take (the sum of the problems' plans).
    stream : text stream, optional
        Default ``sys.stderr``.
    min_interval_s : float
        Shortest time between two redraws (lines, off a terminal).
    """

    def __init__(
        self, plan_s: float, stream: TextIO | None = None, min_interval_s: float = 1.0
    ) -> None:
        self.plan = max(plan_s, 1e-9)
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.done_plan = 0.0  # planned seconds of the finished problems
        self.part_plan = 0.0  # planned seconds of the current problem
        self.part_ticks = 1
        self.ticks = 0
        self.label = ""
        self.min_interval = min_interval_s
        self.last_draw = -1e9

    def start(self, label: str, plan_s: float, ticks: int) -> None:
        """A problem of ``plan_s`` planned seconds and ``ticks`` steps begins."""
        self.label, self.part_plan, self.part_ticks, self.ticks = label, plan_s, max(ticks, 1), 0
        self.draw(force=True)

    def note(self, text: str) -> None:
        """Say what the current problem is doing now (a step that cannot tick, such as a
        peer's compilation), until the next :meth:`start`."""
        self.label = f"{self.label.split(':')[0]}: {text}"
        self.draw(force=True)

    def tick(self) -> None:
        """One step of the current problem is done."""
        self.ticks = min(self.ticks + 1, self.part_ticks)
        self.draw()

    def advance_to(self, ticks: int) -> None:
        """At least ``ticks`` steps of the current problem are done (never moves back)."""
        self.ticks = min(max(self.ticks, ticks), self.part_ticks)
        self.draw()

    def finish(self) -> None:
        """The current problem is done."""
        self.done_plan += self.part_plan
        self.part_plan, self.ticks = 0.0, 0

    def fraction(self) -> float:
        part = self.part_plan * self.ticks / self.part_ticks
        return min(1.0, (self.done_plan + part) / self.plan)

    def eta(self) -> float:
        """Seconds left: the plan still to run, at the pace of the run so far."""
        f = self.fraction()
        elapsed = time.perf_counter() - self.t0
        if f <= 0.0:
            return self.plan
        return elapsed / f * (1.0 - f)

    def draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last_draw < self.min_interval:
            return
        self.last_draw = now
        width = 24
        f = self.fraction()
        bar = "#" * int(width * f) + "." * (width - int(width * f))
        done = f"{100 * f:3.0f}% {now - self.t0:4.0f}s, about {self.eta():3.0f}s left"
        text = f"[{bar}] {done}  {self.label}"
        if self.tty:
            self.stream.write("\r\033[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        self.done_plan, self.label = self.plan, "done"
        self.draw(force=True)
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()
