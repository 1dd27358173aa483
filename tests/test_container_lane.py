"""The container lane for real: a base image from Debian packages, an air-gapped cell image
from a wheelhouse, the suite in a container beside a baremetal cell, and the engine's failures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import REPO
from convmatrix import base_image
from convmatrix.images import docker_cli

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("docker_engine")]
WHEELHOUSE = Path.home() / ".cache" / "convmatrix" / "test-wheelhouse"
CONTAINER = "container-torch2.13.0-cpu-cudnnbundled-py3.11"
BAREMETAL = "baremetal-torch2.13.0-cpu-cudnnbundled-py3.11"
MATRIX = """
name = "container-and-baremetal"
wheelhouse = "{wheelhouse}"
[axes]
lane = ["container", "baremetal"]
torch = ["2.13.0"]
cuda = ["cpu"]
cudnn = ["bundled"]
python = ["3.11"]
[control]
lane = "baremetal"
[container]
base = "convmatrix/base:bookworm"
"""


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    """torch 2.13.0 (CPU) and the suite's requirements as wheels, kept between runs: the cells
    install from here alone (--no-index), as on an air-gapped GPU cluster."""
    if not any(WHEELHOUSE.glob("torch-2.13.0*.whl")):
        WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(WHEELHOUSE),
                        "torch==2.13.0", "pytest>=8", "pytest-xdist>=3"], check=True, timeout=1800)
    return WHEELHOUSE


@pytest.fixture(scope="module")
def base() -> str:
    return base_image.ensure()


def nox(session: str, matrix: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), "-s", session, "--", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3600, check=False,
                          env={**os.environ, "CONVMATRIX_MATRIX": str(matrix), **(env or {})})


def convmatrix(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convmatrix", *args], capture_output=True, text=True,
                          timeout=3600, check=False, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def run(tmp_path_factory, wheelhouse, base) -> tuple[Path, Path]:
    """Both lanes into one run directory, through the README's sessions."""
    tmp = tmp_path_factory.mktemp("lanes")
    matrix = tmp / "m.toml"
    matrix.write_text(MATRIX.format(wheelhouse=wheelhouse))
    out = tmp / "run"
    for session in ("container", "baremetal"):
        done = nox(session, matrix, "--out", str(out))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return matrix, out


def test_container_and_baremetal_cells_report_side_by_side(run):
    _, out = run
    report = convmatrix("report", str(out), "--format", "json")
    assert report.returncode == 0, report.stderr
    cells = {c["cell"]: c for c in json.loads(report.stdout)["cells"]}
    assert set(cells) == {CONTAINER, BAREMETAL}
    assert cells[CONTAINER]["observed"]["torch"] == cells[BAREMETAL]["observed"]["torch"] == "2.13.0+cpu"
    assert (cells[BAREMETAL]["verdict"], cells[CONTAINER]["verdict"]) == ("control", "ok")
    assert cells[CONTAINER]["lane"] == "container"
    meta = json.loads((out / f"{CONTAINER}@cpu" / "cell.json").read_text())
    assert meta["image_id"].startswith("sha256:") and meta["image"].startswith("convmatrix/cell:")
    assert json.loads((out / f"{CONTAINER}@cpu" / "env.json").read_text())["image_id"] == meta["image_id"]


def test_no_container_is_left_behind(run):
    listed = subprocess.run([docker_cli(), "ps", "-a", "-q", "--filter", "ancestor=convmatrix/cell"],
                            capture_output=True, text=True, check=True)
    leftovers = [line for line in listed.stdout.splitlines() if line.strip()]
    assert leftovers == []


def test_second_run_does_not_rebuild(run, tmp_path):
    matrix, _ = run
    dry = convmatrix("build", "-m", str(matrix), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"{CONTAINER} -> convmatrix/cell:" in dry.stdout and "up to date" in dry.stdout
    again = nox("container", matrix, "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stdout[-3000:]
    assert "building convmatrix/cell" not in again.stdout + again.stderr


def test_secrets_never_reach_a_layer(run, tmp_path, wheelhouse):
    """Build a fresh image with a CA bundle and a pip.conf as secrets: no byte of either may be
    in the saved image, nor in its history."""
    marker = f"CONVMATRIX-SECRET-{uuid.uuid4().hex}"
    (tmp_path / "ca.pem").write_text(f"# {marker}\n")
    (tmp_path / "pip.conf").write_text(f"# {marker}\n[global]\n")
    fresh = tmp_path / "wheels"  # a changed wheelhouse listing: a new image, built now
    shutil.copytree(wheelhouse, fresh, copy_function=os.link)
    (fresh / f"{uuid.uuid4().hex}.txt").write_text("forces a new image hash\n")
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX.format(wheelhouse=fresh))
    secrets = {"CONVMATRIX_CA_BUNDLE": str(tmp_path / "ca.pem"), "CONVMATRIX_PIP_CONF": str(tmp_path / "pip.conf")}
    built = convmatrix("build", "-m", str(matrix), env=secrets)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr
    tag = next(line.split(" -> ")[1].split(":", 2)[:2] for line in built.stdout.splitlines() if " -> " in line)
    image = ":".join(tag)
    history = subprocess.run([docker_cli(), "history", "--no-trunc", image], capture_output=True, text=True, check=True)
    assert "--mount=type=secret,id=ca" in built.stdout  # the RUN steps mounted them ...
    assert marker not in history.stdout  # ... but nothing of them was kept
    saved = subprocess.run([docker_cli(), "save", image], capture_output=True, check=True).stdout
    assert marker.encode() not in saved
    subprocess.run([docker_cli(), "rmi", "-f", image], capture_output=True, check=False)


def test_unreachable_engine_fails_the_lane_in_one_line_and_keeps_other_results(run, tmp_path):
    _, out = run
    copy = tmp_path / "run"
    shutil.copytree(out / f"{BAREMETAL}@cpu", copy / f"{BAREMETAL}@cpu")
    before = (copy / f"{BAREMETAL}@cpu" / "results.jsonl").read_bytes()
    matrix = run[0]
    dead = nox("container", matrix, "--out", str(copy), env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert dead.returncode != 0
    lines = [line for line in (dead.stdout + dead.stderr).splitlines() if "could not run here" in line]
    assert len(lines) == 1 and "the docker engine is not reachable" in lines[0]
    assert (copy / f"{BAREMETAL}@cpu" / "results.jsonl").read_bytes() == before
    report = convmatrix("report", str(copy), "--format", "json")
    cells = {c["cell"]: c for c in json.loads(report.stdout)["cells"]}
    assert cells[CONTAINER]["verdict"] == "invalid"
    assert any("docker engine is not reachable" in p for p in cells[CONTAINER]["problems"])
    assert cells[CONTAINER]["signature"] is False
    assert cells[BAREMETAL]["verdict"] == "control"
