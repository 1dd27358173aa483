"""explore/tried.py: what explore tried is kept in the history database (schema 2's `explored`
table), per cell, so that the next night's explore never draws it again (issue 51)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import random
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from convmatrix.explore import finds, search, space, tried
from convmatrix.history import backends
from explorekit import PredicateLane
from strategies import explore_configs, json_values

NOW = datetime.datetime(2026, 12, 7, 2, 0, tzinfo=datetime.UTC)


def test_tried_configurations_are_kept_per_cell_and_not_drawn_again(history_url: str) -> None:
    first = search.explore(PredicateLane(None), seed=5, budget=40)
    with backends.opened(history_url) as engine, engine.begin() as conn:
        tried.store(conn, "cand", first.tried, 5, NOW)
        tried.store(conn, "cand", first.tried, 5, NOW)  # a night recorded twice adds nothing
    with backends.opened(history_url, write=False) as engine, engine.connect() as conn:
        kept = tried.keys(conn, "cand")
        assert tried.keys(conn, "other") == set()
    assert kept == {space.key(c) for c, _ in first.tried} and len(kept) == 40
    # The next night, the same seed: nothing it tried before is drawn again.
    second = search.explore(PredicateLane(None), seed=5, budget=40, before=kept)
    assert not kept & {space.key(c) for c, _ in second.tried} and second.skipped >= 40


@given(st.dictionaries(st.sampled_from([f.name for f in dataclasses.fields(space.Config)]),
                       st.one_of(json_values(), st.lists(st.integers(-3, 70), max_size=4)), max_size=17),
       explore_configs())
def test_a_tried_log_line_is_a_configuration_or_refused(data: dict[str, Any], config: space.Config) -> None:
    """The tried log is a file under --out: read back, anything in it is a valid configuration or
    one ValueError, never another exception (a hostile or damaged line is skipped)."""
    merged = {**space.as_json(config), **data}
    try:
        made = space.from_json(merged)
    except ValueError:
        return
    assert space.valid(made) and space.from_json(space.as_json(made)) == made


def test_a_damaged_tried_log_keeps_what_it_can(tmp_path: Path) -> None:
    config = space.draw(random.Random(1))
    good = json.dumps({"key": "x", "seed": 1, "config": space.as_json(config), "found": None})
    (tmp_path / finds.TRIED).write_text("\n".join([good, "not json", '{"config": {"batch": "1"}}', "[]", good[:40]]))
    data, keys = finds.read_tried(tmp_path)
    assert keys == {space.key(config)} and data.startswith(good.encode())


def test_a_history_without_the_table_has_tried_nothing(tmp_path: Path) -> None:
    """The first night's explore against a history nothing recorded yet draws from nothing, and
    its store makes the tables."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert tried.keys_at(url, "cand") == set()
    first = search.explore(PredicateLane(None), seed=6, budget=3)
    tried.store_at(url, "cand", first.tried, 6, NOW)
    assert tried.keys_at(url, "cand") == {space.key(c) for c, _ in first.tried}
