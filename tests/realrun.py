"""Real runs of the conv suite with injected failures, for end-to-end report tests: a control
and a clean candidate as direct suite runs, and a faulty candidate through the harness
(`convmatrix run`, host lane: log.txt, cell.json and evidence files as a nightly leaves them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from convmatrix import home
from testkit import REPO

PLUGINS = REPO / "tests" / "plugins"
HOSTILE = "<script>alert(1)</script> <img src=x onerror=alert(1)>"
FAULTS: dict[str, Any] = {"raise": {
    "conv1d-*": f"cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
                f"non-contiguous input. {HOSTILE}",
    "conv3d-*": "CUDA error: an illegal memory access was encountered\n"
                "CUDA kernel errors might be asynchronously reported at some other API call.",
}}
HOST_MATRIX = 'name = "host-only"\n[[include]]\nlane = "host"\n'


def suite(out: Path, cell_id: str, *extra: str) -> subprocess.Popen[bytes]:
    """The suite run directly (no harness) into out/<cell_id>@cpu."""
    args = [sys.executable, "-m", "pytest", str(REPO / "suites"), "-q", "--results-dir",
            str(out / f"{cell_id}@cpu"), "--cell-id", cell_id, "--device", "cpu", *extra]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)


def harness(out: Path, faults: dict[str, Any], *extra: str, matrix_text: str = HOST_MATRIX) -> subprocess.Popen[bytes]:
    """`convmatrix run` of the host cell on this interpreter with the fault plugin, into out/host@cpu@HOST."""
    matrix, spec = out.parent / f"{out.name}.toml", out.parent / f"{out.name}.faults.json"
    matrix.write_text(matrix_text)
    spec.write_text(json.dumps(faults))
    env = dict(os.environ, CONVMATRIX_PYTHON=sys.executable, PYTHONPATH=str(PLUGINS), CONVMATRIX_FAULTS=str(spec))
    args = [sys.executable, "-m", "convmatrix", "run", "-m", str(matrix), "--out", str(out), "--",
            "-p", "convmatrix_faults", *extra]
    # Run from out/.. so that the LATEST pointer `convmatrix run` keeps lands there, not in the checkout.
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=out.parent)


def nightly_like(out: Path, *extra: str) -> Path:
    """A control, a clean candidate and a faulty host cell, run side by side; returns out."""
    runs = [suite(out, "control", *extra), suite(out, "candidate", *extra), harness(out, FAULTS, *extra)]
    for proc in runs:
        proc.wait(timeout=900)
    return out


# Issue 47's audit tests: two baremetal cells of torch 2.5.1 cu124 with the cuDNN override wheels
# 9.2.1.18 (the control, whose libraries the tests plant elsewhere) and 9.4.0.58. The venvs live in
# the convmatrix home, shared with the other lane tests (creating one is locked, so two test modules
# may ask at once).
AUDIT_MATRIX = """
name = "audit-47"
[axes]
lane = ["baremetal"]
torch = ["2.5.1"]
cuda = ["cu124"]
cudnn = ["9.2.1.18", "9.4.0.58"]
python = ["3.11"]
[control]
cudnn = "9.2.1.18"
"""
AUDIT_CONTROL = "baremetal-torch2.5.1-cu124-cudnn9.2.1.18-py3.11"
AUDIT_CANDIDATE = "baremetal-torch2.5.1-cu124-cudnn9.4.0.58-py3.11"


def cudnn_lib(cell: str) -> Path:
    """The cuDNN wheel's lib folder in a baremetal cell's venv."""
    return home.venvs() / cell / "lib" / "python3.11" / "site-packages" / "nvidia" / "cudnn" / "lib"


def made_audit_cells(scratch: Path) -> None:
    """The two cells' venvs, made when missing by what makes them for a user: `convmatrix run
    --audit-only` of their matrix (it installs each cell, then runs the audit's case alone)."""
    if all(cudnn_lib(cell).is_dir() for cell in (AUDIT_CONTROL, AUDIT_CANDIDATE)):
        return
    (scratch / "m.toml").write_text(AUDIT_MATRIX)
    done = subprocess.run([sys.executable, "-m", "convmatrix", "run", "-m", str(scratch / "m.toml"), "--out",
                           str(scratch / "made"), "--audit-only"], cwd=scratch, capture_output=True, text=True,
                          timeout=3600, check=False)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    for cell in (AUDIT_CONTROL, AUDIT_CANDIDATE):
        assert cudnn_lib(cell).is_dir(), f"`convmatrix run` made no {cudnn_lib(cell)}"
