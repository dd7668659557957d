"""propopt_case_studies.capstone.progress: the bar moves within a problem and shows an ETA."""

import io

from propopt_case_studies.capstone.progress import Progress


def test_the_bar_moves_on_each_tick_and_ends_at_100():
    s = io.StringIO()
    p = Progress(10.0, stream=s, min_interval_s=0.0)
    p.start("scan", 4.0, ticks=2)
    p.tick()
    assert abs(p.fraction() - 0.2) < 1e-12
    p.tick()
    p.finish()
    p.start("mamba", 6.0, ticks=3)
    p.tick()
    assert abs(p.fraction() - 0.6) < 1e-12
    assert p.eta() >= 0
    p.close()
    lines = s.getvalue().splitlines()
    assert " 0% " in lines[0] and lines[0].endswith("scan")
    assert "about" in lines[1] and "s left" in lines[1] and " 20% " in lines[1]
    assert any(" 60% " in line for line in lines)
    assert lines[-1].startswith("━" * 24 + " 100%") and lines[-1].endswith("done")


def test_a_line_fits_the_terminal_and_cuts_a_long_label(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    s = io.StringIO()
    p = Progress(10.0, stream=s, min_interval_s=0.0)
    p.start("compiling ahead: " + "the peers' kernels " * 10, 4.0, ticks=2)
    p.start("scan (default)", 4.0, ticks=2)
    long, short = s.getvalue().splitlines()
    assert len(long) <= 80 and long.endswith("…") and "compiling ahead: the peer" in long
    assert short.endswith("scan (default)")


def test_on_a_terminal_the_line_is_redrawn_in_place():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    s = Tty()
    p = Progress(2.0, stream=s, min_interval_s=0.0)
    p.start("scan", 2.0, ticks=2)
    p.tick()
    p.close()
    text = s.getvalue()
    assert text.count("\r\033[K") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert "done" in text.rsplit("\r", 1)[1]


def test_off_a_terminal_lines_are_rate_limited():
    s = io.StringIO()
    p = Progress(1.0, stream=s, min_interval_s=3600.0)
    p.start("x", 1.0, ticks=100)
    for _ in range(100):
        p.tick()
    assert len(s.getvalue().splitlines()) == 1  # only the forced start line


def test_a_note_names_the_step_at_once_and_the_next_problem_drops_it(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")  # room for the whole label, whatever runs the test
    s = io.StringIO()
    p = Progress(10.0, stream=s, min_interval_s=3600.0)
    p.start("nbody (default)", 4.0, ticks=2)
    p.note("peer compiles")
    p.note("peer runs")
    p.start("lowrank (default)", 6.0, ticks=2)
    lines = s.getvalue().splitlines()
    assert lines[1].endswith("nbody (default): peer compiles")  # drawn although rate-limited
    assert lines[2].endswith("nbody (default): peer runs")  # replaces the earlier note
    assert lines[3].endswith("lowrank (default)")


def test_advance_to_never_moves_back_nor_past_the_problem():
    p = Progress(10.0, stream=io.StringIO(), min_interval_s=0.0)
    p.start("compile", 10.0, ticks=100)
    p.advance_to(40)
    p.advance_to(20)
    assert abs(p.fraction() - 0.4) < 1e-12
    p.advance_to(500)
    assert abs(p.fraction() - 1.0) < 1e-12
