"""What the runner leaves in a cell directory when the cell finishes: first_cause.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

from convmatrix.matrix.cells import Cell
from convmatrix.results import rundir
from convmatrix.run import runner
from testkit import record, write_result

SIGNATURE = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."


def test_a_failing_cell_stores_triages_first_cause(tmp_path: Path) -> None:
    cell = write_result(tmp_path, "c", [record("a"), record("b", "failed", SIGNATURE)])
    (cell / "log.txt").write_text("\n".join(["x"] * 41 + [f"E   {SIGNATURE}", "y"]) + "\n")
    runner.write_first_cause(cell)
    assert json.loads((cell / "first_cause.json").read_text()) == {
        "schema": 1, "family": "cudnn_not_supported", "line": 42, "rank": None, "fatal": True}


def test_a_passing_cell_stores_no_cause_without_reading_its_log(tmp_path: Path) -> None:
    cell = write_result(tmp_path, "c", [record("a")])
    (cell / "log.txt").mkdir()  # unreadable as a log: a scan would fail
    runner.write_first_cause(cell)
    assert json.loads((cell / "first_cause.json").read_text())["family"] is None


def test_a_failing_cell_without_a_log_stores_no_cause(tmp_path: Path) -> None:
    cell = write_result(tmp_path, "c", [record("b", "failed", SIGNATURE)])
    runner.write_first_cause(cell)
    assert json.loads((cell / "first_cause.json").read_text())["family"] is None


def outside_folder(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me\n")
    return outside


def test_first_cause_never_follows_a_planted_temporary_name(tmp_path: Path) -> None:
    """Issue 32, item 2: the suite knows the harness's pid (its parent's) and plants the name the
    writer took for its temporary file as a link to a file outside: it must stay untouched."""
    outside = outside_folder(tmp_path)
    cell = write_result(tmp_path, "c", [record("a")])
    for name in ("first_cause.json", "cell.json"):
        (cell / f".{name}.{os.getpid()}.tmp").symlink_to(outside / "precious")
    runner.write_first_cause(cell)
    rundir.write_json(cell / rundir.CELL_JSON, {"schema": 1})
    assert (outside / "precious").read_text() == "keep me\n"
    assert not (cell / "first_cause.json").is_symlink() and not (cell / "cell.json").is_symlink()
    assert json.loads((cell / "first_cause.json").read_text())["family"] is None


def test_a_rerun_into_a_planted_link_writes_inside_the_cell(tmp_path: Path) -> None:
    """Issue 32, item 1: blocking/ left as a link to a folder outside; the re-run's log.txt goes
    into a real blocking/ folder, and the suite is pointed there."""
    outside = outside_folder(tmp_path)
    target = runner.Target(cell=Cell(lane="host", python="3.11"), gpu=None, out=tmp_path / "run", host="h")
    target.results_dir.mkdir(parents=True)
    (target.results_dir / rundir.BLOCKING).symlink_to(outside, target_is_directory=True)
    code = runner.run_local("/bin/true", target, results_dir=target.results_dir / rundir.BLOCKING)
    assert code == 0 and sorted(p.name for p in outside.iterdir()) == ["precious"]
    blocking = target.results_dir / rundir.BLOCKING
    assert blocking.is_dir() and not blocking.is_symlink() and (blocking / rundir.LOG).is_file()


def test_an_attempt_s_cause_comes_from_the_harness_s_own_lines_never_a_test_s_failure(tmp_path: Path) -> None:
    cell = tmp_path / "cell"
    cell.mkdir()
    lines = [{"case": "a", "status": "failed", "message": "RuntimeError: exit code 137 in the case's own words"},
             {"case": "b", "status": "passed", "message": None}]
    (cell / rundir.RESULTS).write_text("".join(json.dumps(line) + "\n" for line in lines))
    rundir.write_json(cell / rundir.CELL_JSON, {"exit_code": 1})
    assert runner.attempt_cause(cell) is None  # a failing test is the test's, whatever it says
    killed = {"case": "c", "status": "crashed", "message": "the suite process died (signal 9, SIGKILL) while this case ran"}
    with (cell / rundir.RESULTS).open("a") as results:
        results.write(json.dumps(killed) + "\n")
    found = runner.attempt_cause(cell)
    assert found is not None and (found.cause, found.retryable) == ("killed", True)
    assert runner.statuses(cell) == {"crashed": 1, "failed": 1, "passed": 1}
    segv = dict(killed, message="the suite process died (signal 11, SIGSEGV) while this case ran")
    (cell / rundir.RESULTS).write_text(json.dumps(segv) + "\n")
    assert runner.attempt_cause(cell) is None  # a crash the test caused itself


def test_an_attempt_line_nested_past_the_bound_is_skipped_not_a_recursion_error(tmp_path: Path) -> None:
    """A suite that writes a line nesting 200,000 lists, then is SIGKILLed: the retry decision read
    it with a plain json.loads (RecursionError, a traceback in the run); now by the bounded reader."""
    cell = tmp_path / "cell"
    cell.mkdir()
    killed = {"case": "c", "status": "crashed", "message": "the suite process died (signal 9, SIGKILL) while this case ran"}
    (cell / rundir.RESULTS).write_text("[" * 200_000 + "]" * 200_000 + "\n" + json.dumps(killed) + "\n")
    rundir.write_json(cell / rundir.CELL_JSON, {"exit_code": -9})
    found = runner.attempt_cause(cell)
    assert found is not None and found.cause == "killed"
    assert runner.statuses(cell) == {"crashed": 1}


def test_an_attempt_is_set_aside_whole_and_the_next_starts_empty(tmp_path: Path) -> None:
    cell = tmp_path / "cell"
    (cell / "evidence").mkdir(parents=True)
    (cell / rundir.LOG).write_text("first\n")
    (cell / "evidence" / "a.txt").write_text("x")
    (cell / rundir.ATTEMPTS).symlink_to(tmp_path)  # planted by the suite: replaced, never followed
    assert rundir.set_aside(cell, 1) == "attempts/1"
    assert sorted(p.name for p in cell.iterdir()) == ["attempts"]
    assert (cell / "attempts" / "1" / rundir.LOG).read_text() == "first\n"
    assert (cell / "attempts" / "1" / "evidence" / "a.txt").exists()
    (cell / rundir.LOG).write_text("second\n")
    rundir.set_aside(cell, 2)
    assert sorted(p.name for p in (cell / "attempts").iterdir()) == ["1", "2"]
