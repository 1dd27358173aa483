"""The GPU pool (issue 12): on a runner with two identical GPUs, two cells run at once, one per
GPU, and every case of each runs exactly once; on one GPU split into two MIG slices (issue 37),
each slice's results are its own, pinned by the slice's UUID. The GPUs are a stub nvidia-smi;
the suite runs with --device cpu, so the work is real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

import suiterun
from testkit import H200_SLICES, OVERRIDE_MATRIX, REPO, SLICE_UUIDS, ran, results_in, stub_nvidia_smi


@pytest.fixture
def two_gpu_path(tmp_path: Path) -> str:
    """PATH with an nvidia-smi that lists two identical GPUs."""
    return f"{stub_nvidia_smi(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_two_stub_gpus_run_two_cells_at_once_and_each_case_once(tmp_path: Path, two_gpu_path: str) -> None:
    matrix = tmp_path / "m.toml"
    matrix.write_text(OVERRIDE_MATRIX)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "convmatrix", "run", "-m", str(matrix), "--out", str(out),
               "--", "--device", "cpu", "-k", "conv1d-fp32"]
    done = subprocess.run(command, cwd=REPO, env={**os.environ, "PATH": two_gpu_path}, capture_output=True,
                          text=True, check=False, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    directories = [p.name for p in results_in(out)]
    assert directories == [ran(out, "baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11", "h100-80gb-hbm3-sm90").name,
                           ran(out, "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11", "h100-80gb-hbm3-sm90").name]
    metas = [json.loads((out / d / "cell.json").read_text()) for d in directories]
    envs = [json.loads((out / d / "env.json").read_text()) for d in directories]
    # One per GPU, at the same time: each suite started before the other one ended.
    assert sorted(m["gpu"]["index"] for m in metas) == [0, 1]
    assert max(when(e["started"]) for e in envs) < min(when(e["ended"]) for e in envs), envs
    for directory in directories:
        cases = [json.loads(line)["case"] for line in (out / directory / "results.jsonl").read_text().splitlines()]
        assert cases and len(cases) == len(set(cases)), cases
    assert "[2/2]" in done.stdout


def test_two_mig_slices_are_two_columns_each_pinned_by_its_uuid_each_with_its_control(tmp_path: Path) -> None:
    """Issue 37, done when: a stub lists one H200 split into two 3g.71gb slices; the host lane with
    --every-gpu writes a result per slice, keyed by it, each suite run seeing only its slice's UUID
    in CUDA_VISIBLE_DEVICES (the fault plugin reports the variable from inside the conv), and the
    report has the two slices as two columns, each cell judged against the control on its slice."""
    matrix = tmp_path / "m.toml"
    matrix.write_text('name = "slices"\n[axes]\nlane = ["host"]\nknobs = ["default", "pad=8"]\n[control]\nknobs = "default"\n')
    spec = tmp_path / "faults.json"
    spec.write_text(json.dumps({"report_env": {"*": "CUDA_VISIBLE_DEVICES"}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PATH=f"{stub_nvidia_smi(tmp_path / 'bin', H200_SLICES)}{os.pathsep}{os.environ['PATH']}",
               CONVMATRIX_PYTHON=sys.executable, CONVMATRIX_FAULTS=str(spec),
               PYTHONPATH=os.pathsep.join(filter(None, [str(suiterun.PLUGINS), env.get("PYTHONPATH")])))
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "convmatrix", "run", "-m", str(matrix), "--lane", "host", "--out",
                           str(out), "--every-gpu", "--", "--device", "cpu", "-k", "conv1d-fp32-k3",
                           "-p", "convmatrix_faults"],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    keys = ("h200-sm90-mig3g-71gb-gpu0-mig0", "h200-sm90-mig3g-71gb-gpu0-mig1")
    assert [p.name for p in results_in(out)] == sorted(ran(out, cell, key).name for cell in ("host", "host+pad8")
                                                       for key in keys)
    for key, uuid in zip(keys, SLICE_UUIDS, strict=True):
        for cell in ("host", "host+pad8"):
            meta = json.loads((ran(out, cell, key) / "cell.json").read_text())
            assert meta["gpu_key"] == key and meta["gpu"]["uuid"] == uuid and meta["gpu"]["mig_profile"] == "3g.71gb"
            assert meta["gpu"]["parent_uuid"] == "GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39"
            lines = [json.loads(x) for x in (ran(out, cell, key) / "results.jsonl").read_text().splitlines()]
            seen = {w["message"] for r in lines for w in r["warnings"] if w["message"].startswith("CUDA_VISIBLE")}
            assert lines and seen == {f"CUDA_VISIBLE_DEVICES={uuid}"}, seen
    report = subprocess.run([sys.executable, "-m", "convmatrix", "report", str(out), "--format", "json"],
                            cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    data = json.loads(report.stdout)
    verdicts = sorted((c["gpu"]["key"], c["cell"], c["verdict"]) for c in data["cells"])
    assert verdicts == [(key, cell, verdict) for key in keys for cell, verdict in (("host", "control"),
                                                                                   ("host+pad8", "ok"))]
    assert {key: health["healthy"] for key, health in data["control"]["per_gpu"].items()} == dict.fromkeys(keys, True)
    text = subprocess.run([sys.executable, "-m", "convmatrix", "report", str(out), "--format", "text",
                           "--color", "never"], cwd=REPO, env=env, capture_output=True, text=True, check=False,
                          timeout=600)
    header = next(line for line in text.stdout.splitlines() if line.startswith("stack"))
    assert all(key in header for key in keys), text.stdout  # two columns, one per slice
