"""explore/space.py: every drawn configuration is valid and is a case the suite accepts as written;
the order of simplicity is total; a configuration survives its JSON round trip (issue 51)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from hypothesis import given

from convmatrix.explore import space
from convmatrix.results import rundir
from strategies import explore_configs


@given(explore_configs())
def test_a_drawn_configuration_is_valid_and_round_trips(config: space.Config) -> None:
    assert space.valid(config)
    assert space.from_json(space.as_json(config)) == config
    assert min(config.output) >= 1 and config.in_channels % config.groups == 0


def test_drawn_configurations_are_cases_the_suite_accepts(tmp_path: Path) -> None:
    """The suite's own case-file checks (suites/casefile.py) take 500 drawn configurations as written."""
    casefile, catalog = rundir.suite_module("casefile"), rundir.suite_module("catalog")
    rng = random.Random(7)
    path = tmp_path / "explore.json"
    path.write_text(json.dumps({"case": [space.entry(space.draw(rng), f"c{i:04d}") for i in range(500)]}))
    assert len(casefile.load([str(path)], catalog.Case)) == 500


def test_the_fragile_values_are_drawn() -> None:
    rng = random.Random(3)
    drawn = [space.draw(rng) for _ in range(2000)]
    seen = {space.facts(c)["dtype"] for c in drawn}
    assert seen == {"float32", "float16", "bfloat16"}
    assert {c.autocast for c in drawn} == set(space.AUTOCASTS)
    assert all(c.dtype == "float32" for c in drawn if c.autocast)  # autocast takes float32 inputs
    assert {c.layout for c in drawn} == set(space.VIEWS)  # explicit views, on contiguous inputs only
    assert all(c.memory_format == "contiguous" for c in drawn if c.layout)
    assert any(c.groups > 1 and c.groups == c.in_channels for c in drawn)  # depthwise
    assert any(c.transposed and any(c.output_padding) for c in drawn)
    assert any(c.batch > 1024 for c in drawn) and any(max(c.size) >= 2049 for c in drawn)
    assert any(c.in_channels % 8 for c in drawn) and any(c.in_channels % 8 == 0 for c in drawn)
    assert {c.rank for c in drawn} == {1, 2, 3}


def test_the_same_seed_draws_the_same_configurations() -> None:
    one, two = random.Random(11), random.Random(11)
    assert [space.draw(one) for _ in range(50)] == [space.draw(two) for _ in range(50)]


@given(explore_configs(), explore_configs())
def test_simplicity_is_a_total_order(a: space.Config, b: space.Config) -> None:
    assert (space.simplicity(a) == space.simplicity(b)) == (a == b)


def test_configurations_for_the_cpu_set_no_tf32_and_stay_small() -> None:
    """A cell on the CPU skips a case that sets TF32 (both sides: never a finding, only time lost)."""
    rng = random.Random(4)
    drawn = [space.draw(rng, cuda=False) for _ in range(1000)]
    assert all(c.allow_tf32 is None for c in drawn)
    assert max(c.in_channels for c in drawn) <= space.CPU_CHANNELS and max(c.batch for c in drawn) <= 16
    assert any(c.in_channels % 8 for c in drawn) and any(c.in_channels % 8 == 0 for c in drawn)
    assert any(c.groups > 1 and c.groups == c.in_channels for c in drawn)


def test_a_tried_line_written_before_autocast_reads_back_with_its_key() -> None:
    """The tried log and the history key a configuration by as_json: one drawn before autocast was a
    field (no "autocast" in its line) reads back, and keys as it did, so explore never repeats it."""
    rng = random.Random(5)
    plain = next(c for c in (space.draw(rng) for _ in range(100)) if c.autocast is None)
    line = space.as_json(plain)
    assert "autocast" not in line
    assert space.from_json(line) == plain and space.key(space.from_json(line)) == space.key(plain)
    cast = space.Config(**{**{f: getattr(plain, f) for f in line}, "dtype": "float32", "autocast": "bfloat16"})
    assert space.as_json(cast)["autocast"] == "bfloat16" and space.key(cast) != space.key(plain)
    assert not space.valid(space.Config(**{**{f: getattr(plain, f) for f in line}, "dtype": "float16",
                                           "autocast": "bfloat16"}))
