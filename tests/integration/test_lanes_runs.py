"""The lanes for real: the baremetal lane through nox with real wheels (the requested cuDNN is
the observed one), a stub two-GPU runner, reruns and kill -9 then --resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from convmatrix.results import rundir
from suiterun import PLUGINS
from testkit import OVERRIDE_MATRIX, REPO, ran, results_in


def test_baremetal_lane_observes_the_requested_cudnn(tmp_path: Path) -> None:
    """Real uv venvs with real torch 2.5.1 wheels: the override changes the cuDNN torch loads."""
    matrix = tmp_path / "m.toml"
    matrix.write_text(OVERRIDE_MATRIX)
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


# --- one result per cell and generation, each case once (issue 8) ------------------------------

def host_lane(out: Path, *args: str, env: dict[str, str] | None = None,
              start_new_session: bool = False) -> subprocess.Popen[str]:
    """`nox -s host` as a user runs it, on the test interpreter (it has torch and xdist)."""
    command = [sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), "-s", "host", "--",
               "--out", str(out), *args]
    full_env = dict(os.environ, CONVMATRIX_PYTHON=sys.executable, **(env or {}))
    return subprocess.Popen(command, cwd=REPO, env=full_env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=start_new_session)


def finished(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    return out


def case_lines(directory: Path) -> list[str]:
    return [json.loads(line)["case"] for line in (directory / "results.jsonl").read_text().splitlines()]


def test_a_two_gpu_runner_writes_one_directory_per_generation_each_case_once(
    tmp_path: Path, two_gpu_runner: Path
) -> None:
    out = tmp_path / "run"
    finished(host_lane(out, "--", "--device", "cpu", "-k", "conv1d-fp32"))
    (directory,) = results_in(out)
    assert directory == ran(out, "host", "h100-80gb-hbm3-sm90")
    cases = case_lines(directory)
    assert cases and len(cases) == len(set(cases))


def test_a_rerun_with_another_selection_replaces_the_cell(tmp_path: Path) -> None:
    out = tmp_path / "run"
    finished(host_lane(out, "--", "-k", "conv1d-fp32"))
    finished(host_lane(out, "--", "-k", "conv2d-fp32-k3-p1"))
    cases = case_lines(ran(out, "host"))
    assert cases and all(c.startswith("conv2d-fp32-k3-p1") for c in cases) and len(cases) == len(set(cases))
    assert (ran(out, "host") / "log.txt").read_text().count("$ ") == 1  # one run's log, not two


def test_kill_9_then_resume_records_every_case_exactly_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    selection = ["-k", "conv2d and not large"]
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"hang": {"conv2d-fp32-k3-p1-bwd": True}}))
    env = {"PYTHONPATH": str(PLUGINS), "CONVMATRIX_FAULTS": str(faults)}
    proc = host_lane(out, "--", *selection, "-p", "convmatrix_faults", env=env, start_new_session=True)
    partial = rundir.staging_dir(ran(out, "host")) / "results.jsonl"
    deadline = time.monotonic() + 600  # a guard against a stuck test, not a measurement
    try:
        while not (partial.exists() and partial.read_text().count("\n") >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, "the lane ended before its third case"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, 9)  # the harness, the suite and its workers, all at once
        proc.communicate()
    assert not (ran(out, "host")).exists()  # nothing half-done passes for a result
    finished(host_lane(out, "--resume", "--", *selection))
    cases = case_lines(ran(out, "host"))
    assert len(cases) == len(set(cases)) > 3
    assert not rundir.staging_dir(ran(out, "host")).exists()
    again = finished(host_lane(out, "--resume", "--", *selection))
    assert "complete, kept (--resume)" in again
    assert case_lines(ran(out, "host")) == cases
