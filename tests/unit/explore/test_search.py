"""explore/search.py: the search finds a planted failure within its budget, shrinks it, states its
region; with nothing planted it finds nothing and says how much it tried; a seed repeats a run and
what was tried before is not drawn again (issue 51)."""

from __future__ import annotations

from convmatrix.explore import search, space
from explorekit import FAMILY, PLANTED, PredicateLane


def test_a_planted_failure_is_found_shrunk_and_placed() -> None:
    lane = PredicateLane(PLANTED["bf16-grouped"])
    done = search.explore(lane, seed=1, budget=500)
    assert done.found_after[FAMILY] <= 500
    (shrunk,) = done.shrunk
    assert (shrunk.config.op, shrunk.config.groups, shrunk.config.dtype) == ("conv1d", 2, "bfloat16")
    (region,) = done.regions
    assert {"dtype = bfloat16", "groups >= 2"} <= set(region.conditions)


def test_with_nothing_planted_nothing_is_found_and_the_count_is_said() -> None:
    lane = PredicateLane(None)
    done = search.explore(lane, seed=2, budget=70)
    assert (len(done.tried), done.shrunk, done.regions) == (70, [], [])
    assert lane.batches == [search.BATCH, search.BATCH, 70 - 2 * search.BATCH]
    assert done.stopped == "the budget of 70 configurations"


def test_a_seed_repeats_and_what_was_tried_is_not_drawn_again() -> None:
    one = search.explore(PredicateLane(None), seed=9, budget=40)
    two = search.explore(PredicateLane(None), seed=9, budget=40)
    assert [c for c, _ in one.tried] == [c for c, _ in two.tried]
    before = {space.key(c) for c, _ in one.tried}
    three = search.explore(PredicateLane(None), seed=9, budget=40, before=before)
    assert not before & {space.key(c) for c, _ in three.tried} and three.skipped >= 40


def test_minutes_stop_the_search_between_batches() -> None:
    ticks = iter(range(0, 10_000, 30))
    done = search.explore(PredicateLane(None), seed=3, budget=1000, minutes=1, clock=lambda: next(ticks))
    assert len(done.tried) == search.BATCH and done.stopped == "1 minutes"  # started at 0, checked at 30, 60
