"""`convmatrix bisect` for real: real baremetal cells of torch 2.5.1 cu124 with real cuDNN override
wheels (9.3.0.75 .. 9.5.1.17, ~0.6 GB each from PyPI; the uv cache and the venvs are shared with
the other lane tests), and a regression from cuDNN 9.5.0 on (tests/plugins/convmatrix_cudnn_from.py)
that the search has to find."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest

from convmatrix.cli import bisect as bisect_cmd
from convmatrix.cli.main import parser
from convmatrix.prove import bisect
from suiterun import PLUGINS

MATRIX = """
name = "cudnn-bisect"
[axes]
lane = ["baremetal"]
torch = ["2.5.1"]
cuda = ["cu124"]
cudnn = ["9.3.0.75", "9.5.1.17"]
python = ["3.11"]
[control]
cudnn = "9.3.0.75"
"""
GOOD = "baremetal-torch2.5.1-cu124-cudnn9.3.0.75-py3.11"
BAD = "baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11"
# A few cases a step, none of the large ones.
SELECT = ["-k", "conv2d-fp32-k3-p1 and not over2g and not large"]


def test_bisect_finds_the_first_cudnn_override_that_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX)
    out, answer = tmp_path / "bisect", tmp_path / "answer.json"
    # The suite inherits this environment (runner.suite_env): the plugin and its threshold.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("CONVMATRIX_FAIL_FROM_CUDNN", "90500")
    # Stored results are keyed by stack and suite options, not by this variable: a store of our own.
    monkeypatch.setenv("CONVMATRIX_RESULTS_STORE", str(tmp_path / "store"))
    top = parser()
    args = top.parse_args(["bisect", "-m", str(matrix), "--good", GOOD, "--bad", BAD, "--out", str(out),
                           "--format", "json", "-o", str(answer), "--", *SELECT, "-p", "convmatrix_cudnn_from"])
    started = time.monotonic()
    assert bisect_cmd.run(args) == 0, capsys.readouterr().err[-3000:]
    wall = time.monotonic() - started
    data = json.loads(answer.read_text())
    assert data["versions"] == ["9.3.0.75", "9.4.0.58", "9.5.0.50", "9.5.1.17"]
    assert (data["first_bad"], data["last_good"], data["exit_code"]) == ("9.5.0.50", "9.4.0.58", 0)
    assert data["family"] == ["cudnn_not_supported"]
    n = len(data["versions"]) - 1
    assert data["cell_runs"] == len(data["steps"]) <= math.ceil(math.log2(n)) + 3 == bisect.steps_bound(n)
    outcomes = [(s["value"], s["role"], s["outcome"]) for s in data["steps"]]
    assert outcomes[:3] == [("9.3.0.75", "good end", "pass"), ("9.5.1.17", "bad end", "fail"),
                            ("9.3.0.75", "good end again", "pass")]
    for step in data["steps"]:  # each an ordinary result directory, with the cuDNN it asked for
        (cell_dir,) = [p for p in Path(step["path"]).iterdir() if p.name.startswith("baremetal-")]
        observed = json.loads((cell_dir / "cell.json").read_text())["observed"]["cudnn"]
        major, minor, patch = (int(p) for p in step["value"].split(".")[:3])
        assert observed == major * 10000 + minor * 100 + patch
    lines = capsys.readouterr().err
    assert "cuDNN 9.5.0.50: FAIL (" in lines
    print(f"bisect: {data['cell_runs']} cell runs in {wall:.0f} s")


def test_bisect_runs_on_a_cpu_runner_with_the_default_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 46: on a runner without a GPU every step matrix bisect wrote was refused ("pass
    --allow-cpu"), though matrix/default.toml says allow_cpu = true. Without $CONVMATRIX_ALLOW_CPU
    (the test session sets it) and without --allow-cpu, the default matrix's own word carries
    into the steps: between its control (the bundled cuDNN) and its 9.5.1.17 override."""
    from convmatrix.run import options
    from testkit import REPO

    monkeypatch.delenv(options.ALLOW_CPU, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("CONVMATRIX_FAIL_FROM_CUDNN", "90500")
    monkeypatch.setenv("CONVMATRIX_RESULTS_STORE", str(tmp_path / "store"))
    answer = tmp_path / "answer.json"
    top = parser()
    args = top.parse_args(["bisect", "-m", str(REPO / "matrix" / "default.toml"),
                           "--good", "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11", "--bad", BAD,
                           "--out", str(tmp_path / "bisect"), "--format", "json", "-o", str(answer),
                           "--", *SELECT, "-p", "convmatrix_cudnn_from"])
    assert bisect_cmd.run(args) == 0, capsys.readouterr().err[-3000:]
    data = json.loads(answer.read_text())
    assert (data["first_bad"], data["exit_code"]) == ("9.5.0.50", 0)
