"""Progress: a live line on a terminal, a plain line per finished run in CI and pipes."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from convmatrix.run import progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("env", "streaming", "live"), [
    ({}, False, True),
    ({"CI": "true"}, False, False),
    ({"TERM": "dumb"}, False, False),
    ({}, True, False),  # a single cell's suite output is on the terminal: no line redrawn over it
])
def test_the_live_line_only_on_a_terminal_outside_ci(env: dict[str, str], streaming: bool, live: bool) -> None:
    chosen = progress.choose(print, streaming=streaming, stream=Terminal(), env=env)
    assert isinstance(chosen, progress.LiveLine) is live


def test_a_pipe_gets_plain_lines() -> None:
    assert isinstance(progress.choose(print, streaming=False, stream=io.StringIO(), env={}), progress.Plain)


def test_plain_says_each_finished_run_with_elapsed_and_an_eta_from_the_runs_done() -> None:
    lines: list[str] = []
    clock = Clock()
    plain = progress.Plain(lines.append, progress.Tally(clock))
    plain.begin(6, 2)
    plain.started("a@cpu", "cpu0")
    clock.now += 10
    plain.finished("a@cpu", "cpu0", 10.0)
    clock.now += 20
    plain.finished("b@cpu", "cpu1", 30.0)
    # first 10 s a run, 5 left over 2 slots: 25 s; then a mean of 20 s, 4 left: 40 s
    assert lines == ["[1/6] a@cpu on cpu0: done in 10.0 s; elapsed 0:10, ETA 0:25",
                     "[2/6] b@cpu on cpu1: done in 30.0 s; elapsed 0:30, ETA 0:40"]


def test_cells_not_run_leave_the_total() -> None:
    lines: list[str] = []
    plain = progress.Plain(lines.append, progress.Tally(Clock()))
    plain.begin(3, 1)
    plain.add(-2)
    plain.finished("a@cpu", "cpu0", 1.0)
    assert lines[0].startswith("[1/1] a@cpu")
    assert lines[0].endswith("ETA 0:00")


def test_the_live_line_names_the_runs_and_gpus_now_and_the_eta() -> None:
    clock = Clock()
    out = Terminal()
    live = progress.LiveLine(Console(file=out, force_terminal=True, width=200), progress.Tally(clock))
    live.begin(4, 2)
    live.started("baremetal-torch2.5.1-cu124-cudnnbundled-py3.11@h100-sm90", "gpu0")
    live.started("baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11@h100-sm90", "gpu1")
    clock.now += 60
    live.finished("baremetal-torch2.5.1-cu124-cudnnbundled-py3.11@h100-sm90", "gpu0", 60.0)
    line = live.line().plain
    assert line.startswith("convmatrix: 1/4 runs · elapsed 1:00 · ETA 1:30 · ")  # 60 s a run, 3 left, 2 GPUs
    assert line.endswith("now: bm-2.5.1-cu124-9.5.1.17-py3.11@h100-sm90 on gpu1")
    live.say("[bold]not markup[/bold] \x1b[2J")
    live.close()
    shown = out.getvalue()
    assert "[1/4] baremetal-torch2.5.1-cu124-cudnnbundled-py3.11@h100-sm90 on gpu0: done in 60.0 s" in shown
    assert "[bold]not markup[/bold]" in shown  # a cell's line is text, never rich markup


def test_clock_text() -> None:
    assert progress.clock_text(None) == "?"
    assert progress.clock_text(59.6) == "1:00"
    assert progress.clock_text(3725) == "1:02:05"
