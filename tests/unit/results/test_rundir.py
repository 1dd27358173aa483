"""The results directory's owner: fresh directories swapped in whole, completeness, and the
checks of the records' shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from convmatrix.results import rundir


def test_a_rerun_replaces_the_result_instead_of_appending(tmp_path: Path) -> None:
    final = tmp_path / "c@cpu"
    for cases in (["a", "b", "c"], ["d"]):
        with rundir.replacing(final) as work:
            assert work != final and not (work / rundir.RESULTS).exists()
            for case in cases:
                rundir.append_result(work, {"case": case})
    lines = (final / rundir.RESULTS).read_text().splitlines()
    assert [json.loads(line)["case"] for line in lines] == ["d"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [rundir.LOCKS, "c@cpu"]  # no partial, no .old
    assert [p.name for p in (tmp_path / rundir.LOCKS).iterdir()] == ["c@cpu"]


def test_an_interrupted_rerun_leaves_the_earlier_result_and_its_partial(tmp_path: Path) -> None:
    final = tmp_path / "c@cpu"
    with rundir.replacing(final) as work:
        rundir.append_result(work, {"case": "old"})

    def interrupted() -> None:
        with rundir.replacing(final) as work:
            rundir.append_result(work, {"case": "new"})
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    assert json.loads((final / rundir.RESULTS).read_text())["case"] == "old"
    assert rundir.staging_dir(final).is_dir()
    with rundir.replacing(final) as work:  # the next attempt starts from nothing
        assert not (work / rundir.RESULTS).exists()
    assert not rundir.staging_dir(final).exists()


def test_complete_means_ended_exit_0_or_1_and_closed_by_the_harness(tmp_path: Path) -> None:
    def cell(meta: dict[str, object], env: dict[str, str | None]) -> bool:
        directory = tmp_path / f"d{len(list(tmp_path.iterdir()))}"
        directory.mkdir()
        (directory / rundir.CELL_JSON).write_text(json.dumps(meta))
        (directory / rundir.ENV_JSON).write_text(json.dumps(env))
        return rundir.is_complete(directory)

    done: dict[str, str | None] = {"ended": "2026-12-02T00:00:00Z"}
    assert cell({"exit_code": 1, **done}, done)
    assert not cell({"exit_code": -9, **done}, done)
    assert not cell({"exit_code": 0, **done}, {"ended": None})
    assert not cell({"exit_code": 0}, done)  # the harness died before it closed the cell
    assert not cell({"exit_code": 0, "error": "install failed", **done}, done)


@pytest.mark.parametrize(("record", "problem"), [
    ({"schema": 1, "case": "c", "status": "passed", "message": 12345}, "field 'message': expected string or null, got integer 12345"),
    ({"schema": 1, "case": 7, "status": "passed"}, "field 'case': expected string, got integer 7"),
    ({"schema": 1, "case": "c", "status": "won"}, "field 'status': 'won' is not one of"),
    ({"schema": 1, "case": "c"}, "field 'status': missing"),
    ({"schema": 1, "case": "c", "status": "passed", "duration_s": True}, "field 'duration_s': expected integer or number or null, got boolean"),
])
def test_a_line_of_the_wrong_shape_is_named_by_field(record: dict[str, Any], problem: str) -> None:
    assert rundir.records.result_problems(record)[0].startswith(problem)


def test_a_sound_line_has_no_problems() -> None:
    line = rundir.records.crash_record(cell_id="c", case="x", nodeid=None, status="crashed",
                                       message="died", worker="gw0", started=None)
    assert rundir.records.result_problems(line) == []
    assert rundir.records.parse_time(line["ended"]) is not None


def test_two_writers_of_one_result_take_turns_instead_of_sharing_its_partial(tmp_path: Path) -> None:
    """Two shards of one run on one host both run the control: the second waits for the first
    to swap its result in, then replaces it whole (a .partial is never written by two)."""
    import threading

    final = tmp_path / "control@cpu@node1"
    events: list[str] = []
    inside = threading.Event()

    def first() -> None:
        with rundir.replacing(final) as work:
            events.append("first in")
            inside.set()
            rundir.append_result(work, {"case": "first"})
            threading.Event().wait(0.3)  # the second writer arrives meanwhile
            events.append("first out")

    def second() -> None:
        inside.wait(5)
        with rundir.replacing(final) as work:
            events.append("second in")
            assert not (work / rundir.RESULTS).exists()  # a fresh partial, not the first's
            rundir.append_result(work, {"case": "second"})

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert events == ["first in", "first out", "second in"]
    assert json.loads((final / rundir.RESULTS).read_text())["case"] == "second"
