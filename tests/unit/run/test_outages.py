"""Fail fast, once: an outage a cell found is not tried again by the others of the run."""

from __future__ import annotations

import pytest

from convmatrix.results.infra import RootCause
from convmatrix.run import outages

DNS = RootCause(cause="index unreachable", line="dns error: failed to lookup address information", log="/l/a.log")


def test_a_shared_cause_is_noted_once_and_spares_the_others_only_for_what_they_share() -> None:
    outages.begin()
    assert outages.note("a", RootCause(cause="build failed", line="x")) is None  # a cell's own: not shared
    outages.check("index", "b")
    first = outages.note("a", DNS)
    assert first is not None and first.cell == "a"
    assert outages.note("c", DNS) is None  # once
    outages.check("index", "a")  # the finder itself is never refused by its own finding
    outages.check("registry", "b")  # nothing known of the registry
    with pytest.raises(outages.NotTried, match="b: not tried: index unreachable, found by a") as raised:
        outages.check("index", "b")
    assert raised.value.exit_code == 4 and raised.value.outage.cause == DNS
    assert outages.found() == [first]
    outages.begin()  # a new run knows nothing down
    outages.check("index", "b")
    assert outages.found() == []
