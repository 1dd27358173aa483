"""The lanes: the suite's command and environment per target, crash accounting, isolation, and
identical GPUs as one target (a stub nvidia-smi)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from convmatrix import gpus
from convmatrix.errors import BadInput
from convmatrix.gpus import Gpu
from convmatrix.matrix.cells import Cell
from convmatrix.results import rundir
from convmatrix.run import options, orchestrate, runner
from convmatrix.run.lanes import host
from testkit import H200_SLICES, REPO, SLICE_UUIDS, TWO_H100, stub_nvidia_smi


def test_suite_command_and_env_for_a_gpu_target(tmp_path: Path) -> None:
    cell = Cell(lane="baremetal", torch="2.5.1", cuda="cu124", cudnn="bundled", python="3.11")
    target = runner.Target(cell=cell, gpu=Gpu(index=3, name="NVIDIA H200", capability="9.0"), out=tmp_path)
    assert target.results_dir == tmp_path / f"{cell.id}@h200-sm90"
    command = runner.suite_command(target, "py", ["-k", "conv2d"])
    assert command[:4] == ["py", "-m", "pytest", str(REPO / "suites")]
    assert command[command.index("--device") + 1] == "cuda"
    assert command[-2:] == ["-k", "conv2d"]
    env = runner.suite_env(target)
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    # Seen (a review): without it CUDA numbers GPUs fastest first, nvidia-smi (whose index this is)
    # in PCI bus order; on a host with mixed GPU models a cell ran on the other GPU, under this one's key.
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["CONVMATRIX_LANE"] == "baremetal"


def test_a_target_on_a_mig_slice_is_pinned_by_the_slices_uuid_and_records_it(tmp_path: Path) -> None:
    """Issue 37: a slice has no index of its own; its UUID names it to CUDA, and cell.json says
    which slice of which GPU the result is from."""
    first, second = gpus.parse_smi(*H200_SLICES)
    cell = Cell(lane="host")
    target = runner.Target(cell=cell, gpu=second, out=tmp_path)
    assert target.results_dir == tmp_path / "host@h200-sm90-mig3g-71gb"
    assert runner.Target(cell=cell, gpu=second, out=tmp_path, per_device=True).key == "h200-sm90-mig3g-71gb-gpu0-mig1"
    assert runner.suite_env(target)["CUDA_VISIBLE_DEVICES"] == SLICE_UUIDS[1]
    assert runner.suite_env(runner.Target(cell=cell, gpu=first, out=tmp_path))["CUDA_VISIBLE_DEVICES"] == SLICE_UUIDS[0]
    meta = runner.write_cell_json(target, python="py", control=False, extra={})
    assert json.loads((target.results_dir / rundir.CELL_JSON).read_text())["gpu"] == meta["gpu"] == {
        "index": 0, "name": "NVIDIA H200", "capability": "9.0", "uuid": SLICE_UUIDS[1], "mig_profile": "3g.71gb",
        "mig_device": 1, "parent_uuid": "GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39"}


def test_a_whole_gpu_with_a_uuid_is_pinned_by_it(tmp_path: Path) -> None:
    (gpu, _) = gpus.parse_smi(*TWO_H100)
    env = runner.suite_env(runner.Target(cell=Cell(lane="host"), gpu=gpu, out=tmp_path))
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-5b2dd5e9-7a3c-4f1e-9d4a-0c8e2f6a1b01"


def test_cpu_target_runs_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "discover", list)
    (target,) = orchestrate.targets(Cell(lane="host"), options.parse(["--out", str(tmp_path)]))
    assert target.key == "cpu"
    command = runner.suite_command(target, "py", [])
    assert command[command.index("--device") + 1] == "cpu"


def test_gpus_option_without_such_gpu_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "discover", list)
    with pytest.raises(BadInput, match="no such GPU on this runner"):
        orchestrate.targets(Cell(lane="host"), options.parse(["--out", str(tmp_path), "--gpus", "1"]))


def test_crash_accounting_names_the_case_in_flight(tmp_path: Path) -> None:
    target = runner.Target(cell=Cell(lane="host"), gpu=None, out=tmp_path)
    directory = target.results_dir
    directory.mkdir()
    (directory / "running-main.json").write_text(json.dumps({"case": "conv2d-x", "nodeid": "n"}))
    assert runner.record_crashes(target, -11) == ["conv2d-x"]
    line = json.loads((directory / "results.jsonl").read_text())
    assert line["status"] == "crashed" and "signal 11, SIGSEGV" in line["message"]
    assert not list(directory.glob("running-*"))


def test_host_problem_names_the_interpreter(tmp_path: Path) -> None:
    missing = host.host_problem(str(tmp_path / "nope"))
    assert missing is not None and "no interpreter" in missing
    false = shutil.which("false")
    assert false is not None
    broken = host.host_problem(false)
    assert broken is not None and "cannot import torch and pytest" in broken


def test_the_harness_isolates_cases_in_the_suites_own_process(tmp_path: Path) -> None:
    target = runner.Target(cell=Cell(lane="host"), gpu=None, out=tmp_path)
    isolated = runner.suite_command(target, "py", ["--case-timeout", "30"])
    timeouts = [isolated[i + 1] for i, arg in enumerate(isolated) if arg == "--case-timeout"]
    assert timeouts == [str(runner.CASE_TIMEOUT), "30"]  # the user's own value comes last and wins
    assert isolated[isolated.index("--in-process") - 2:][:4] == ["--case-timeout", str(runner.CASE_TIMEOUT),
                                                                 "--in-process", "--case-timeout"]


# --- one result per cell and generation, each case once (issue 8) ------------------------------

def test_identical_gpus_are_one_generation_one_target(tmp_path: Path, two_gpu_runner: Path) -> None:
    (target,) = orchestrate.targets(Cell(lane="host"), options.parse(["--out", str(tmp_path)]))
    assert target.gpu is not None
    assert (target.key, target.gpu.index) == ("h100-80gb-hbm3-sm90", 0)
    every = orchestrate.targets(Cell(lane="host"), options.parse(["--out", str(tmp_path), "--every-gpu"]))
    assert [t.key for t in every] == ["h100-80gb-hbm3-sm90-gpu0", "h100-80gb-hbm3-sm90-gpu1"]
    assert len({t.results_dir for t in every}) == 2


def test_identical_slices_are_one_target_and_every_gpu_makes_one_per_slice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.setenv("PATH", f"{stub_nvidia_smi(tmp_path / 'bin', H200_SLICES)}{os.pathsep}{os.environ['PATH']}")
    (target,) = orchestrate.targets(Cell(lane="host"), options.parse(["--out", str(tmp_path)]))
    assert target.key == "h200-sm90-mig3g-71gb"
    every = orchestrate.targets(Cell(lane="host"), options.parse(["--out", str(tmp_path), "--every-gpu"]))
    assert [t.key for t in every] == ["h200-sm90-mig3g-71gb-gpu0-mig0", "h200-sm90-mig3g-71gb-gpu0-mig1"]
    assert [runner.suite_env(t)["CUDA_VISIBLE_DEVICES"] for t in every] == list(SLICE_UUIDS)
    (one,) = orchestrate.targets(Cell(lane="host"), options.parse(["--out", str(tmp_path), "--gpus", "0:1"]))
    assert one.gpu is not None and one.gpu.pin == SLICE_UUIDS[1]
    with pytest.raises(BadInput, match=r"--gpus 0:2: no such GPU on this runner \(nvidia-smi lists: 0:0, 0:1\)"):
        orchestrate.targets(Cell(lane="host"), options.parse(["--out", str(tmp_path), "--gpus", "0:2"]))


def test_a_dead_process_whose_case_outran_its_timeout_is_a_timeout(tmp_path: Path) -> None:
    """faulthandler ends a case that holds the GIL past its timeout: its marker is all that is left."""
    target = runner.Target(cell=Cell(lane="host"), gpu=None, out=tmp_path)
    target.results_dir.mkdir()
    marker = {"case": "hung", "nodeid": "n", "started": "2020-01-01T00:00:00.000+00:00", "timeout": 5}
    (target.results_dir / "running-main.json").write_text(json.dumps(marker))
    runner.record_crashes(target, 1)
    marker.update(case="fresh", started=rundir.records.now(), timeout=900)
    (target.results_dir / "running-main.json").write_text(json.dumps(marker))
    runner.record_crashes(target, -6)
    hung, fresh = [json.loads(line) for line in (target.results_dir / "results.jsonl").read_text().splitlines()]
    assert hung["status"] == "timeout" and hung["message"].startswith("the case ran past its 5 s timeout")
    assert fresh["status"] == "crashed" and "SIGABRT" in fresh["message"]
