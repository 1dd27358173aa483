"""Issue 47's Done when (c), for real on a CPU through the container lane: a base whose wheel lacks
libcudnn_cnn.so.9 (removed in this test's image) and which registers another cuDNN's (9.2.1.18's,
from the bisect tests' venv) with ldconfig. Seen: torch 2.5.1's cuDNN 9.1.0 takes the loader
cache's 9.2.1 libcudnn_cnn.so.9 and does not abort (as 9.4.0 did in (b)), but its
cudnnCnnVersionCheck returns 1002 (CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH): the audit case is
red with cudnn_version_mismatch, naming the file and where it came from (the loader cache), and
the conv cases still run. The base is a layer over
tests/torchbases.py's torch 2.5.1 cu124 base (flavour "system": the stack is the image's); the
clean base is the control."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

import realrun
import torchbases
from convmatrix.run.lanes.images import docker_cli
from testkit import REPO

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("docker_engine")]
BROKEN = "convmatrix-test/torch-base:2.5-cudnn-ldconfig"
CONTROL_CELL = "container-convmatrix-test-torch-base-2.5"
BROKEN_CELL = "container-convmatrix-test-torch-base-2.5-cudnn-ldconfig"
WHEEL_LIB = "/usr/local/lib/python3.11/dist-packages/nvidia/cudnn/lib"
OTHER = "/usr/lib/cudnn-other"
DOCKERFILE = f"""FROM {torchbases.CURRENT.tag}
COPY libcudnn_cnn.so.9 {OTHER}/libcudnn_cnn.so.9
RUN rm {WHEEL_LIB}/libcudnn_cnn.so.9 \\
    && echo {OTHER} > /etc/ld.so.conf.d/cudnn-other.conf && ldconfig \\
    && ldconfig -p | grep -q '{OTHER}/libcudnn_cnn.so.9'
"""
MATRIX = f"""
name = "audit-47-container"
[container]
flavour = "system"
[axes]
lane = ["container"]
base = ["{torchbases.CURRENT.tag}", "{BROKEN}"]
[control]
base = "{torchbases.CURRENT.tag}"
"""
OTHER_CNN = realrun.cudnn_lib(realrun.AUDIT_CONTROL) / "libcudnn_cnn.so.9"  # cuDNN 9.2.1.18's


def convmatrix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convmatrix", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=3600, check=False)


@pytest.fixture(scope="module")
def broken_base(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    realrun.made_audit_cells(tmp_path_factory.mktemp("made"))
    torchbases.ensure(torchbases.CURRENT, wheelhouse)
    with tempfile.TemporaryDirectory(prefix="test-audit-base-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(DOCKERFILE)
        shutil.copy(OTHER_CNN, Path(tmp) / "libcudnn_cnn.so.9")
        done = subprocess.run([docker_cli(), "build", "--progress=plain", "--tag", BROKEN, tmp], capture_output=True,
                              text=True, timeout=1800, check=False, env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return BROKEN


def judged(tmp_path: Path, *options: str) -> dict[str, Any]:
    (tmp_path / "m.toml").write_text(MATRIX)
    out = tmp_path / "run"
    done = convmatrix("run", "-m", str(tmp_path / "m.toml"), "--out", str(out), *options)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    report = convmatrix("report", str(out), "--format", "json")
    data = json.loads(report.stdout)
    return {"code": report.returncode, "data": data, "out": out,
            "cells": {c["cell"]: c for c in data["cells"]},
            "cases": {(c["cell"], c["case"]): c for c in data["cases"]}}


def the_finding(said: dict[str, Any]) -> dict[str, Any]:
    audit: dict[str, Any] = said["cases"][(BROKEN_CELL, "audit-cuda-libraries")]
    assert audit["family"] == "cudnn_version_mismatch" and audit["verdict"] == "regression", audit
    assert ("cudnnCnnVersionCheck returned 1002 (CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH): libcudnn_cnn.so.9 "
            f"(version unknown) loaded from ld cache ({OTHER}/libcudnn_cnn.so.9) beside cuDNN 9.1.0") in audit["message"]
    assert f"remedy: unregister {OTHER} from the loader cache" in audit["message"]
    assert said["cells"][BROKEN_CELL]["fails"] and said["code"] == 1
    assert said["cells"][BROKEN_CELL]["libraries_line"] == ("cuDNN 9.1.0 (wheel) · libcudnn_cnn (version unknown) "
                                                            "from ld cache")
    (row,) = [r for r in said["cells"][BROKEN_CELL]["libraries"] if r["name"] == "libcudnn_cnn.so.9"]
    assert row["path"] == f"{OTHER}/libcudnn_cnn.so.9" and row["origin"] == "ld cache" and row["loaded"]
    control = said["cases"][(CONTROL_CELL, "audit-cuda-libraries")]
    assert control["outcome"] == "pass" and said["cells"][CONTROL_CELL]["libraries_line"] is None
    return audit


def test_c_a_base_whose_ld_cache_holds_another_cudnns_cnn_is_red_in_the_container_lane(
        broken_base: str, tmp_path: Path) -> None:
    said = judged(tmp_path, "--allow-cpu", "--", "-k", "audit or (conv1d-fp32-k3-p1 and not zoo)")
    the_finding(said)
    (result,) = said["out"].glob(f"{BROKEN_CELL}@cpu*")
    evidence = (result / "evidence" / "audit-cuda-libraries.txt").read_text()
    assert "failed (cudnn_version_mismatch)" in evidence and "cudnnCnnVersionCheck returned 1002" in evidence
    assert said["cases"][(BROKEN_CELL, "conv1d-fp32-k3-p1")]["outcome"] == "pass"  # the conv cases still ran
    # As shipped: a system base gets no addition to its LD_LIBRARY_PATH (images/Dockerfile adds only a
    # folder the image has, and this one has no cell wheel's cuDNN), so the cell ran as it ships and
    # no second table is recorded.
    line = next(json.loads(x) for x in (result / "results.jsonl").read_text().splitlines()
                if json.loads(x)["case"] == "audit-cuda-libraries")
    assert "as_shipped" not in line["audit"]


def test_c_the_same_finding_from_an_audit_only_run(broken_base: str, tmp_path: Path) -> None:
    said = judged(tmp_path, "--audit-only")
    the_finding(said)
    assert said["data"]["audit_only"] is True
    assert {case for cell, case in said["cases"]} == {"audit-cuda-libraries"}
