"""Case isolation in the suite (suites/isolation.py): real runs on CPU in subprocesses, where
the fault plugin makes cases abort, segfault, hang, spin holding the GIL and raise a sticky
CUDA error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faultcases import CASES, FAULTS, PASSING, TIMEOUT
from suiterun import Run, run_suite
from testkit import load_suite_module

isolation = load_suite_module("isolation")
CASE_IDS = [case.id for case in load_suite_module("catalog").CASES]


def lines_of(run: Run, case: str) -> list[dict[str, Any]]:
    return [record for record in run.records() if record["case"] == case]


@pytest.fixture(scope="module")
def isolated_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    assert set(CASES) <= set(CASE_IDS), "a case these tests use left the catalog"
    faults = {kind: {case: True} for kind, case in FAULTS.items()}
    run = run_suite(tmp_path_factory.mktemp("isolated") / "results", "--case-timeout", str(TIMEOUT),
                    cases=CASES, faults=faults)
    assert run.returncode == 1, run.output
    return run


def test_each_fault_costs_its_own_case_alone(isolated_run: Run) -> None:
    outcomes = {case: [(r["status"], r["exc_type"]) for r in lines_of(isolated_run, case)]
                for case in FAULTS.values()}
    assert outcomes == {
        FAULTS["abort"]: [("crashed", None)],
        FAULTS["segv"]: [("crashed", None)],
        FAULTS["hang"]: [("timeout", None)],
        FAULTS["spin"]: [("timeout", None)],
        FAULTS["sticky"]: [("failed", "RuntimeError")],
    }, isolated_run.output
    by_case = isolated_run.by_case()
    assert "SIGABRT" in by_case[FAULTS["abort"]]["message"]
    assert "SIGSEGV" in by_case[FAULTS["segv"]]["message"]
    # The worker's watchdog wrote this one (a sleeping case lets the timer thread run) ...
    hang = by_case[FAULTS["hang"]]
    assert hang["message"] == f"the case ran past its {TIMEOUT} s timeout"
    assert hang["duration_s"] >= TIMEOUT
    # ... and the controller this one: the case held the GIL, faulthandler ended the worker.
    assert by_case[FAULTS["spin"]]["message"].startswith(
        f"the case ran past its {TIMEOUT} s timeout (the worker gw")
    assert by_case[FAULTS["sticky"]]["message"].startswith(
        "CUDA error: an illegal memory access was encountered\n")
    for case in FAULTS.values():
        record = by_case[case]
        assert record["nodeid"] == f"suites/test_conv.py::test_conv[{case}]"
        assert record["worker"].startswith("gw")


def test_every_other_case_passes_once(isolated_run: Run) -> None:
    records = isolated_run.records()
    assert sorted(r["case"] for r in records) == sorted(CASES)
    for case in PASSING:
        assert [r["status"] for r in lines_of(isolated_run, case)] == ["passed"], isolated_run.output
    assert isolated_run.markers() == []


def test_a_fresh_worker_runs_the_rest_after_each_fault(isolated_run: Run) -> None:
    records = isolated_run.records()
    faulted = set(FAULTS.values())
    for index, record in enumerate(records):
        if record["case"] in faulted:
            later = {r["worker"] for r in records[index + 1:]}
            assert record["worker"] not in later, records
    env = isolated_run.env()
    assert env["ended"] is not None
    assert env["isolation"]["isolate"] is True
    assert env["isolation"]["case_timeout"] == TIMEOUT
    # One worker at a time (-n 1), each replacement in the slot of the one it replaced.
    workers = env["isolation"]["workers"]
    assert len(workers) == 1 + len(FAULTS)
    assert {facts["slot"] for facts in workers.values()} == {0}
    assert f"ran past its {TIMEOUT} s timeout; worker gw" in isolated_run.output  # the watchdog's note
    assert "hit a sticky CUDA error" in isolated_run.output


def test_without_isolation_nothing_changes(tmp_path: Path) -> None:
    cases = (PASSING[0], FAULTS["sticky"], PASSING[1])
    run = run_suite(tmp_path / "results", cases=cases, faults={"sticky": {FAULTS["sticky"]: True}})
    assert run.returncode == 1, run.output
    assert [(r["case"], r["status"], r["worker"]) for r in run.records()] == [
        (PASSING[0], "passed", "main"), (FAULTS["sticky"], "failed", "main"), (PASSING[1], "passed", "main")]
    assert run.env()["isolation"] == {"isolate": False, "case_timeout": 0.0, "gpu_per_worker": True,
                                      "in_process": False, "workers": {}}
    assert "gw0" not in run.output
    assert run.markers() == []


def test_isolate_without_xdist_is_a_usage_error(tmp_path: Path) -> None:
    run = run_suite(tmp_path / "results", "--case-timeout", "5", "-p", "no:xdist", cases=(PASSING[0],))
    assert run.returncode == 4, run.output
    assert "--isolate (which --case-timeout turns on) needs pytest-xdist" in run.output
    assert "Traceback" not in run.output


def test_negative_timeout_is_a_usage_error(tmp_path: Path) -> None:
    run = run_suite(tmp_path / "results", "--case-timeout", "-1", cases=(PASSING[0],))
    assert run.returncode == 4, run.output
    assert "--case-timeout takes a number of seconds >= 0" in run.output


@pytest.mark.parametrize(("switch", "seen", "assigned"), [
    ("on", {"gw0": "3", "gw1": "5"}, {"gw0": {"slot": 0, "cuda_visible_devices": "3"},
                                      "gw1": {"slot": 1, "cuda_visible_devices": "5"}}),
    ("off", {"gw0": "3,5", "gw1": "3,5"}, {}),
])
def test_each_xdist_worker_takes_its_own_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str,
                                             seen: dict[str, str], assigned: dict[str, Any]) -> None:
    """On CPU the variable changes nothing else, so what each worker saw tells the wiring."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    run = run_suite(tmp_path / "results", "-n", "2", "--gpu-per-worker", switch, cases=PASSING[:4],
                    faults={"report_env": {"*": "CUDA_VISIBLE_DEVICES"}})
    assert run.returncode == 0, run.output
    for record in run.records():
        (warning,) = record["warnings"]
        assert warning["message"] == f"CUDA_VISIBLE_DEVICES={seen[record['worker']]}"
    assert run.env()["isolation"]["workers"] == assigned


