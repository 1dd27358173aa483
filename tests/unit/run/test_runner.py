"""What the runner leaves in a cell directory when the cell finishes: first_cause.json."""

from __future__ import annotations

import json
from pathlib import Path

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
