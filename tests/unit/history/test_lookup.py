"""history/lookup.py: marks read from the database, over results from several hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from historykit import CASES, SIGNATURE, recorded, reported
from testkit import env_json, record, write_result


def two_hosts(base: Path, n: int, red_on: tuple[str, ...]) -> Path:
    """Night n: ctrl and cand on hosts a and b; cand fails case b on the hosts in red_on."""
    run = base / f"night-{n:03d}"
    ended = f"2026-11-{n:02d}T02:00:00+00:00"
    for host in ("a", "b"):
        write_result(run, "ctrl", [record(c) for c in CASES], env=env_json("ctrl", ended=ended),
                     cell={"control": True, "ended": ended}, host=host)
        write_result(run, "cand", [record(c, "failed", SIGNATURE) if c == "b" and host in red_on else record(c)
                                   for c in CASES], env=env_json("cand", ended=ended), cell={"ended": ended}, host=host)
    return run


@pytest.mark.parametrize("first", [("a",), ("b",)])
def test_a_case_red_on_either_host_of_a_run_was_red_in_that_run(first: tuple[str, ...], tmp_path: Path) -> None:
    """Review of issue 36: two hosts' rows of one run were merged keeping one row's id, so a case
    red on the other host's row was lost: red again the next night read first-red, not recurring."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    assert recorded(two_hosts(tmp_path, 1, first), url) == 0
    _, report = reported(two_hosts(tmp_path, 2, ("a", "b")), url, tmp_path, "--fail-on", "never")
    states = {c["gpu"]: (c["history"] or {}).get("state") for c in report["cases"]
              if c["cell"] == "cand" and c["case"] == "b"}
    assert set(states.values()) == {"recurring"}, states
