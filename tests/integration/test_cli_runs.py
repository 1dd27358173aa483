"""The convmatrix command end to end, over real suite runs (CPU) with injected faults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import suiterun
from convmatrix.cli.main import main

# Real-world texts (PyTorch issues): the signature and siblings that must never be counted as it.
INJECTED = {
    "conv1d-*": ("cudnn_not_supported",
                 "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."),
    "conv3d-*": ("cuda_illegal_address", "CUDA error: an illegal memory access was encountered\n"
                 "CUDA kernel errors might be asynchronously reported at some other API call."),
    "conv_transpose2d-*": ("cudnn_no_algorithm", "Unable to find a valid cuDNN algorithm to run convolution"),
    "conv_transpose1d-*": ("cudnn_no_engine", "GET was unable to find an engine to execute this computation"),
}
PLAN_FAILED = ("Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: "
               "cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED")


def run_suite(out: Path, cell_id: str, faults: dict[str, Any] | None = None, *extra: str) -> Path:
    """The suite into OUT/<cell_id>@cpu, as a harness run would leave it (bar cell.json)."""
    results_dir = out / f"{cell_id}@cpu"
    suiterun.run_suite(results_dir, "-q", *extra, faults=faults, cell_id=cell_id)
    return results_dir


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    run_suite(out, "control")
    run_suite(out, "candidate", {"raise": {g: m for g, (_, m) in INJECTED.items()},
                                 "warn": {"conv2d-*": PLAN_FAILED}})
    return out


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_injected_failures_get_their_family_and_a_regression(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = report(capsys, str(run), "--control", "control", "--format", "json")
    data = json.loads(out)
    cases = [c for c in data["cases"] if c["cell"] == "candidate"]
    assert cases, "the candidate recorded no cases"
    from fnmatch import fnmatch

    for case in cases:
        expected = next((fam for glob, (fam, _) in INJECTED.items() if fnmatch(case["case"], glob)), None)
        if case["control_outcome"] == "skip":  # a case this CPU cannot run (say, a GPU-only dtype)
            assert (case["outcome"], case["delta"]) == ("skip", "same"), case
        elif expected:
            assert (case["outcome"], case["family"], case["delta"]) == ("fail", expected, "regression"), case
        else:
            assert (case["outcome"], case["family"], case["delta"]) == ("pass", None, "same"), case
    warned = [c for c in cases if c["case"].startswith("conv2d-") and c["outcome"] != "skip"]
    assert warned and all(c["warnings"] == ["cudnn_not_supported"] for c in warned)
    cells = {c["cell"]: c for c in data["cells"]}
    assert cells["control"]["verdict"] == "control"
    assert cells["candidate"]["verdict"] == "regression"
    assert cells["candidate"]["signature"] is True
    assert cells["candidate"]["regressions"] == sum(1 for c in cases if c["delta"] == "regression")
    assert data["control"]["per_gpu"] == {"cpu": {"healthy": True, "reason": None}}
    assert code == 1


def test_report_json_contract_keys(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = report(capsys, str(run), "--control", "control", "--format", "json", "--fail-on", "never")
    data = json.loads(out)
    assert data["schema"] == 1
    assert {"cell", "gpu", "lane", "stack", "observed", "stack_mismatch", "counts", "signature",
            "regressions", "fixed", "verdict"} <= set(data["cells"][0])
    assert {"name", "capability", "generation"} <= set(data["cells"][0]["gpu"])
    assert {"cell", "gpu", "case", "knobs", "outcome", "family", "message", "control_outcome",
            "delta"} <= set(data["cases"][0])


@pytest.mark.parametrize(("fail_on", "code"), [("never", 0), ("signature", 1), ("regression", 1)])
def test_fail_on(run: Path, capsys: pytest.CaptureFixture[str], fail_on: str, code: int) -> None:
    assert report(capsys, str(run), "--control", "control", "--fail-on", fail_on)[0] == code


def test_swapped_control_shows_fixed(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = report(capsys, str(run), "--control", "candidate", "--format", "json")
    cells = {c["cell"]: c for c in json.loads(out)["cells"]}
    assert cells["control"]["verdict"] == "fixed"
    assert code == 0


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "junit"])
def test_human_formats_name_the_regression(run: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    _, out, _ = report(capsys, str(run), "--control", "control", "--format", fmt)
    assert "cudnn_not_supported" in out
    assert "candidate" in out


def test_unhealthy_control_exits_3_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_suite(tmp_path, "control", {"raise": {"conv2d-*": "CUDA error: no CUDA-capable device is detected"}})
    run_suite(tmp_path, "candidate")
    code, out, err = report(capsys, str(tmp_path), "--control", "control")
    assert code == 3
    assert "control unhealthy on cpu: infrastructure failure on the control: cuda_no_device" in err
    assert "INVALID" in out


def test_corrupt_line_exits_2_and_still_reports_the_rest(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    with (copy / "candidate@cpu" / "results.jsonl").open("a") as fh:
        fh.write('{"schema": 1, "case": "trunc')
    code, out, err = report(capsys, str(copy), "--control", "control", "--format", "json")
    lines = (copy / "candidate@cpu" / "results.jsonl").read_text().count("\n")
    assert code == 2
    assert f"candidate@cpu/results.jsonl:{lines + 1}: not a JSON object" in err
    assert {c["cell"] for c in json.loads(out)["cells"]} == {"control", "candidate"}
