"""A progress bar that moves within each problem and shows an ETA.

Work is planned in seconds: each problem announces how long it expects to
take and ticks as it goes (one tick per timed round), so the bar moves while
a slow baseline runs.  The ETA scales the plan by how fast the run has gone
so far against it.

rich draws the line (the bar, the percentage, the columns fitted to the
terminal's width), as it lays out the review table
(:func:`~propopt_case_studies.capstone.rows.short_table`): one library for
both.  The redraws are this module's own, a carriage return on a terminal and
a line per redraw elsewhere (a CI log), rather than rich's live display,
which runs a thread of its own and takes over ``sys.stdout`` and
``sys.stderr`` while the kernels' compile notices and warnings go there.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


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
        self._bar: Any = None

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

    def line(self) -> str:
        """The bar as one line of text (rich's bar and percentage; this module's ETA)."""
        from rich.console import Console
        from rich.progress import BarColumn, Progress as Bar, TaskProgressColumn, TextColumn
        from rich.table import Column

        from .rows import width_here

        if self._bar is None:
            console = Console(
                width=width_here(),
                force_terminal=self.tty,
                color_system="auto" if self.tty else None,
                highlight=False,
            )
            bar = Bar(
                BarColumn(bar_width=24),
                TaskProgressColumn(),
                TextColumn("{task.fields[clock]}", table_column=Column(no_wrap=True)),
                TextColumn("{task.description}", table_column=Column(no_wrap=True)),
                console=console,
                auto_refresh=False,
            )
            bar.add_task("", total=1.0, clock="")
            self._bar = bar
        bar = self._bar
        elapsed = time.perf_counter() - self.t0
        clock = f"{elapsed:4.0f}s, about {self.eta():3.0f}s left"
        room = bar.console.width - 24 - 5 - len(clock) - 3  # the bar, the percentage, spaces
        label = self.label if len(self.label) <= room else self.label[: max(room - 1, 0)] + "…"
        bar.update(bar.tasks[0].id, completed=self.fraction(), description=label, clock=clock)
        with bar.console.capture() as captured:
            bar.console.print(bar.make_tasks_table(bar.tasks), no_wrap=True, overflow="ellipsis")
        return captured.get().rstrip("\n").splitlines()[0].rstrip()

    def draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last_draw < self.min_interval:
            return
        self.last_draw = now
        text = self.line()
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
