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
