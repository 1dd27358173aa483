"""Evidence files and the CUDA_LAUNCH_BLOCKING re-run, over real suite runs with injected faults."""

from __future__ import annotations

import json
import sys

import pytest

from testkit import REPO, record
from convmatrix import evidence, options, orchestrate, runner
from convmatrix.cells import Cell
from convmatrix.lanes import Prepared
from convmatrix.lanes.host import Host
from convmatrix.results import load

NOT_SUPPORTED = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."


def test_find_keeps_100_lines_before_the_first_occurrence():
    log = [f"line {i}\n" for i in range(1, 501)]
    log[299] = f"E   RuntimeError: {NOT_SUPPORTED}\n"
    log[399] = f"E   RuntimeError: {NOT_SUPPORTED}\n"
    hit = evidence.find(log, [NOT_SUPPORTED])
    assert hit is not None
    assert hit.line == 300
    assert hit.first == 200
    assert hit.lines[:100] == [f"line {i}" for i in range(200, 300)]
    assert len(hit.lines) == 100 + 1 + evidence.AFTER


def test_find_near_the_top_keeps_what_there_is():
    hit = evidence.find(["a\n", f"{NOT_SUPPORTED}\n", "b\n"], [NOT_SUPPORTED])
    assert hit is not None
    assert (hit.line, hit.first, hit.lines) == (2, 1, ["a", NOT_SUPPORTED, "b"])


def test_failures_takes_the_last_line_per_case(tmp_path):
    path = tmp_path / "results.jsonl"
    lines = [record("a", "failed", "boom"), record("a", "passed"), record("b", "crashed", "died")]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + "{truncated\n")
    assert [(f.case, f.status) for f in evidence.failures(path)] == [("b", "crashed")]


def test_crash_evidence_is_the_end_of_the_log(tmp_path):
    (tmp_path / "log.txt").write_text("".join(f"l{i}\n" for i in range(300)) + "test_conv[x] ")
    (tmp_path / "results.jsonl").write_text(json.dumps(record("x", "crashed", "the suite process died")) + "\n")
    saved = evidence.write(tmp_path)
    text = (tmp_path / saved["x"]).read_text()
    assert "x: crashed (crash)" in text.splitlines()[0]
    assert text.rstrip().endswith("test_conv[x]")
    assert len(text.splitlines()) == 1 + evidence.BEFORE + 1


@pytest.fixture
def faulty_run(tmp_path, monkeypatch):
    """A host-lane target whose conv1d cases raise the signature inside the conv call."""
    spec = tmp_path / "faults.json"
    spec.write_text(json.dumps({"raise": {"conv1d-fp32-k3-p1": NOT_SUPPORTED}}))
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests" / "plugins"))
    monkeypatch.setenv("CONVMATRIX_FAULTS", str(spec))
    target = runner.Target(cell=Cell(lane="host"), gpu=None, out=tmp_path / "run")
    runner.write_cell_json(target, python=sys.executable, control=False, extra={})
    args = ["-p", "convmatrix_faults", "-k", "conv1d-fp32-k3-p1 or conv2d-fp32-k3-p1"]
    code = runner.run_local(sys.executable, target, args)
    runner.finish(target, code)
    return target, args


def test_evidence_of_a_real_failing_case_is_saved_and_reported(faulty_run):
    target, _ = faulty_run
    meta = json.loads((target.results_dir / "cell.json").read_text())
    assert meta["evidence"] == {"conv1d-fp32-k3-p1": "evidence/conv1d-fp32-k3-p1.txt"}
    text = (target.results_dir / meta["evidence"]["conv1d-fp32-k3-p1"]).read_text()
    marked = [line for line in text.splitlines() if line[7:8] == ">"]
    assert len(marked) == 1 and NOT_SUPPORTED in marked[0]
    (result,) = load([target.out]).results
    assert result.cases["conv1d-fp32-k3-p1"].evidence == str(target.results_dir / "evidence/conv1d-fp32-k3-p1.txt")
    assert result.cases["conv2d-fp32-k3-p1"].evidence is None


def rerun_blocking(target: runner.Target, args: list[str]) -> list[str]:
    """The blocking re-run of --rerun-blocking on the host lane; what it told the user."""
    said: list[str] = []
    opts = options.parse(["--out", str(target.out), "--", *args])
    orchestrate.rerun_blocking(Host(), Prepared(python=sys.executable, isolate=True), target, opts, said.append)
    return said


def test_blocking_rerun_runs_only_the_failing_cases_with_the_variable_set(faulty_run, monkeypatch):
    target, args = faulty_run
    seen = []
    real_stream = runner.popen.stream

    def spy(command, **kwargs):
        seen.append(kwargs["env"].get("CUDA_LAUNCH_BLOCKING"))
        return real_stream(command, **kwargs)

    monkeypatch.setattr(runner.popen, "stream", spy)
    said = rerun_blocking(target, args)
    assert said == [f"{target.cell.id}: failing cases re-run with CUDA_LAUNCH_BLOCKING=1 in blocking/"]
    assert seen == ["1"]
    lines = (target.results_dir / "blocking" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["case"] for line in lines] == ["conv1d-fp32-k3-p1"]
    (result,) = load([target.out]).results
    assert result.blocking["conv1d-fp32-k3-p1"].family == "cudnn_not_supported"


def test_no_failures_no_blocking_rerun(tmp_path):
    target = runner.Target(cell=Cell(lane="host"), gpu=None, out=tmp_path)
    target.results_dir.mkdir()
    (target.results_dir / "results.jsonl").write_text(json.dumps(record("a")) + "\n")
    assert rerun_blocking(target, []) == []
    assert not (target.results_dir / "blocking").exists()


def test_report_names_the_first_cause_in_the_failing_cells_log(faulty_run):
    from convmatrix import report_model

    target, _ = faulty_run
    report = report_model.build(load([target.out]).results, None)
    (cell,) = report.cells
    evidence_file = (target.results_dir / "evidence" / "conv1d-fp32-k3-p1.txt").read_text()
    line = int(evidence_file.split("log.txt line ")[1].split(",")[0])
    assert cell.first_cause == report_model.FirstCause(
        log=str(target.results_dir / "log.txt"), family="cudnn_not_supported", line=line, rank=None, fatal=True)
