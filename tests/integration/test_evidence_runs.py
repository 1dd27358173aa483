"""Evidence files and the CUDA_LAUNCH_BLOCKING re-run, over real suite runs with injected faults."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from convmatrix import popen
from convmatrix.matrix.cells import Cell
from convmatrix.report import model as report_model
from convmatrix.results import load
from convmatrix.results.read import FirstCause
from convmatrix.run import options, orchestrate, runner
from convmatrix.run.lanes import Prepared
from convmatrix.run.lanes.host import Host
from suiterun import PLUGINS

NOT_SUPPORTED = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."


@pytest.fixture
def faulty_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[runner.Target, list[str]]:
    """A host-lane target whose conv1d cases raise the signature inside the conv call."""
    spec = tmp_path / "faults.json"
    spec.write_text(json.dumps({"raise": {"conv1d-fp32-k3-p1": NOT_SUPPORTED}}))
    monkeypatch.setenv("PYTHONPATH", str(PLUGINS))
    monkeypatch.setenv("CONVMATRIX_FAULTS", str(spec))
    target = runner.Target(cell=Cell(lane="host"), gpu=None, out=tmp_path / "run")
    meta = runner.write_cell_json(target, python=sys.executable, control=False, extra={})
    args = ["-p", "convmatrix_faults", "-k", "conv1d-fp32-k3-p1 or conv2d-fp32-k3-p1"]
    code = runner.run_local(sys.executable, target, args)
    runner.finish(target, code, meta)
    return target, args


def test_evidence_of_a_real_failing_case_is_saved_and_reported(faulty_run: tuple[runner.Target, list[str]]) -> None:
    target, _ = faulty_run
    meta = json.loads((target.results_dir / "cell.json").read_text())
    assert meta["evidence"] == {"conv1d-fp32-k3-p1": "evidence/conv1d-fp32-k3-p1.txt"}
    text = (target.results_dir / meta["evidence"]["conv1d-fp32-k3-p1"]).read_text()
    marked = [line for line in text.splitlines() if line[7:8] == ">"]
    assert len(marked) == 1 and NOT_SUPPORTED in marked[0]
    (result,) = load([target.out]).results
    assert result.cases["conv1d-fp32-k3-p1"].evidence == str(target.results_dir / "evidence/conv1d-fp32-k3-p1.txt")
    assert result.cases["conv2d-fp32-k3-p1"].evidence is None


def test_four_identical_real_failures_get_four_windows_each_its_own(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20, item 1, on a real suite run: four conv1d cases raising one message."""
    cases = ["conv1d-fp32-k3-p1", "conv1d-fp16-k5-s2-dilated2", "conv1d-bf16-k7-p3-depthwise",
             "conv1d-fp32-k3-permuted-bwd"]
    spec = tmp_path / "faults.json"
    spec.write_text(json.dumps({"raise": dict.fromkeys(cases, NOT_SUPPORTED)}))
    monkeypatch.setenv("PYTHONPATH", str(PLUGINS))
    monkeypatch.setenv("CONVMATRIX_FAULTS", str(spec))
    target = runner.Target(cell=Cell(lane="host"), gpu=None, out=tmp_path / "run")
    meta = runner.write_cell_json(target, python=sys.executable, control=False, extra={})
    code = runner.run_local(sys.executable, target, ["-p", "convmatrix_faults", "-k", " or ".join(cases)])
    runner.finish(target, code, meta)
    saved = json.loads((target.results_dir / "cell.json").read_text())["evidence"]
    assert sorted(saved) == sorted(cases)
    log = (target.results_dir / "log.txt").read_text().splitlines()
    lines = set()
    for case in cases:
        text = (target.results_dir / saved[case]).read_text().splitlines()
        (marked,) = [t for t in text[1:] if t[7:8] == ">"]
        lines.add(int(marked[:7]))
        assert NOT_SUPPORTED in marked and f"test_conv[{case}]" in "\n".join(text)
        header = next(i for i, t in enumerate(log, 1) if t.startswith("___") and f" test_conv[{case}] " in t)
        assert header < int(marked[:7])
    assert len(lines) == 4


def rerun_blocking(target: runner.Target, args: list[str]) -> list[str]:
    """The blocking re-run of --rerun-blocking on the host lane; what it told the user."""
    said: list[str] = []
    opts = options.parse(["--out", str(target.out), "--", *args])
    orchestrate.rerun_blocking(Host(), Prepared(python=sys.executable), target, opts, said.append)
    return said


def test_blocking_rerun_runs_only_the_failing_cases_with_the_variable_set(faulty_run: tuple[runner.Target, list[str]],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    target, args = faulty_run
    seen: list[str | None] = []
    real_stream = popen.stream  # what runner calls

    def spy(command: Sequence[str], **kwargs: Any) -> int:
        seen.append(kwargs["env"].get("CUDA_LAUNCH_BLOCKING"))
        return real_stream(command, **kwargs)

    monkeypatch.setattr(popen, "stream", spy)
    said = rerun_blocking(target, args)
    assert said == [f"{target.cell.id}: failing cases re-run with CUDA_LAUNCH_BLOCKING=1 in blocking/"]
    assert seen == ["1"]
    lines = (target.results_dir / "blocking" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["case"] for line in lines] == ["conv1d-fp32-k3-p1"]
    (result,) = load([target.out]).results
    assert result.blocking["conv1d-fp32-k3-p1"].family == "cudnn_not_supported"


def test_report_names_the_first_cause_in_the_failing_cells_log(faulty_run: tuple[runner.Target, list[str]]) -> None:
    """The harness stored the cause when the cell finished (first_cause.json); the report reads it."""
    target, _ = faulty_run
    assert json.loads((target.results_dir / "first_cause.json").read_text())["family"] == "cudnn_not_supported"
    report = report_model.build(load([target.out]).results, None)
    (cell,) = report.cells
    evidence_file = (target.results_dir / "evidence" / "conv1d-fp32-k3-p1.txt").read_text()
    line = int(evidence_file.split("log.txt line ")[1].split(",")[0])
    assert cell.first_cause == FirstCause(
        log=str(target.results_dir / "log.txt"), family="cudnn_not_supported", line=line, rank=None, fatal=True)
