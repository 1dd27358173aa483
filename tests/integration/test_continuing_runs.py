"""Isolation without a second interpreter (orchestrate.run_continuing, the suite's --in-process
and --continue-run): real suite runs on the host lane, where the fault plugin makes cases abort,
segfault, hang, spin holding the GIL and raise a sticky CUDA error. The cases share one process
until one of them ends it; the harness records that case and runs the rest in a fresh one."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from convmatrix.matrix.cells import Cell
from convmatrix.results import rundir
from convmatrix.run import orchestrate, runner
from convmatrix.run.lanes import Prepared, SuiteRun
from convmatrix.run.lanes.host import Host
from faultcases import CASES, FAULTS, PASSING, TIMEOUT
from suiterun import PLUGINS


class Counted(Host):
    """The host lane, counting its runs and refusing a fourth where a test says so."""

    def __init__(self, limit: int = 100) -> None:
        self.runs = 0
        self.limit = limit

    def run(self, prepared: Prepared, run: SuiteRun, log: Any) -> int:
        self.runs += 1
        assert self.runs <= self.limit, "run_continuing kept starting the suite"
        return super().run(prepared, run, log)


def continuing(tmp: Path, cases: tuple[str, ...], faults: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
               *extra: str, lane: Counted | None = None) -> tuple[runner.Target, list[str], int]:
    spec = tmp / "faults.json"
    spec.write_text(json.dumps(faults))
    monkeypatch.setenv("PYTHONPATH", f"{PLUGINS}:{tmp}")
    monkeypatch.setenv("CONVMATRIX_FAULTS", str(spec))
    target = runner.Target(cell=Cell(lane="host"), gpu=None, out=tmp / "run")
    meta = runner.write_cell_json(target, python=sys.executable, control=False, extra={})
    select = tuple(f"suites/test_conv.py::test_conv[{case}]" for case in cases)
    # The user's --case-timeout comes after the harness's own, and wins.
    run = SuiteRun(target=target, args=("-p", "convmatrix_faults", "--case-timeout", str(TIMEOUT), *extra),
                   select=select)
    said: list[str] = []
    code = orchestrate.run_continuing(lane or Counted(), Prepared(python=sys.executable), run, said.append)
    runner.finish(target, code, meta)
    return target, said, code


def records(target: runner.Target) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (target.results_dir / rundir.RESULTS).read_text().splitlines()]


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory) -> tuple[runner.Target, list[str], int]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return continuing(tmp_path_factory.mktemp("continuing"), CASES,
                          {kind: {case: True} for kind, case in FAULTS.items()}, monkeypatch)


def test_each_fault_costs_its_own_case_alone(faulted: tuple[runner.Target, list[str], int]) -> None:
    target, _, _ = faulted
    by_case = {r["case"]: r for r in records(target)}
    assert {case: by_case[case]["status"] for case in FAULTS.values()} == {
        FAULTS["abort"]: "crashed", FAULTS["segv"]: "crashed", FAULTS["hang"]: "timeout",
        FAULTS["spin"]: "timeout", FAULTS["sticky"]: "failed"}
    assert "SIGABRT" in by_case[FAULTS["abort"]]["message"]
    assert "SIGSEGV" in by_case[FAULTS["segv"]]["message"]
    # The suite's watchdog wrote this one (a sleeping case lets its timer thread run) ...
    assert by_case[FAULTS["hang"]]["message"] == f"the case ran past its {TIMEOUT} s timeout"
    # ... and the harness this one: the case held the GIL, so faulthandler ended the process.
    assert by_case[FAULTS["spin"]]["message"].startswith(f"the case ran past its {TIMEOUT} s timeout (the suite process")


def test_every_case_has_one_line_and_the_run_is_complete(faulted: tuple[runner.Target, list[str], int]) -> None:
    target, _, code = faulted
    lines = records(target)
    assert [r["case"] for r in lines] == list(CASES)  # each once, in order: the rest ran after each fault
    assert all(r["status"] == "passed" for r in lines if r["case"] in PASSING)
    assert list(target.results_dir.glob("running-*.json")) == []
    assert code == 1  # the whole run's status: it has failing cases
    assert rundir.is_complete(target.results_dir)


def test_one_fresh_process_per_fault_and_none_before(faulted: tuple[runner.Target, list[str], int]) -> None:
    target, said, _ = faulted
    env = json.loads((target.results_dir / rundir.ENV_JSON).read_text())
    assert env["isolation"]["in_process"] is True and env["isolation"]["isolate"] is False
    assert env["ended"] is not None
    continued = env["continued"]
    assert len(continued) == len(FAULTS)
    assert len({env["pid"], *(attempt["pid"] for attempt in continued)}) == 1 + len(FAULTS)
    assert all("--continue-run" in attempt["argv"] for attempt in continued)
    assert "--continue-run" not in env["argv"]
    assert len([line for line in said if "ended early" in line]) == len(FAULTS)


def test_a_crash_in_the_last_case_still_completes_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = (PASSING[0], FAULTS["segv"])
    target, _, code = continuing(tmp_path, cases, {"segv": {FAULTS["segv"]: True}}, monkeypatch)
    assert [(r["case"], r["status"]) for r in records(target)] == [(PASSING[0], "passed"), (FAULTS["segv"], "crashed")]
    assert code == 1
    assert rundir.is_complete(target.results_dir)


def test_a_process_that_dies_before_any_case_is_not_started_again(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "die_at_collection.py").write_text(
        "import os\n\ndef pytest_collection_finish(session):\n    os._exit(3)\n")
    lane = Counted(limit=2)
    target, _, code = continuing(tmp_path, (PASSING[0],), {}, monkeypatch, "-p", "die_at_collection", lane=lane)
    assert lane.runs == 1
    assert code == 3
    assert not rundir.is_complete(target.results_dir)


def test_a_sticky_error_in_the_last_case_ends_the_run_as_usual(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No case is left to need a fresh CUDA context: the process ends its session itself."""
    cases = (PASSING[0], FAULTS["sticky"])
    target, said, code = continuing(tmp_path, cases, {"sticky": {FAULTS["sticky"]: True}}, monkeypatch)
    assert [(r["case"], r["status"]) for r in records(target)] == [(PASSING[0], "passed"), (FAULTS["sticky"], "failed")]
    assert code == 1 and said == []
    env = json.loads((target.results_dir / rundir.ENV_JSON).read_text())
    assert "continued" not in env and env["ended"] is not None
