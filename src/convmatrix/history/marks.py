"""What a case's or a cell's red or green tonight means against its own past on the same stack
and GPU key (its series): first-red, recurring, recovered or flaky (docs/contracts.md: History).
These say what changed across nights; `new` and `fixed` say what differs from the control, and
stay apart from them.

Pure: a series' states in, a Mark out (lookup.py reads the states from the database)."""

from __future__ import annotations

import datetime
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class State(StrEnum):
    FIRST_RED = "first-red"  # red, and never red before in its series
    RECURRING = "recurring"  # red, and red before
    RECOVERED = "recovered"  # green, and red on the series' run before
    FLAKY = "flaky"  # flips between red and green beyond chance (FLAKY_BOUND), red or green tonight


# The flaky test: over the series' last WINDOW runs (tonight's included), at least MIN_FLIPS flips
# from the run before, and the share of its transitions that flipped, at its Wilson lower bound
# (z = 1.96, 95 %), at least FLAKY_BOUND. A raw rate would call two runs that flipped once 100 %
# flaky; the bound needs the evidence of many flips. Three flips at least: one red night among
# greens (green-red-green: two) is a regression that recovered, and red, green, red again is red
# that came back (recurring). Green-red-green-red (3 of 3) is 0.44, alternating for 8 nights
# (7 of 7) 0.65; two one-night reds a week apart (3 of 6) 0.19, not flaky.
WINDOW = 30
MIN_FLIPS = 3
FLAKY_BOUND = 0.2
Z = 1.96


def wilson_lower(successes: int, trials: int, z: float = Z) -> float:
    """The lower bound of the Wilson score interval for a binomial proportion: E. B. Wilson,
    "Probable inference, the law of succession, and statistical inference", JASA 22(158), 1927,
    pp. 209-212; as used to rank by "How Not To Sort By Average Rating" (E. Miller, 2009,
    https://www.evanmiller.org/how-not-to-sort-by-average-rating.html):
        (p + z²/2n - z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n),  p = successes / n."""
    if trials <= 0:
        return 0.0
    p = successes / trials
    z2 = z * z
    centre = p + z2 / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    return max(0.0, (centre - spread) / (1 + z2 / trials))


@dataclass(frozen=True, kw_only=True)
class Run:
    """A run of a series: its key and when it ran."""

    run: str
    at: datetime.datetime

    def json(self) -> dict[str, str]:
        return {"run": self.run, "date": self.at.date().isoformat()}


@dataclass(frozen=True, kw_only=True)
class Mark:
    state: State
    runs: int  # runs of the series, tonight's included
    red: int  # of them red
    streak: int  # red runs in a row ending tonight (0: green tonight)
    since: datetime.date | None  # the first of the current streak of red runs (recurring)
    flips: int  # changes red <-> green within the last WINDOW runs
    flakiness: float  # flips / transitions in the window at its Wilson lower bound: the rank of the flaky
    last_good: Run | None  # the newest green run before (or at) tonight
    first_bad: Run | None  # the first run of the newest streak of red runs
    recent: str = ""  # the last WINDOW runs, oldest first: "x" red, "." green (the html's timeline)

    def json(self) -> dict[str, object]:
        return {"state": str(self.state), "runs": self.runs, "red": self.red, "streak": self.streak,
                "since": self.since.isoformat() if self.since else None, "flips": self.flips,
                "flakiness": round(self.flakiness, 3),
                "last_good": self.last_good.json() if self.last_good else None,
                "first_bad": self.first_bad.json() if self.first_bad else None, "recent": self.recent}

    def line(self) -> str:
        """One line for the text views: `recurring: red since 2026-12-01 (run 3 of 3 red)`."""
        if self.state == State.RECURRING:
            return f"recurring: red since {self.since}, run {self.streak} of {self.runs} (red in {self.red})"
        if self.state == State.FLAKY:
            return f"flaky: {self.flips} flips in the last {min(self.runs, WINDOW)} runs (bound {self.flakiness:.2f})"
        if self.state == State.RECOVERED:
            bad = f" since {self.first_bad.at.date()}" if self.first_bad else ""
            return f"recovered: green after red{bad}"
        return f"first-red: first red in {self.runs} runs"

    @property
    def word(self) -> str:
        return str(self.state)


@dataclass(frozen=True, kw_only=True)
class Marks:
    """Marks by a report's place: cells by `cell@gpu`, cases by (`cell@gpu`, case)."""

    cells: dict[str, Mark] = field(default_factory=dict)
    cases: dict[tuple[str, str], Mark] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Cases per state (the summary's line)."""
        found: dict[str, int] = {}
        for mark in self.cases.values():
            found[mark.word] = found.get(mark.word, 0) + 1
        return found


def judge(series: Sequence[tuple[Run, bool]]) -> Mark | None:
    """The mark of the newest entry (tonight) of a series: (run, red) oldest first, tonight last.
    None: nothing to say (green, and green the run before, and not flaky)."""
    if not series:
        return None
    red_now = series[-1][1]
    before = series[:-1]
    window = [r for _, r in series[-WINDOW:]]
    flips = sum(1 for a, b in itertools.pairwise(window) if a != b)
    flakiness = wilson_lower(flips, len(window) - 1)
    streak = 0
    for _, red in reversed(series):
        if not red:
            break
        streak += 1
    last_green = next((run for run, red in reversed(series) if not red), None)
    # The newest streak of red runs: tonight's when red, else the one that ended before tonight.
    end = len(series) if red_now else next((i + 1 for i in range(len(series) - 1, -1, -1) if series[i][1]), 0)
    start = end
    while start > 0 and series[start - 1][1]:
        start -= 1
    first_bad = series[start][0] if end > start else None
    flaky = flips >= MIN_FLIPS and flakiness >= FLAKY_BOUND
    if flaky:
        state = State.FLAKY
    elif red_now:
        state = State.RECURRING if any(r for _, r in before) else State.FIRST_RED
    elif before and before[-1][1]:
        state = State.RECOVERED
    else:
        return None
    return Mark(state=state, runs=len(series), red=sum(1 for _, r in series if r), streak=streak,
                since=first_bad.at.date() if red_now and first_bad else None, flips=flips, flakiness=flakiness,
                last_good=last_green, first_bad=first_bad, recent="".join("x" if r else "." for r in window))
