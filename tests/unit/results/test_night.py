"""results/night.py: the one judged night every consumer reads."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from convmatrix import results
from convmatrix.cli.main import main
from convmatrix.errors import BadInput
from convmatrix.results import night, plans
from convmatrix.results.outcomes import Verdict
from testkit import env_json, record, write_result

SIGNATURE = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED."


def judged(run: Path, control: str | None = "ctrl") -> night.Night:
    return night.judge(results.load([run]).results, control)


def by_cell(made: night.Night) -> dict[str, night.JudgedCell]:
    return {cell.cell: cell for cell in made.cells}


def test_an_optional_cell_marked_not_run_never_hides_what_it_recorded(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 45: an optional cell marked not run that recorded failures was shown `not run
    (optional)` and failed nothing, even under --fail-on signature."""
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a"), record("b")], cell={"control": True})
    write_result(run, "opt", [record("a"), record("b", "failed", SIGNATURE)],
                 cell={"optional": True, "not_run": "no torch in the host interpreter"})
    cell = by_cell(judged(run))["opt"]
    assert not cell.excused and cell.unjudged is None and cell.verdict == Verdict.INVALID
    assert cell.fails("signature") and cell.red
    assert {c.case: c.verdict for c in cell.cases}["b"] == Verdict.REGRESSION
    assert main(["report", str(run), "--fail-on", "signature"]) == 1
    assert "marked not run" in capsys.readouterr().out


def test_why_a_cell_or_case_was_not_judged(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True, "exit_code": 2})  # sick: the suite exited 2
    write_result(run, "cand", [record("a", "failed", SIGNATURE)], cell={})
    write_result(run, "broken", [record("a")], cell={"error": "pip install failed"})
    made = by_cell(judged(run))
    assert made["ctrl"].unjudged == night.Unjudged.CONTROL and not made["ctrl"].red
    assert made["cand"].unjudged == night.Unjudged.CONTROL_UNHEALTHY and not made["cand"].red
    assert all(c.unjudged == night.Unjudged.CONTROL_UNHEALTHY and not c.red for c in made["cand"].cases)
    # INVALID for its own reasons is a finding about the cell, whatever its control: judged, red;
    # its cases, which had no healthy control, are not.
    assert made["broken"].unjudged is None and made["broken"].verdict == Verdict.INVALID and made["broken"].red
    assert all(c.unjudged == night.Unjudged.CONTROL_UNHEALTHY for c in made["broken"].cases)
    alone = by_cell(judged(run, control=None))
    assert alone["cand"].unjudged == night.Unjudged.NO_CONTROL


def test_an_optional_cell_that_never_ran_is_excused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True})
    folder = run / "host@cpu"
    folder.mkdir()
    (folder / "cell.json").write_text(json.dumps({"schema": 1, "cell": "host", "lane": "host", "gpu_key": "cpu",
                                                  "optional": True, "not_run": "no torch"}))
    cell = by_cell(judged(run))["host"]
    assert cell.excused and cell.unjudged == night.Unjudged.EXCUSED and not cell.fails() and not cell.red


def test_no_gpu_took_part_unless_a_gpu_cell_ran_a_case(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True})
    assert judged(run).no_gpu
    write_result(run, "ctrl", [record("a")], gpu="h100-sm90",
                 cell={"control": True, "gpu_key": "h100-sm90", "gpu": {"name": "NVIDIA H100", "capability": "9.0"}})
    assert not judged(run).no_gpu


def test_the_night_time_is_its_first_plan_and_a_resume_keeps_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], env=env_json("ctrl", ended="2026-11-05T02:00:00+00:00"),
                 cell={"control": True})
    loaded = results.load([run])
    assert night.shared_time(loaded) == datetime.datetime(2026, 11, 5, 2, tzinfo=datetime.UTC)
    selection: dict[str, object] = {"matrix": "m.toml", "lanes": [], "cells": [], "shard": None}
    first = plans.write(run, host="h1", selection=selection, fleet_gpus=(), expected=[])
    stamp = json.loads(first.read_text())["written"]
    plans.write(run, host="h1", selection=selection, fleet_gpus=(), expected=[])  # the same command again
    assert json.loads(first.read_text())["written"] == stamp
    plans.write(run, host="h2", selection=selection, fleet_gpus=(), expected=[])  # a later shard
    at = night.shared_time(results.load([run]))
    assert at.isoformat(timespec="milliseconds").replace("+00:00", "") == stamp.replace("+00:00", "")
    given = night.shared_time(loaded, "2026-12-01T00:00:00Z")
    assert given == datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    with pytest.raises(BadInput, match="--at"):
        night.shared_time(loaded, "yesterday")
