"""Issue 34 item 2, through the harness: for each fault family the plugin injects (the signature
raised, an out-of-memory error, a wrong result), the report's "first line the control's log lacks"
is a line the failure wrote, never pytest's dump of the test's arguments (`case = Case(...)`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import realrun
from testkit import REPO

pytestmark = pytest.mark.slow
CASES = {"conv1d-fp32-k3-p1": "raise", "conv1d-fp16-k5-s2-dilated2": "raise",
         "conv1d-fp32-k3-permuted-bwd": "perturb"}
SELECTION = ("-k", " or ".join(CASES))
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"
SIG = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."


def test_the_first_differing_line_of_each_fault_family_is_the_failures_own(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # Not the sticky fault: a sticky error ends the worker before pytest prints any failure block.
    faults = {"raise": {"conv1d-fp32-k3-p1": SIG, "conv1d-fp16-k5-s2-dilated2": OOM},
              "perturb": {"conv1d-fp32-k3-permuted-bwd": 4.0}}
    candidate = realrun.harness(out, faults, *SELECTION)
    # The control as the suite itself, verbose, its output kept as the harness keeps a cell's log.
    control = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "suites"), "-v", "--results-dir",
                              str(out / "control@cpu"), "--cell-id", "control", "--device", "cpu", *SELECTION],
                             capture_output=True, check=False, cwd=REPO, timeout=600)
    assert control.returncode == 0, control.stdout[-2000:]
    (out / "control@cpu" / "log.txt").write_bytes(control.stdout)
    assert candidate.wait(timeout=600) in (0, 1)  # the run itself has no control: it judges nothing
    done = subprocess.run([sys.executable, "-m", "convmatrix", "report", str(out), "--control", "control",
                           "--format", "json"], capture_output=True, text=True, check=False)
    rows = {c["case"]: c for c in json.loads(done.stdout)["cases"] if c["cell"] == "host"}
    seen = {}
    for case in CASES:
        differs = rows[case]["first_diff"]
        assert differs is not None, case
        text = differs["text"]
        assert not re.match(r"[A-Za-z_]\w* *= ", text), (case, text)  # pytest's "name = repr" of an argument
        seen[case] = text
    assert "CUDNN_STATUS_NOT_SUPPORTED" in seen["conv1d-fp32-k3-p1"], seen
    assert "CUDA out of memory" in seen["conv1d-fp16-k5-s2-dilated2"], seen
    assert seen["conv1d-fp32-k3-permuted-bwd"].startswith("E "), seen
