"""The report against the history (--history), as every view shows it: which cells and cases are
first-red, recurring, recovered or flaky (history/marks.py), first-red apart from recurring, the
flaky ranked by their lower bound. Plain lines here; each renderer escapes them its own way."""

from __future__ import annotations

from dataclasses import dataclass

from convmatrix.history.marks import Mark, State
from convmatrix.report.model import Report

ORDER = (State.FIRST_RED, State.RECOVERED, State.FLAKY, State.RECURRING)
TITLES = {State.FIRST_RED: "first-red (red for the first time on its stack and GPU)",
          State.RECOVERED: "recovered (green after red)",
          State.FLAKY: "flaky (flips between red and green; most flaky first)",
          State.RECURRING: "recurring (red before)"}
SHOWN = 50  # entries listed per state; the json report holds them all


@dataclass(frozen=True, kw_only=True)
class Entry:
    what: str  # `cell@gpu` or `cell@gpu case`
    mark: Mark


def grouped(report: Report) -> dict[State, list[Entry]]:
    """Cells first, then cases, per state in ORDER; the flaky by flakiness, highest first."""
    found: dict[State, list[Entry]] = {state: [] for state in ORDER}
    for cell in report.cells:
        if cell.history is not None:
            found[cell.history.state].append(Entry(what=cell.where, mark=cell.history))
    for case in report.cases:
        if case.history is not None:
            found[case.history.state].append(Entry(what=f"{case.where} {case.case}", mark=case.history))
    found[State.FLAKY].sort(key=lambda e: -e.mark.flakiness)
    return found


def summary(report: Report) -> str:
    """`against the history: 1 first-red, 0 recovered, 2 flaky, 3 recurring` (cells and cases)."""
    found = grouped(report)
    return "against the history: " + ", ".join(f"{len(found[s])} {s}" for s in ORDER)


def sections(report: Report) -> list[tuple[str, list[str], int]]:
    """(title, lines shown, how many more) per state that has entries; [] without --history."""
    if not report.history:
        return []
    made = []
    for state, entries in grouped(report).items():
        if entries:
            made.append((TITLES[state], [f"{e.what}: {e.mark.line()} [{e.mark.recent}]" for e in entries[:SHOWN]],
                         max(0, len(entries) - SHOWN)))
    return made


def first_red(report: Report) -> list[str]:
    """--fail-on first-red: what went red for the first time (verdicts.judge fails on these alone),
    leaving out the cells that did not run and their cases: an outage's first night is the
    infrastructure (exit 4), not a finding about the stacks."""
    down = {c.where for c in report.cells if c.did_not_run}
    return [e.what for e in grouped(report)[State.FIRST_RED] if e.what.split(" ", 1)[0] not in down]