def test_in_process_needs_no_xdist_and_workers_asked_for_win(tmp_path: Path) -> None:
    """--in-process (what convmatrix passes) runs the cases in the suite's own process with the
    watchdog armed; the user's -n N, given after it, still means xdist workers."""
    hang = {"hang": {FAULTS["hang"]: True}}
    alone = run_suite(tmp_path / "alone", "--case-timeout", str(TIMEOUT), "--in-process", "-p", "no:xdist",
                      cases=(PASSING[0], FAULTS["hang"], PASSING[1]), faults=hang)
    assert alone.returncode == isolation.TIMEOUT_EXIT_CODE, alone.output
    assert [(r["case"], r["status"], r["worker"]) for r in alone.records()] == [
        (PASSING[0], "passed", "main"), (FAULTS["hang"], "timeout", "main")]  # the rest is the caller's
    assert alone.env()["isolation"]["in_process"] is True and alone.env()["ended"] is None
    workers = run_suite(tmp_path / "workers", "--case-timeout", str(TIMEOUT), "--in-process", "-n", "1",
                        cases=(PASSING[0], FAULTS["hang"], PASSING[1]), faults=hang)
    assert workers.returncode == 1, workers.output
    assert [r["status"] for r in workers.records()] == ["passed", "timeout", "passed"]
    assert workers.env()["isolation"]["isolate"] is True and workers.env()["isolation"]["in_process"] is False
