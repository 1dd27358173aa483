"""Case isolation in the suite (suites/isolation.py): real runs on CPU in subprocesses, where
the fault plugin makes cases abort, segfault, hang, spin holding the GIL and raise a sticky
CUDA error, and unit tests of the GPU-per-worker choice, which needs no GPU."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from testkit import load_suite_module
from test_suite import CASE_IDS, Run, run_suite

isolation = load_suite_module("isolation")

# Small float32 cases (they pass on any CPU); the faulted ones are spread among the others so
# that cases run after each fault.
PASSING = ("conv1d-fp32-k3-p1", "conv2d-fp32-k3-p2-dilated2", "conv3d-fp32-k3-p1",
           "conv_transpose1d-fp32-k3-s2", "conv2d-fp32-k3-p1-sliced", "conv_transpose3d-fp32-k3-s2")
FAULTS = {
    "abort": "conv1d-fp32-k3-permuted-bwd",
    "segv": "conv2d-fp32-k3-transposed",
    "hang": "conv2d-fp32-k3-p1",
    "spin": "conv2d-fp32-k1x7-p0x3",
    "sticky": "conv2d-fp32-k3-p1-g4-bwd",
}
CASES = (PASSING[0], FAULTS["abort"], PASSING[1], FAULTS["segv"], PASSING[2], FAULTS["hang"],
         PASSING[3], FAULTS["spin"], PASSING[4], FAULTS["sticky"], PASSING[5])
TIMEOUT = 2


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_every_other_case_passes_once(isolated_run: Run) -> None:
    records = isolated_run.records()
    assert sorted(r["case"] for r in records) == sorted(CASES)
    for case in PASSING:
        assert [r["status"] for r in lines_of(isolated_run, case)] == ["passed"], isolated_run.output
    assert isolated_run.markers() == []


@pytest.mark.slow
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
    assert "ran past its 2 s timeout; worker gw" in isolated_run.output  # the watchdog's note
    assert "hit a sticky CUDA error" in isolated_run.output


def test_without_isolation_nothing_changes(tmp_path: Path) -> None:
    cases = (PASSING[0], FAULTS["sticky"], PASSING[1])
    run = run_suite(tmp_path / "results", cases=cases, faults={"sticky": {FAULTS["sticky"]: True}})
    assert run.returncode == 1, run.output
    assert [(r["case"], r["status"], r["worker"]) for r in run.records()] == [
        (PASSING[0], "passed", "main"), (FAULTS["sticky"], "failed", "main"), (PASSING[1], "passed", "main")]
    assert run.env()["isolation"] == {"isolate": False, "case_timeout": 0.0, "gpu_per_worker": True,
                                      "workers": {}}
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


# --- units ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("environ", "count", "gpus"), [
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, 8, ["2", "3"]),
    ({"CUDA_VISIBLE_DEVICES": " GPU-aa , GPU-bb "}, 8, ["GPU-aa", "GPU-bb"]),
    ({"CUDA_VISIBLE_DEVICES": ""}, 8, []),  # set to nothing: no GPU, whatever the machine has
    ({}, 3, ["0", "1", "2"]),
    ({}, 0, []),
])
def test_outer_gpus(environ: dict[str, str], count: int, gpus: list[str]) -> None:
    assert isolation.outer_gpus(environ, lambda: count) == gpus


def test_gpu_for_slot_is_round_robin() -> None:
    gpus = ["4", "6", "7"]
    assert [isolation.gpu_for_slot(slot, gpus) for slot in range(7)] == ["4", "6", "7", "4", "6", "7", "4"]
    assert isolation.gpu_for_slot(2, []) is None
    with pytest.raises(ValueError, match="slot"):
        isolation.gpu_for_slot(-1, gpus)


def node(worker: str) -> Any:
    return SimpleNamespace(workerinput={"workerid": worker})


def test_a_replacement_worker_takes_the_slot_and_gpu_of_the_one_it_replaces() -> None:
    assigned: dict[str, Any] = {}
    slots = isolation.GpuSlots(lambda worker, facts: assigned.update({worker: facts}),
                               environ={"CUDA_VISIBLE_DEVICES": "1,2"}, count_gpus=lambda: 0)
    gw0, gw1, gw2 = node("gw0"), node("gw1"), node("gw2")
    slots.pytest_configure_node(gw0)
    slots.pytest_configure_node(gw1)
    slots.pytest_testnodedown(gw0, "crashed")
    slots.pytest_configure_node(gw2)
    assert [n.workerinput[isolation.GPU_INPUT_KEY] for n in (gw0, gw1, gw2)] == ["1", "2", "1"]
    assert assigned == {"gw0": {"slot": 0, "cuda_visible_devices": "1"},
                        "gw1": {"slot": 1, "cuda_visible_devices": "2"},
                        "gw2": {"slot": 0, "cuda_visible_devices": "1"}}


def test_a_worker_pins_its_gpu_only_when_given_one() -> None:
    environ = {"CUDA_VISIBLE_DEVICES": "1,2"}
    assert isolation.pin_worker_gpu({isolation.GPU_INPUT_KEY: None}, environ) is None
    assert environ == {"CUDA_VISIBLE_DEVICES": "1,2"}
    assert isolation.pin_worker_gpu({isolation.GPU_INPUT_KEY: "2"}, environ) == "2"
    assert environ == {"CUDA_VISIBLE_DEVICES": "2"}


@pytest.mark.parametrize(("message", "sticky"), [
    ("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be ...", True),
    ("CUDA error: misaligned address", True),
    ("CUDA error: unspecified launch failure", True),
    ("CUDA error: device-side assert triggered", True),
    ("CUDA error: operation not permitted when stream is capturing", True),
    ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if ...", False),
    ("CUDA out of memory. Tried to allocate 2.00 GiB", False),
    ("numeric mismatch: output max_abs_err=0.1", False),
    (None, False),
])
def test_sticky_errors_are_told_by_their_text(message: str | None, sticky: bool) -> None:
    assert isolation.is_sticky(message) is sticky


def test_the_controller_tells_a_timeout_from_a_crash_by_the_time_run() -> None:
    handler = isolation.CrashHandler("/nonexistent", 30.0, lambda *args: None)
    long_ago = {"case": "c", "started": "2020-01-01T00:00:00.000+00:00"}
    just_now = {"case": "c", "started": isolation.datetime.datetime.now(isolation.datetime.timezone.utc).isoformat()}
    assert handler.judge(long_ago, "exit code 1", "gw0")[0] == "timeout"
    status, message = handler.judge(just_now, "signal 11, SIGSEGV", "gw0")
    assert status == "crashed"
    assert message.startswith("the worker process gw0 died (signal 11, SIGSEGV)")
    assert isolation.CrashHandler("/x", 0.0, lambda *args: None).judge(long_ago, None, "gw0")[0] == "crashed"


def test_the_marker_of_a_crash_is_consumed(tmp_path: Path) -> None:
    written: list[tuple[Any, ...]] = []
    handler = isolation.CrashHandler(str(tmp_path), 0.0, lambda *args: written.append(args))
    (tmp_path / "running-gw3.json").write_text(json.dumps({"case": "c", "nodeid": "n", "started": None}))
    report = SimpleNamespace(node=SimpleNamespace(gateway=SimpleNamespace(id="gw3")), longrepr="x")
    handler.pytest_handlecrashitem("suites/test_conv.py::test_conv[c]", report, None)
    assert [args[1:] for args in written] == [
        ("crashed", "the worker process gw3 died (cause unknown) while this case ran; a fresh worker ran the rest",
         "gw3")]
    assert list(tmp_path.iterdir()) == []
    # No marker: the worker wrote the case's line itself before it left; nothing more is written.
    handler.pytest_handlecrashitem("suites/test_conv.py::test_conv[c]", report, None)
    assert len(written) == 1
