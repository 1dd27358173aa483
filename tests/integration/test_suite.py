"""The conv suite (suites/) run for real, on CPU, in a subprocess: what it writes, and how."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suiterun import AUDIT, AUDIT_NODEID, PLUGINS, Run, collected_ids, run_suite, skipped_on_cpu_as_said
from testkit import REPO, load_suite_module

ENV_KEYS = {
    "schema", "cell_id", "torch", "cuda", "cudnn", "cudnn_error", "python", "platform",
    "machine", "driver", "gpus", "device", "lane", "image_id", "hostname", "pid", "started",
    "ended", "knobs", "suite_version", "argv", "isolation",
}
RESULT_KEYS = {
    "schema", "cell_id", "case", "nodeid", "params", "knobs", "device", "status", "exc_type",
    "message", "warnings", "numeric", "duration_s", "worker", "started", "ended",
}
# What a case may add through the record_facts fixture (suites/conftest.py FACT_FIELDS).
FACT_KEYS = {"timing", "fingerprint", "need_mb", "scaled", "shapes", "view", "trigger", "sources", "backend",
             "cudnn_path", "audit"}
NOT_SUPPORTED = ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed "
                 "in a non-contiguous input.\nException raised from run_conv_plan at "
                 "/pytorch/aten/src/ATen/native/cudnn/Conv_v8.cpp:384 (most recent call first):\n"
                 "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96")
PLAN_FAILED = ("Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: "
               "cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED")


CATALOG = load_suite_module("catalog")
CASE_IDS = [case.id for case in CATALOG.CASES]
SUITE_IDS = collected_ids(CATALOG)  # the audit's case first, the catalogue, then the zoo (issues 47, 50)
NUMERIC_KEYS = {"max_abs_err", "max_rel_err", "ratio", "tol", "unit_roundoff", "safety_factor"}


def cases_where(**fields: Any) -> list[str]:
    """Ids of the cases the CPU runs with these fields, in catalog order: tests name cases by
    what they are, so that they survive a change in how ids are spelled."""
    return [case.id for case in CATALOG.CASES
            if not case.needs_gpu and all(getattr(case, key) == value for key, value in fields.items())]


def the_case(**fields: Any) -> str:
    (found,) = cases_where(**fields)
    return found


# The three cases issue 8 saw fail on an AMD EPYC without AVX-512, from the suite's own fixed
# tolerances (grad_input max_abs_err 0.034, 0.033, 0.367 against atol 0.012, 0.0095, 0.147):
# there oneDNN has no float16/bfloat16 kernels, so ATen's own kernels ran, which round partial
# sums to the compute dtype.
ISSUE_8_CASES = (
    the_case(op="conv2d", dtype="float32", autocast="float16", backward=True, trigger=None),
    the_case(op="conv2d", dtype="float16", groups=3, memory_format="channels_last", tag="c30"),
    the_case(op="conv3d", dtype="float32", autocast="bfloat16", backward=True, groups=1),
)
# Kernel paths a correct CPU run must pass on: oneDNN's ISA capped, ATen's vectorization
# capped, one and two threads, and ATen's own kernels instead of oneDNN (convmatrix_faults'
# no_mkldnn), as on a CPU that oneDNN has no float16/bfloat16 kernels for.
FORCED_PATHS = {
    "onednn-sse41": ({"ONEDNN_MAX_CPU_ISA": "SSE41"}, None),
    "onednn-avx2": ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, None),
    "aten-default": ({"ATEN_CPU_CAPABILITY": "default"}, None),
    "aten-avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, None),
    "threads-1": ({"OMP_NUM_THREADS": "1"}, None),
    "threads-2": ({"OMP_NUM_THREADS": "2"}, None),
    "aten-kernels": ({}, {"no_mkldnn": {"*": True}}),
    "aten-kernels-sse41-threads-1": ({"ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default",
                                      "OMP_NUM_THREADS": "1"}, {"no_mkldnn": {"*": True}}),
}


@pytest.fixture(scope="module")
def faulted_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    faults = {
        "raise": {"conv2d-fp32-k3-p1": NOT_SUPPORTED, "conv1d-fp32-k3-p1": "x" * 10000},
        "warn": {"conv3d-fp32-k3-p1": PLAN_FAILED},
        "scale": {"conv_transpose2d-fp32-k4-s2-p1-bwd": 1.5},
    }
    cases = ("conv2d-fp32-k3-p1", "conv1d-fp32-k3-p1", "conv3d-fp32-k3-p1",
             "conv_transpose2d-fp32-k4-s2-p1-bwd", "conv2d-fp16-k3-s2-channels_last")
    run = run_suite(tmp_path_factory.mktemp("faulted") / "results", cases=cases, faults=faults)
    assert run.returncode == 1, run.output
    return run


def observed_torch_version() -> str:
    done = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True, timeout=300, check=True)
    return done.stdout.strip()


def test_full_cpu_run_writes_env_json(default_cpu_run: Run) -> None:
    env = default_cpu_run.env()
    assert set(env) == ENV_KEYS
    assert env["torch"] == observed_torch_version()
    assert env["cell_id"] == "test-cell"
    assert env["device"] == "cpu"
    assert re.fullmatch(r"[0-9a-f]{16}", env["suite_version"])  # a digest of the suite's code
    assert env["gpus"] == []
    assert env["ended"] is not None
    assert env["ended"] >= env["started"]
    assert env["knobs"] == {"device": "cpu", "cudnn_benchmark": False,
                            "cudnn_deterministic": False, "channels_last": False, "pad_channels": 0}


def test_full_cpu_run_records_every_case_once_passed(default_cpu_run: Run) -> None:
    found = re.search(r"collected (\d+) items", default_cpu_run.output)
    assert found is not None, default_cpu_run.output
    collected = int(found.group(1))
    records = default_cpu_run.records()
    assert len(records) == collected == len(SUITE_IDS)
    assert [record["case"] for record in records] == SUITE_IDS
    audit, *convs = records
    # The library audit: no conv, so no numeric; its table rides in its own field.
    assert (audit["nodeid"], audit["status"], audit["numeric"]) == (AUDIT_NODEID, "passed", None)
    assert set(audit) == RESULT_KEYS | {"audit"}
    for record in convs:
        assert RESULT_KEYS <= set(record) <= RESULT_KEYS | FACT_KEYS
        # Cases about CUDA itself (TF32, dtype support by GPU) skip on CPU, saying so; so do zoo
        # cases whose code path another zoo case runs.
        skipped = skipped_on_cpu_as_said(record)
        assert record["status"] == "passed" or skipped, record
        assert record["nodeid"] == f"suites/test_conv.py::test_conv[{record['case']}]"
        assert record["worker"] == "main"
        assert record["exc_type"] is None
        if not skipped:
            assert set(record["numeric"]) == NUMERIC_KEYS
            assert 0 <= record["numeric"]["ratio"] <= 1
    assert default_cpu_run.markers() == []


def test_catalog_covers_every_op_dtype_and_variant(default_cpu_run: Run) -> None:
    params = [record["params"] for record in default_cpu_run.records() if record["case"] != AUDIT]
    assert len(params) >= 24

    def seen(key: str) -> set[Any]:
        return {p[key] for p in params}

    assert seen("op") == set(CATALOG.SPATIAL_DIMS)
    assert seen("dtype") == {"float32", "float16", "bfloat16"}
    assert seen("autocast") == {None, "float16", "bfloat16"}
    assert seen("memory_format") == {"contiguous", "channels_last", "channels_last_3d"}
    assert seen("layout") == {None, "permuted", "sliced", "transposed", "nhwc_strided"}
    assert seen("backward") == {False, True}
    assert any(p["groups"] == p["c_in"] > 1 for p in params), "no depthwise case"
    assert any(1 < p["groups"] < p["c_in"] for p in params), "no grouped case"
    assert any(p["dilation"] != 1 for p in params)
    assert any(p["stride"] != 1 for p in params)


def test_case_ids_are_unique_and_rejected_when_duplicated() -> None:
    assert len(set(CASE_IDS)) == len(CASE_IDS)
    with pytest.raises(ValueError, match="duplicate case id"):
        CATALOG._check_unique(CATALOG.CASES[:1] * 2)


def test_injected_failure_keeps_the_whole_message(faulted_run: Run) -> None:
    record = faulted_run.by_case()["conv2d-fp32-k3-p1"]
    assert record["status"] == "failed"
    assert record["exc_type"] == "RuntimeError"
    assert record["message"] == NOT_SUPPORTED
    assert record["numeric"] is None


def test_long_messages_are_truncated(faulted_run: Run) -> None:
    message = faulted_run.by_case()["conv1d-fp32-k3-p1"]["message"]
    assert message.startswith("x" * 4000)
    assert "more characters" in message
    assert len(message) < 4100


def test_injected_warning_is_recorded_on_a_passing_case(faulted_run: Run) -> None:
    record = faulted_run.by_case()["conv3d-fp32-k3-p1"]
    assert record["status"] == "passed"
    assert record["message"] is None
    assert [(w["category"], w["message"]) for w in record["warnings"]] == [
        ("UserWarning", PLAN_FAILED)]


def test_wrong_output_is_a_numeric_mismatch(faulted_run: Run) -> None:
    record = faulted_run.by_case()["conv_transpose2d-fp32-k4-s2-p1-bwd"]
    assert record["status"] == "failed"
    assert record["exc_type"] == "AssertionError"
    assert record["message"].startswith("numeric mismatch:")
    assert record["numeric"]["ratio"] > 1
    assert record["numeric"]["max_abs_err"] > record["numeric"]["tol"]


# Wrong results a correct kernel cannot produce: one weight one standard deviation off, and a
# group's weights dropped (the whole weight where groups == 1); float32, float16 and bfloat16,
# grouped, depthwise and transposed.
WRONG_WEIGHTS: dict[str, dict[str, float | bool]] = {
    "perturb": dict.fromkeys((
        ISSUE_8_CASES[0],
        cases_where(op="conv2d", dtype="float32", groups=1, layout=None, backward=False)[0],
        cases_where(op="conv3d", dtype="bfloat16", backward=True)[0]), 1.0),
    "drop_group": dict.fromkeys((
        ISSUE_8_CASES[1],
        ISSUE_8_CASES[2],
        cases_where(op="conv_transpose2d", dtype="bfloat16", groups=2)[0],
        cases_where(depthwise=True, dtype="float16", backward=True)[0]), True),
}


@pytest.fixture(scope="module")
def wrong_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    cases = tuple(case for chosen in WRONG_WEIGHTS.values() for case in chosen)
    run = run_suite(tmp_path_factory.mktemp("wrong") / "results", cases=cases, faults=WRONG_WEIGHTS)
    assert run.returncode == 1, run.output
    return run


def assert_numeric_mismatch(record: dict[str, Any]) -> None:
    assert record["status"] == "failed", record
    assert record["exc_type"] == "AssertionError"
    assert re.match(r"numeric mismatch: (output|grad_input|grad_weight) max_abs_err=",
                    record["message"]), record["message"]
    assert record["numeric"]["ratio"] > 1, record


@pytest.mark.parametrize("action", sorted(WRONG_WEIGHTS))
def test_wrong_weights_are_numeric_mismatches(wrong_run: Run, action: str) -> None:
    records = wrong_run.by_case()
    for case in WRONG_WEIGHTS[action]:
        assert_numeric_mismatch(records[case])


def test_a_dropped_group_fails_every_case(tmp_path: Path) -> None:
    run = run_suite(tmp_path / "results", faults={"drop_group": {"*": True}})
    assert run.returncode == 1, run.output
    # The audit's case has no conv to drop a group from: it passes.
    assert run.by_case()[AUDIT]["status"] == "passed"
    ran = [record for record in run.records() if record["status"] != "skipped" and record["case"] != AUDIT]
    runnable = sum(not case.needs_gpu and case.via != "compile" for case in CATALOG.CASES)
    assert len(ran) >= runnable - 10, "the CPU ran too few cases to tell"
    for record in ran:
        assert_numeric_mismatch(record)


def assert_all_passed(run: Run) -> None:
    """Every case passed within its bound, or skipped as the CPU must (needs CUDA, or a zoo case
    whose code path another runs)."""
    assert run.returncode == 0, run.output
    assert [record["case"] for record in run.records()] == SUITE_IDS
    for record in run.records():
        if record["case"] == AUDIT:  # no conv, no numeric
            assert record["status"] == "passed", record
        elif record["status"] == "skipped":
            assert skipped_on_cpu_as_said(record), record
        else:
            assert record["status"] == "passed", record
            assert record["numeric"]["ratio"] <= 1, record


def test_issue_8_cases_pass_on_atens_own_kernels(tmp_path: Path) -> None:
    for name, faults in (("default", None), ("aten", {"no_mkldnn": {"*": True}})):
        run = run_suite(tmp_path / name, cases=ISSUE_8_CASES, faults=faults)
        assert run.returncode == 0, run.output
        assert sorted(run.by_case()) == sorted(ISSUE_8_CASES)
        for record in run.records():
            assert record["status"] == "passed", record
            assert record["warnings"] == [], record  # no_mkldnn itself warns nothing


@pytest.mark.parametrize("path", sorted(FORCED_PATHS))
def test_whole_cpu_run_passes_on_every_kernel_path(tmp_path: Path, path: str) -> None:
    env, faults = FORCED_PATHS[path]
    assert_all_passed(run_suite(tmp_path / "results", faults=faults, env_extra=env))


def test_no_mkldnn_turns_onednn_off_and_back() -> None:
    spec = importlib.util.spec_from_file_location("convmatrix_faults_under_test",
                                                  PLUGINS / "convmatrix_faults.py")
    assert spec is not None and spec.loader is not None
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    import torch

    before = torch.backends.mkldnn.enabled
    with plugin.without_mkldnn():
        enabled: object = torch.backends.mkldnn.enabled  # a bool; torch types it as its ContextProp
        assert enabled is False
    assert torch.backends.mkldnn.enabled == before


def test_faults_touch_only_matching_cases(faulted_run: Run) -> None:
    record = faulted_run.by_case()["conv2d-fp16-k3-s2-channels_last"]
    assert record["status"] == "passed"
    assert record["warnings"] == []
    assert len(faulted_run.records()) == 5
    assert faulted_run.markers() == []


def test_killed_run_keeps_finished_cases_and_names_the_one_in_flight(tmp_path: Path) -> None:
    cases = ("conv1d-fp32-k3-p1", "conv2d-fp32-k3-p1", "conv2d-fp32-k3-p1-sliced",
             "conv3d-fp32-k3-p1")
    run = run_suite(tmp_path / "results", cases=cases,
                    faults={"kill": {"conv2d-fp32-k3-p1-sliced": True}})
    assert run.returncode == 137, run.output
    assert [(r["case"], r["status"]) for r in run.records()] == [
        ("conv1d-fp32-k3-p1", "passed"), ("conv2d-fp32-k3-p1", "passed")]
    (marker,) = run.markers()
    assert marker.name == "running-main.json"
    in_flight = json.loads(marker.read_text())
    assert in_flight["case"] == "conv2d-fp32-k3-p1-sliced"
    assert in_flight["nodeid"] == "suites/test_conv.py::test_conv[conv2d-fp32-k3-p1-sliced]"
    assert run.env()["ended"] is None


def test_xdist_workers_record_each_case_once(tmp_path: Path) -> None:
    run = run_suite(tmp_path / "results", "-n", "2")
    assert run.returncode == 0, run.output
    cases = [record["case"] for record in run.records()]
    assert sorted(cases) == sorted(SUITE_IDS)
    assert {record["worker"] for record in run.records()} <= {"gw0", "gw1"}
    assert run.env()["ended"] is not None
    assert run.markers() == []


def test_knobs_are_set_and_recorded(tmp_path: Path) -> None:
    run = run_suite(tmp_path / "results", "--cudnn-benchmark", "on", "--cudnn-deterministic", "on",
                    "--channels-last", "on", "--pad-channels", "8", cases=("conv2d-fp32-k3-p1",))
    assert run.returncode == 0, run.output
    knobs = {"device": "cpu", "cudnn_benchmark": True, "cudnn_deterministic": True,
             "channels_last": True, "pad_channels": 8}
    assert run.env()["knobs"] == knobs
    assert [record["knobs"] for record in run.records()] == [knobs]


def test_without_results_dir_the_suite_runs_and_writes_nothing(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    target = f"{REPO / 'suites' / 'test_conv.py'}::test_conv[conv1d-fp32-k3-p1]"
    done = subprocess.run([sys.executable, "-m", "pytest", target], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_foreign_pytest_config_changes_nothing(tmp_path: Path) -> None:
    """An existing results dir inside a project with its own pytest config makes pytest read
    that config (nearest the common ancestor of the paths): markers, warnings and node ids
    must come out as with the suite's own pytest.ini."""
    project = tmp_path / "project"
    shutil.copytree(REPO / "suites", project / "suites",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = ["--strict-markers"]\nfilterwarnings = ["error"]\n')
    results_dir = project / "reports" / "cell"
    results_dir.mkdir(parents=True)
    run = run_suite(results_dir, cases=("conv1d-fp32-k3-permuted-bwd",), cwd=project,
                    faults={"warn": {"conv1d-*": PLAN_FAILED}})
    assert "configfile: pyproject.toml" in run.output
    assert run.returncode == 0, run.output
    (record,) = run.records()
    assert record["status"] == "passed"
    assert record["nodeid"] == "suites/test_conv.py::test_conv[conv1d-fp32-k3-permuted-bwd]"
    assert [w["message"] for w in record["warnings"]] == [PLAN_FAILED]
