"""history/marks.py: the mark of tonight's red or green against its series, and the Wilson bound
that ranks the flaky."""

from __future__ import annotations

import datetime
import itertools

import pytest
from hypothesis import given

import strategies as gen
from convmatrix.history.marks import FLAKY_BOUND, MIN_FLIPS, WINDOW, Run, State, judge, wilson_lower


def series(states: list[bool] | str) -> list[tuple[Run, bool]]:
    """'GGRR' or booleans: one run a day from 2026-11-01."""
    reds = [s == "R" for s in states] if isinstance(states, str) else states
    start = datetime.datetime(2026, 11, 1, 2)
    return [(Run(run=f"n{i + 1}", at=start + datetime.timedelta(days=i)), red) for i, red in enumerate(reds)]


@pytest.mark.parametrize(("successes", "trials", "bound"), [
    # Worked values of the formula (z = 1.96): 7 of 7 is n / (n + z^2); 0 of n is 0.
    (7, 7, 7 / (7 + 1.96 ** 2)), (0, 10, 0.0), (0, 0, 0.0), (2, 6, 0.0968), (3, 3, 0.4385), (50, 100, 0.4038),
])
def test_the_wilson_lower_bound_has_its_known_values(successes: int, trials: int, bound: float) -> None:
    assert wilson_lower(successes, trials) == pytest.approx(bound, abs=1e-3)


@pytest.mark.parametrize(("states", "state"), [
    ("R", State.FIRST_RED), ("GR", State.FIRST_RED), ("GGGGR", State.FIRST_RED),
    ("GRR", State.RECURRING), ("RGR", State.RECURRING),
    ("GRG", State.RECOVERED), ("GGGRG", State.RECOVERED),
    ("GRGR", State.FLAKY), ("RGRGRGRG", State.FLAKY), ("GRGRGRGR", State.FLAKY),
    ("G", None), ("GG", None), ("GRGG", None),
])
def test_each_state(states: str, state: State | None) -> None:
    mark = judge(series(states))
    assert (mark.state if mark else None) == state


def test_recurring_says_since_when_and_which_run_of_how_many() -> None:
    mark = judge(series("GGRGRRR"))
    assert mark is not None and mark.state == State.RECURRING
    assert (mark.since, mark.streak, mark.runs, mark.red) == (datetime.date(2026, 11, 5), 3, 7, 4)
    assert mark.first_bad is not None and mark.first_bad.run == "n5"
    assert mark.last_good is not None and mark.last_good.run == "n4"
    assert mark.line() == "recurring: red since 2026-11-05, run 3 of 7 (red in 4)"
    assert mark.recent == "..x.xxx"
    assert judge(series("R" * (WINDOW + 5))).recent == "x" * WINDOW  # type: ignore[union-attr]


def test_recovered_names_the_streak_that_ended() -> None:
    mark = judge(series("GRRG"))
    assert mark is not None and mark.first_bad is not None and mark.last_good is not None
    assert (mark.first_bad.run, mark.last_good.run, mark.since) == ("n2", "n4", None)


def test_two_nights_that_flipped_once_are_not_flaky_by_a_raw_rate() -> None:
    """1 flip of 1 is 100 % raw; its lower bound is what counts (0.21), and one flip is a change."""
    mark = judge(series("GR"))
    assert mark is not None and mark.state == State.FIRST_RED and mark.flips == 1


def test_flips_older_than_the_window_do_not_count() -> None:
    old = "GR" * 20
    mark = judge(series(old + "R" * WINDOW))
    assert mark is not None and mark.state == State.RECURRING and mark.flips == 0


def test_the_flaky_rank_by_their_bound() -> None:
    ranked = sorted(["GRGRGRGR", "GGGGRGRG", "GRGRGRGRGRGRGRGR"], key=lambda s: -judge(series(s)).flakiness)  # type: ignore[union-attr]
    assert ranked[0] == "GRGRGRGRGRGRGRGR"  # more evidence of as many flips: the higher bound


@pytest.mark.properties
@given(gen.series_states())
def test_a_mark_always_agrees_with_its_series(states: list[bool]) -> None:
    mark = judge(series(states))
    before, now = states[:-1], states[-1]
    window = states[-WINDOW:]
    flips = sum(a != b for a, b in itertools.pairwise(window))
    if mark is None:
        assert not now and not (before and before[-1])
        return
    assert mark.runs == len(states) and mark.red == sum(states) and mark.flips == flips
    if mark.state == State.FLAKY:
        assert flips >= MIN_FLIPS and mark.flakiness >= FLAKY_BOUND
        return
    if mark.state == State.FIRST_RED:
        assert now and not any(before)
    elif mark.state == State.RECURRING:
        assert now and any(before) and mark.since is not None and mark.streak >= 1
    else:
        assert mark.state == State.RECOVERED and not now and before[-1]
    if now:
        assert all(states[-mark.streak:]) and (len(states) == mark.streak or not states[-mark.streak - 1])
