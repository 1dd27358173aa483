"""How far a run is. On a terminal: one live line, redrawn in place by rich (runs done of all,
what runs now and on which GPU, elapsed, the ETA from the runs done so far), with the run's own
lines printed above it. In CI logs and pipes: one plain line per finished run, nothing redrawn,
since a log viewer shows every redraw as a line of its own.

The orchestration reports to a `Progress` (begin, started, finished, say, close); `choose` picks
the live one only where it can work: a terminal, not CI, and no child output streaming to the same
terminal (a single cell echoes its suite's output, which is the live view then).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TextIO

from convmatrix.escape import one_line
from convmatrix.matrix.cells import abbreviate

if TYPE_CHECKING:  # rich is imported where a live line is made: CI and pipes never load it
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text


class Progress(Protocol):
    def begin(self, total: int, slots: int) -> None: ...
    def add(self, runs: int) -> None: ...  # runs joined (or, negative, dropped: a cell not run)
    def started(self, where: str, slot: str) -> None: ...
    def finished(self, where: str, slot: str, seconds: float) -> None: ...
    def say(self, line: str) -> None: ...
    def close(self) -> None: ...


class Tally:
    """The counts and clock both kinds share; safe to update from the workers' threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.total = self.done = 0
        self.slots = 1
        self.began = self.clock()
        self.durations: list[float] = []
        self.running: dict[str, str] = {}  # where -> slot

    def begin(self, total: int, slots: int) -> None:
        with self.lock:
            self.total, self.slots, self.began = total, slots, self.clock()

    def add(self, runs: int) -> None:
        with self.lock:
            self.total += runs

    def start(self, where: str, slot: str) -> None:
        with self.lock:
            self.running[where] = slot

    def end(self, where: str, seconds: float) -> str:
        """Count a finished run; its line's head, `[done/total] where`."""
        with self.lock:
            self.running.pop(where, None)
            self.done += 1
            self.durations.append(seconds)
            return f"[{self.done}/{self.total}] {where}"

    def elapsed(self) -> float:
        return self.clock() - self.began

    def eta(self) -> float | None:
        """The runs left times the mean run so far, spread over the slots; None before any ended."""
        if not self.durations:
            return None
        left = max(self.total - self.done, 0)
        return sum(self.durations) / len(self.durations) * left / max(self.slots, 1)


def short(where: str) -> str:
    """cell@gpu with the cell id abbreviated as the report abbreviates it."""
    cell, _, gpu = where.partition("@")
    return f"{abbreviate(cell)}@{gpu}" if gpu else abbreviate(cell)


def clock_text(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Plain:
    """A line per finished run (CI, pipes, or a single cell whose suite output is streaming)."""

    def __init__(self, write: Callable[[str], None], tally: Tally | None = None) -> None:
        self.write = write  # the run's log: these lines go where its other lines go
        self.tally = tally or Tally()
        self.begin, self.add, self.started = self.tally.begin, self.tally.add, self.tally.start

    def finished(self, where: str, slot: str, seconds: float) -> None:
        head = self.tally.end(where, seconds)
        self.write(f"{head} on {slot}: done in {seconds:.1f} s; "
                   f"elapsed {clock_text(self.tally.elapsed())}, ETA {clock_text(self.tally.eta())}")

    def say(self, line: str) -> None:
        self.write(line)

    def close(self) -> None:
        pass


class LiveLine:
    """One live line on a terminal, the run's lines above it (rich's Live keeps it at the bottom)."""

    def __init__(self, console: Console | None = None, tally: Tally | None = None) -> None:
        from rich.console import Console

        self.tally = tally or Tally()
        self.console = console or Console(highlight=False)
        self.live: Live | None = None  # made in begin, once there is something to show
        self.add, self.started = self.tally.add, self.tally.start

    def line(self) -> Text:
        """Counts and times first, so that a narrow terminal cuts the list of what runs, not them."""
        from rich.text import Text

        t = self.tally
        with t.lock:
            running = [f"{short(where)} on {slot}" for where, slot in sorted(t.running.items())]
            now = ", ".join(running) or ("done" if t.done >= t.total else "preparing")
            text = (f"convmatrix: {t.done}/{t.total} runs · elapsed {clock_text(t.elapsed())} · "
                    f"ETA {clock_text(t.eta())} · now: {now}")
        return Text(one_line(text), no_wrap=True, overflow="ellipsis")

    def begin(self, total: int, slots: int) -> None:
        from rich.live import Live

        self.tally.begin(total, slots)
        self.live = Live(console=self.console, refresh_per_second=2, transient=True, get_renderable=self.line)
        self.live.start()

    def finished(self, where: str, slot: str, seconds: float) -> None:
        self.say(f"{self.tally.end(where, seconds)} on {slot}: done in {seconds:.1f} s")

    def say(self, line: str) -> None:
        from rich.text import Text

        self.console.print(Text(line), soft_wrap=True)  # as text: a cell id is never markup

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


def live_wanted(stream: TextIO, env: Mapping[str, str], *, streaming: bool) -> bool:
    """A live line only on a terminal, outside CI (whose log shows each redraw), without
    TERM=dumb, and when no child output streams to the same terminal."""
    terminal = hasattr(stream, "isatty") and stream.isatty()
    return terminal and not streaming and not env.get("CI") and env.get("TERM") != "dumb"


def choose(log: Callable[[str], None], *, streaming: bool, stream: TextIO | None = None,
           env: Mapping[str, str] | None = None) -> Progress:
    """The live line where it can work, else plain lines through the run's log."""
    if live_wanted(stream or sys.stdout, os.environ if env is None else env, streaming=streaming):
        return LiveLine()
    return Plain(log)
