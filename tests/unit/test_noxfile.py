"""The noxfile: a broken matrix fails only the sessions that need it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit import REPO


def nox(matrix: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), *args], cwd=REPO,
                          env=dict(os.environ, CONVMATRIX_MATRIX=matrix), capture_output=True, text=True,
                          check=False, timeout=300)


@pytest.fixture
def broken(tmp_path: Path) -> str:
    path = tmp_path / "broken.toml"
    path.write_text('name = "x"\n[axes]\nlanes = ["baremetal"]\n')
    return str(path)


def test_a_broken_matrix_still_lists_the_sessions(broken: str) -> None:
    listed = nox(broken, "-l")
    assert listed.returncode == 0, listed.stderr
    assert "- tests ->" in listed.stdout and "- lint ->" in listed.stdout
    assert f"convmatrix: {broken}: [axes]: unknown key 'lanes'" in listed.stderr


def test_a_session_that_needs_the_broken_matrix_ends_with_its_line(broken: str) -> None:
    done = nox(broken, "-s", "host")
    assert done.returncode != 0
    assert f"Session host aborted: convmatrix: {broken}: [axes]: unknown key 'lanes'" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_the_default_matrix_gives_a_session_per_cell() -> None:
    listed = nox(str(REPO / "matrix" / "default.toml"), "-l")
    assert "- baremetal-torch2.5.1-cu124-cudnnbundled-py3.11 ->" in listed.stdout
    assert "- audit ->" in listed.stdout  # the CPU gate for images: convmatrix run --audit-only


def test_the_nightly_refuses_cuda_stacks_on_a_runner_without_a_gpu_naming_the_way_out(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CONVMATRIX_ALLOW_CPU"}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    nightly = str(REPO / "matrix" / "nightly.toml")
    done = subprocess.run([sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), "-s", "nightly",
                           "--", "--out", str(tmp_path / "run")], cwd=REPO,
                          env=dict(env, CONVMATRIX_MATRIX=nightly), capture_output=True, text=True,
                          check=False, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in said
    assert (f"Session nightly aborted: convmatrix: {nightly}: " in said
            and "with CUDA stacks" in said and "pass --allow-cpu to run them on the CPU anyway" in said), said
    assert not (tmp_path / "run").exists()  # refused before anything ran
