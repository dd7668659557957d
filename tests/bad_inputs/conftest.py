"""The bad-input cases' summary: classes per area, printed after a run that judged any.

Each judged case leaves ``(area, class, detail, seconds)`` in its report's
``user_properties`` (``_judge.judge``), so the table also counts the cases
that pytest-xdist's workers ran.  Under xdist the table prints when the run
names this folder (``python -m pytest tests/bad_inputs``): a controller that
collects nothing loads only the conftest files of the paths it is given.
"""

from __future__ import annotations

import collections
import os
from typing import Any

import pytest

from tests.bad_inputs._judge import CLASSES, PROPERTY, SILENT, UNCLEAR

os.environ.setdefault("PROPOPT_COMPILE_NOTICE", "0")

_VERDICTS: dict[str, tuple[str, str, str, float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key == PROPERTY:
            _VERDICTS[report.nodeid] = tuple(value)  # type: ignore[assignment]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _VERDICTS:
        return
    tr = terminalreporter
    verdicts = [_VERDICTS[k] for k in sorted(_VERDICTS)]  # in module order, as xdist mixes them
    areas = list(dict.fromkeys(v[0] for v in verdicts))
    counts = {a: collections.Counter(v[1] for v in verdicts if v[0] == a) for a in areas}
    head = f"{'area':<30}" + "".join(f"{k:>15}" for k in CLASSES) + f"{'cases':>8}"
    tr.write_sep("=", "bad inputs: cases per area and class")
    tr.write_line(head)
    tr.write_line("-" * len(head))
    for a in areas:
        row = "".join(f"{counts[a][k]:>15}" for k in CLASSES)
        tr.write_line(f"{a:<30}{row}{sum(counts[a].values()):>8}")
    every = collections.Counter(v[1] for v in verdicts)
    tr.write_line("-" * len(head))
    row = "".join(f"{every[k]:>15}" for k in CLASSES)
    seconds = sum(v[3] for v in verdicts)
    tr.write_line(f"{'total':<30}{row}{len(verdicts):>8}   ({seconds:.1f} s in the calls)")
    bad = sum(every[k] for k in (UNCLEAR, SILENT))
    if bad:
        tr.write_line(f"{bad} unclear or silently wrong: the failures above name each")
