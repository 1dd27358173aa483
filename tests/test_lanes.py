"""The lanes: what they run, and (slow) the real baremetal lane through nox with real wheels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from convmatrix import lanes, options, runner
from convmatrix.cells import Cell
from convmatrix.errors import BadInput
from convmatrix.gpus import Gpu


def test_suite_command_and_env_for_a_gpu_target(tmp_path):
    cell = Cell(lane="baremetal", torch="2.5.1", cuda="cu124", cudnn="bundled", python="3.11")
    target = runner.Target(cell=cell, gpu=Gpu(index=3, name="NVIDIA H200", capability="9.0"), out=tmp_path)
    assert target.results_dir == tmp_path / f"{cell.id}@h200-sm90"
    command = runner.suite_command(target, "py", ["-k", "conv2d"])
    assert command[:4] == ["py", "-m", "pytest", str(REPO / "suites")]
    assert command[command.index("--device") + 1] == "cuda"
    assert command[-2:] == ["-k", "conv2d"]
    env = runner.suite_env(target)
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["CONVMATRIX_LANE"] == "baremetal"


def test_cpu_target_runs_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(lanes.gpus, "discover", list)
    (target,) = lanes.targets(Cell(lane="host"), options.parse(["--out", str(tmp_path)]))
    assert target.key == "cpu"
    command = runner.suite_command(target, "py", [])
    assert command[command.index("--device") + 1] == "cpu"


def test_gpus_option_without_such_gpu_is_bad_input(tmp_path, monkeypatch):
    monkeypatch.setattr(lanes.gpus, "discover", list)
    with pytest.raises(BadInput, match="no such GPU on this runner"):
        lanes.targets(Cell(lane="host"), options.parse(["--out", str(tmp_path), "--gpus", "1"]))


def test_crash_accounting_names_the_case_in_flight(tmp_path):
    directory = tmp_path / "c@cpu"
    directory.mkdir()
    (directory / "running-main.json").write_text(json.dumps({"case": "conv2d-x", "nodeid": "n"}))
    assert runner.record_crashes(directory, -11) == ["conv2d-x"]
    line = json.loads((directory / "results.jsonl").read_text())
    assert line["status"] == "crashed" and "signal 11, SIGSEGV" in line["message"]
    assert not list(directory.glob("running-*"))


def test_host_problem_names_the_interpreter(tmp_path):
    assert "no interpreter" in lanes.host_problem(str(tmp_path / "nope"))
    false = shutil.which("false")
    assert false is not None
    assert "cannot import torch and pytest" in lanes.host_problem(false)


def test_forward_fixes_the_run_dir():
    class S:
        posargs = ["--resume", "--", "-k", "x"]

    assert lanes.forward(S(), Path("o")) == ["--out", "o", "--resume", "--", "-k", "x"]
    S.posargs = ["--out", "mine"]
    assert lanes.forward(S(), Path("o")) == ["--out", "mine"]


BAREMETAL = """
name = "cudnn-override"
[axes]
lane = ["baremetal"]
torch = ["2.5.1"]
cuda = ["cu124"]
cudnn = ["bundled", "9.5.1.17"]
python = ["3.11"]
[control]
cudnn = "bundled"
"""


@pytest.mark.slow
def test_baremetal_lane_observes_the_requested_cudnn(tmp_path):
    """Real uv venvs with real torch 2.5.1 wheels: the override changes the cuDNN torch loads."""
    matrix = tmp_path / "m.toml"
    matrix.write_text(BAREMETAL)
    out = tmp_path / "run"
    env = dict(os.environ, CONVMATRIX_MATRIX=str(matrix))
    nox = [sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py")]
    proc = subprocess.run([*nox, "-s", "baremetal", "--", "--out", str(out), "--", "-k", "conv2d"],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = subprocess.run([sys.executable, "-m", "convmatrix", "report", str(out), "--format", "json"],
                            capture_output=True, text=True, check=False)
    assert report.returncode == 0, report.stderr
    cells = {c["cell"]: c for c in json.loads(report.stdout)["cells"]}
    bundled = cells["baremetal-torch2.5.1-cu124-cudnnbundled-py3.11"]
    override = cells["baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11"]
    assert (bundled["observed"]["cudnn"], override["observed"]["cudnn"]) == (90100, 90501)
    assert bundled["observed"]["torch"] == override["observed"]["torch"] == "2.5.1+cu124"
    assert not bundled["stack_mismatch"] and not override["stack_mismatch"]
    assert (bundled["verdict"], override["verdict"]) == ("control", "ok")
    for cell in cells.values():
        assert (Path(cell["path"]) / "log.txt").stat().st_size > 0
        assert json.loads((Path(cell["path"]) / "cell.json").read_text())["exit_code"] == 0


def test_the_harness_isolates_cases_unless_told_not_to(tmp_path):
    target = runner.Target(cell=Cell(lane="host"), gpu=None, out=tmp_path)
    isolated = runner.suite_command(target, "py", ["--case-timeout", "30"])
    timeouts = [isolated[i + 1] for i, arg in enumerate(isolated) if arg == "--case-timeout"]
    assert timeouts == [str(runner.CASE_TIMEOUT), "30"]  # the user's own value comes last and wins
    assert "--case-timeout" not in runner.suite_command(target, "py", [], isolate=False)
