"""Issue 49: triage proposes a proof on the log's own stack (the torch, CUDA and cuDNN it read), or
says that it read none and proposes the shipped example's."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from convmatrix.cli import triage as triage_cmd
from convmatrix.results import known
from convmatrix.triage import remedies

ERROR = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.\n"
HEAD = ("PyTorch version: 2.3.0+cu121\nCUDA used to build PyTorch: 12.1\n"
        "torch.backends.cudnn.version(): 8907\nstep 1\n")


def triage(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    top = argparse.ArgumentParser()
    triage_cmd.add_parser(top.add_subparsers(dest="command"))
    assert triage_cmd.run(top.parse_args(["triage", str(path), *extra])) == 0
    return capsys.readouterr().out


def test_the_proof_runs_on_the_stack_the_log_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log"
    log.write_text(HEAD + ERROR)
    out = triage(log, capsys)
    assert "the log's stack: torch 2.3.0+cu121, CUDA 12.1, cuDNN 8907" in out
    assert "fix-proof.toml" not in out
    verify = out[out.index("verify the fix:"):]
    write = next(line.strip()[2:] for line in verify.splitlines() if "> triage-proof.toml" in line)
    subprocess.run(["bash", "-c", write], cwd=tmp_path, check=True)  # the command as printed, run
    text = (tmp_path / "triage-proof.toml").read_text()
    assert 'torch = ["2.3.0"]' in text and 'cuda = ["cu121"]' in text and 'knobs = ["default", "pad=8"]' in text
    assert "convmatrix run -m triage-proof.toml --strict --out reports/runs/triage-proof" in verify


def test_the_generated_matrix_is_one_the_matrix_command_takes(tmp_path: Path) -> None:
    note, commands = remedies.proof_on_stack("cudnn_no_engine", known.Stack(torch="2.3.0+cu121", cuda="12.1",
                                                                            cudnn=8907))
    assert "torch 2.3.0+cu121" in note
    subprocess.run(["bash", "-c", next(c for c in commands if "triage-proof.toml" in c)], cwd=tmp_path, check=True)
    done = subprocess.run([sys.executable, "-m", "convmatrix", "matrix", "-m", "triage-proof.toml"], cwd=tmp_path,
                          capture_output=True, text=True, check=False,
                          env={**__import__("os").environ, "PYTHONPATH": str(Path(remedies.__file__).parents[2])})
    assert done.returncode == 0, done.stderr
    assert "baremetal-torch2.3.0-cu121-cudnnbundled" in done.stdout


def test_a_log_without_versions_says_it_read_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log"
    log.write_text("step 1\n" + ERROR)
    out = triage(log, capsys)
    assert "the log printed no torch version" in out
    assert "fix-proof.toml" in out  # the shipped example's stack, said to be another one


def test_the_examples_own_stack_gets_the_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log"
    log.write_text("PyTorch version: 2.5.1+cu124\n" + ERROR)
    out = triage(log, capsys)
    assert "fix-proof.toml" in out and "triage-proof.toml" not in out


def test_json_carries_the_stack_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log"
    log.write_text(HEAD + ERROR)
    data = json.loads(triage(log, capsys, "--format", "json"))
    assert data["stack"] == {"torch": "2.3.0+cu121", "cuda": "12.1", "cudnn": 8907, "capability": None}
    assert any("triage-proof.toml" in c for c in data["verify"])


@pytest.mark.parametrize("torch", ["2.3.0+cu121'; rm -rf ~ #", "$(reboot)", "2.3.0\n[control]"])
def test_a_hostile_version_is_never_written_into_a_command(torch: str) -> None:
    _note, commands = remedies.proof_on_stack("cudnn_no_engine", known.Stack(torch=torch, cuda="12.1"))
    assert not any("triage-proof.toml" in c for c in commands)
    assert all(shlex.split(c) for c in commands)
