"""explore/regions.py: after the budget, a family's region is stated over the planted predicate's
own fields, with counts inside and outside (issue 51)."""

from __future__ import annotations

import random

from convmatrix.explore import regions, space
from explorekit import FAMILY, PLANTED


def tried(name: str, n: int = 600, seed: int = 5) -> list[tuple[space.Config, str | None]]:
    rng = random.Random(seed)
    made = [space.draw(rng) for _ in range(n)]
    return [(c, FAMILY if PLANTED[name](space.facts(c)) else None) for c in made]


def test_the_region_of_a_planted_predicate_names_its_fields() -> None:
    found = regions.region(FAMILY, tried("bf16-grouped"))
    assert set(found.conditions) == {"dtype = bfloat16", "groups >= 2"}, found.line()
    assert found.outside_failing == 0 and found.inside == found.inside_failing > 0


def test_a_threshold_is_stated_at_its_edge() -> None:
    found = regions.region(FAMILY, tried("wide-out"))
    assert found.conditions == ("out_channels >= 48",), found.line()


def test_the_line_counts_inside_and_outside() -> None:
    found = regions.region(FAMILY, tried("strided-3d"))
    line = found.line()
    assert "rank >= 3" in line and "stride >= 2" in line
    assert f"{found.inside_failing} of {found.inside} tried inside fail" in line
    assert found.inside + found.outside == 600
