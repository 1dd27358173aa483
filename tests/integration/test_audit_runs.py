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

import realrun
from convmatrix import home

pytestmark = pytest.mark.slow
CONTROL, CANDIDATE, cudnn_lib = realrun.AUDIT_CONTROL, realrun.AUDIT_CANDIDATE, realrun.cudnn_lib
# The audit's case and one catalogue case (zoo ids such as hifigan-conv1d-fp32-k3-p1-… carry its name).
SELECT = ("-k", "audit or (conv1d-fp32-k3-p1 and not zoo)")


def run(tmp_path: Path, ld_library_path: str | None) -> dict[str, Any]:
    (tmp_path / "m.toml").write_text(realrun.AUDIT_MATRIX)
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
    # What a failed assertion shows: the report's own last lines (a sick control's reason) and each case.
    said = report.stderr[-2000:] + "".join(f"\n{c['cell']} {c['case']}: {c['outcome']} {c.get('family')} "
                                           f"{str(c.get('message'))[:300]}" for c in data["cases"])
    return {"code": report.returncode, "cells": cells, "cases": cases, "out": out, "said": said}


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> None:
    realrun.made_audit_cells(tmp_path_factory.mktemp("made"))


@pytest.mark.usefixtures("venvs")
def test_a_the_controls_cudnn_on_the_path_swaps_the_candidates_whole_cudnn(tmp_path: Path) -> None:
    """(a) The candidate is red naming both versions and the path; the control stays clean."""
    said = run(tmp_path, str(cudnn_lib(CONTROL)))
    control, candidate = said["cells"][CONTROL], said["cells"][CANDIDATE]
    assert control["verdict"] == "control" and control["libraries_line"] is None
    assert candidate["fails"] and said["code"] == 1, said["said"]
    audit = said["cases"][(CANDIDATE, "audit-cuda-libraries")]
    assert audit["family"] == "cuda_library_swapped" and audit["verdict"] == "regression"
    assert "9.2.1" in audit["message"] and "9.4.0.58" in audit["message"] and str(cudnn_lib(CONTROL)) in audit["message"]
    assert candidate["libraries_line"].startswith("cuDNN 9.4.0 (wheel) · ")
    assert "9.2.1 from LD_LIBRARY_PATH" in candidate["libraries_line"]


@pytest.mark.usefixtures("venvs")
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


@pytest.mark.usefixtures("venvs")
def test_d_without_planted_libraries_every_cell_is_clean_and_names_its_wheels_files(tmp_path: Path) -> None:
    said = run(tmp_path, None)
    assert said["code"] == 0, said["said"]
    for cell in (CONTROL, CANDIDATE):
        assert said["cells"][cell]["libraries_line"] is None
        rows = said["cells"][cell]["libraries"]
        assert rows and all(r["origin"] in ("wheel", "torch-lib") for r in rows if r["path"])
        assert {r["package"].split()[0] for r in rows if r["family"] == "cudnn"} == {"nvidia-cudnn-cu12"}
        print(f"{cell}: {len(rows)} libraries named")


# (e) pytorch/pytorch#188892 (fix: #189043, every bundled sub-library preloaded RTLD_GLOBAL): torch
# 2.12.1's PyPI wheel is cu130 and pins nvidia-cudnn-cu13 9.20.0.48, whose libcudnn_graph.so.9 names
# libcudnn_engines_tensor_ir.so by bare soname though the wheel ships none (it first comes in 9.23).
E_MATRIX = """
name = "audit-47-e"
[axes]
lane = ["baremetal"]
torch = ["2.12.1"]
cuda = ["cu130"]
cudnn = ["bundled"]
python = ["3.11"]
knobs = ["default", "pad=8"]
[control]
knobs = "default"
"""
E_CONTROL = "baremetal-torch2.12.1-cu130-cudnnbundled-py3.11"
E_CANDIDATE = f"{E_CONTROL}+pad8"
CUDNN_923 = "nvidia-cudnn-cu13==9.23.2.1"


def cudnn_923_lib() -> Path:
    """A cuDNN >= 9.23 wheel's lib folder, installed as a site-packages of its own (its RECORD names
    it): downloaded once (519 MB), kept under the convmatrix home."""
    site = home.home() / "test-wheels" / "cudnn-cu13-9.23.2.1" / "lib" / "python3.11" / "site-packages"
    lib = site / "nvidia" / "cudnn" / "lib"
    if not (lib / "libcudnn_engines_tensor_ir.so.9").is_file():
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                               str(site), "--only-binary=:all:", CUDNN_923], capture_output=True, text=True,
                              timeout=1800, check=False)
        if done.returncode != 0:
            pytest.skip(f"{CUDNN_923} could not be installed here: {done.stderr.strip()[-300:]}")
    return lib


def test_e_a_cudnn_923_folder_beside_torch_2_12_1_names_the_tensor_ir_engine_and_its_folder(tmp_path: Path) -> None:
    """(e): the cell is red naming libcudnn_engines_tensor_ir.so.9 and where it came from; the same
    stack without the folder (the control, run apart into the same run directory) is clean."""
    lib = cudnn_923_lib()
    (tmp_path / "m.toml").write_text(E_MATRIX)
    out = tmp_path / "run"
    for cell, path in ((E_CONTROL, None), (E_CANDIDATE, str(lib))):
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        env.update({"CONVMATRIX_RESULTS_STORE": str(tmp_path / "store"), **({"LD_LIBRARY_PATH": path} if path else {})})
        done = subprocess.run([sys.executable, "-m", "convmatrix", "run", "-m", str(tmp_path / "m.toml"), "--cell", cell,
                               "--out", str(out), "--allow-cpu", "--", *SELECT], env=env, capture_output=True,
                              text=True, check=False, timeout=3600)
        assert done.returncode in (0, 1), done.stderr[-3000:]
    report = subprocess.run([sys.executable, "-m", "convmatrix", "report", str(out), "--format", "json"],
                            capture_output=True, text=True, check=False)
    data = json.loads(report.stdout)
    cells = {c["cell"]: c for c in data["cells"]}
    cases = {(c["cell"], c["case"]): c for c in data["cases"]}
    assert report.returncode == 1 and cells[E_CANDIDATE]["fails"]
    audit = cases[(E_CANDIDATE, "audit-cuda-libraries")]
    assert audit["verdict"] == "regression" and audit["family"] == "cudnn_version_mismatch", audit
    assert (f"libcudnn_engines_tensor_ir.so.9 9.23.2 would load from LD_LIBRARY_PATH "
            f"({lib}/libcudnn_engines_tensor_ir.so.9), which nvidia-cudnn-cu13 9.20.0.48 does not ship") in audit["message"]
    assert f"remedy: take {lib} off LD_LIBRARY_PATH" in audit["message"]
    assert "libcudnn_engines_tensor_ir" in cells[E_CANDIDATE]["libraries_line"]
    assert cells[E_CONTROL]["libraries_line"] is None
    control_rows = {r["name"]: r for r in cells[E_CONTROL]["libraries"]}
    # The control asks for the engine too, and nothing on its loader's path has one: cuDNN does without.
    assert control_rows["libcudnn_engines_tensor_ir.so.9"]["path"] is None
    assert cases[(E_CANDIDATE, "conv1d-fp32-k3-p1")]["outcome"] == "pass"
