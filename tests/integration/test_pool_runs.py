"""The GPU pool (issue 12): on a runner with two identical GPUs, two cells run at once, one per
GPU, and every case of each runs exactly once. The GPUs are a stub nvidia-smi; the suite runs
with --device cpu, so the work is real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from testkit import OVERRIDE_MATRIX, REPO, ran, results_in, stub_nvidia_smi


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
