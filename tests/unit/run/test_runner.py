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
