"""Issue 47's "Done when", for real on a CPU: baremetal cells of torch 2.5.1 cu124 with the cuDNN
override wheels the bisect tests install (9.2.1.18, the control, and 9.4.0.58; the venvs and the uv
cache are shared with the other lane tests), run by `convmatrix run` with a planted LD_LIBRARY_PATH
that the cells inherit (docs/contracts.md: What a baremetal cell inherits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from convmatrix import home

pytestmark = pytest.mark.slow
MATRIX = """
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
CONTROL = "baremetal-torch2.5.1-cu124-cudnn9.2.1.18-py3.11"
CANDIDATE = "baremetal-torch2.5.1-cu124-cudnn9.4.0.58-py3.11"
SELECT = ("-k", "audit or conv1d-fp32-k3-p1")


def cudnn_lib(cell: str) -> Path:
    return home.venvs() / cell / "lib" / "python3.11" / "site-packages" / "nvidia" / "cudnn" / "lib"


def run(tmp_path: Path, ld_library_path: str | None) -> dict[str, Any]:
    (tmp_path / "m.toml").write_text(MATRIX)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if ld_library_path is not None:
        env["LD_LIBRARY_PATH"] = ld_library_path
    env["CONVMATRIX_RESULTS_STORE"] = str(tmp_path / "store")  # stored results do not know the variable
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "convmatrix", "run", "-m", str(tmp_path / "m.toml"), "--out", str(out),
                           "--allow-cpu", "--", *SELECT], env=env, capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report = subprocess.run([sys.executable, "-m", "convmatrix", "report", str(out), "--format", "json"],
                            capture_output=True, text=True, check=False)
    data = json.loads(report.stdout)
    cells = {c["cell"]: c for c in data["cells"]}
    cases = {(c["cell"], c["case"]): c for c in data["cases"]}
    return {"code": report.returncode, "cells": cells, "cases": cases, "out": out}


@pytest.fixture(scope="module", autouse=True)
def venvs() -> None:
    if not all(cudnn_lib(cell).is_dir() for cell in (CONTROL, CANDIDATE)):
        pytest.skip("the torch 2.5.1 cu124 venvs with cuDNN 9.2.1.18 and 9.4.0.58 are not made yet "
                    "(tests/integration/test_bisect_runs.py makes them)")


def test_a_the_controls_cudnn_on_the_path_swaps_the_candidates_whole_cudnn(tmp_path: Path) -> None:
    """(a) The candidate is red naming both versions and the path; the control stays clean."""
    said = run(tmp_path, str(cudnn_lib(CONTROL)))
    control, candidate = said["cells"][CONTROL], said["cells"][CANDIDATE]
    assert control["verdict"] == "control" and control["libraries_line"] is None
    assert candidate["fails"] and said["code"] == 1
    audit = said["cases"][(CANDIDATE, "audit-cuda-libraries")]
    assert audit["family"] == "cuda_library_swapped" and audit["verdict"] == "regression"
    assert "9.2.1" in audit["message"] and "9.4.0.58" in audit["message"] and str(cudnn_lib(CONTROL)) in audit["message"]
    assert candidate["libraries_line"].startswith("cuDNN 9.4.0 (wheel) · ")
    assert "9.2.1 from LD_LIBRARY_PATH" in candidate["libraries_line"]


def test_b_only_the_controls_cnn_on_the_path_is_red_with_cudnns_own_line(tmp_path: Path) -> None:
    """(b) cuDNN's own line in the evidence, and the conv cases still ran."""
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "libcudnn_cnn.so.9").symlink_to(cudnn_lib(CONTROL) / "libcudnn_cnn.so.9")
    said = run(tmp_path, str(planted))
    audit = said["cases"][(CANDIDATE, "audit-cuda-libraries")]
    assert audit["family"] == "cudnn_library_missing" and said["cells"][CANDIDATE]["fails"]
    assert "Unable to load any of {libcudnn_cnn.so.9.4.0" in audit["message"]
    (result,) = said["out"].glob(f"{CANDIDATE}@cpu*")
    assert "Unable to load any of {libcudnn_cnn.so.9.4.0" in (result / "evidence" / "audit-cuda-libraries.txt").read_text()
    assert said["cells"][CANDIDATE]["libraries_line"] == "cuDNN 9.4.0 (wheel) · libcudnn_cnn 9.2.1 from LD_LIBRARY_PATH"
    conv = said["cases"][(CANDIDATE, "conv1d-fp32-k3-p1")]
    assert conv["outcome"] == "pass"


def test_d_without_planted_libraries_every_cell_is_clean_and_names_its_wheels_files(tmp_path: Path) -> None:
    said = run(tmp_path, None)
    assert said["code"] == 0
    for cell in (CONTROL, CANDIDATE):
        assert said["cells"][cell]["libraries_line"] is None
        rows = said["cells"][cell]["libraries"]
        assert rows and all(r["origin"] in ("wheel", "torch-lib") for r in rows if r["path"])
        assert {r["package"].split()[0] for r in rows if r["family"] == "cudnn"} == {"nvidia-cudnn-cu12"}
        print(f"{cell}: {len(rows)} libraries named")
