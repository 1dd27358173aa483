"""A base-image upgrade for real: two torch-carrying bases (tests/torchbases.py), `base` as the
axis, the current one the control, flavour "system": each cell's stack is its image's, observed
and recorded, never a STACK MISMATCH; the suite runs in both through the container lane."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import torchbases
from convmatrix import matrix as matrix_model
from testkit import REPO, ran

pytestmark = pytest.mark.usefixtures("docker_engine")
MATRIX = f"""
name = "base-upgrade"
[container]
flavour = "system"
[axes]
lane = ["container"]
base = ["{torchbases.CURRENT.tag}", "{torchbases.CANDIDATE.tag}"]
[control]
base = "{torchbases.CURRENT.tag}"
"""
CURRENT_CELL = "container-convmatrix-test-torch-base-2.5"
CANDIDATE_CELL = "container-convmatrix-test-torch-base-2.13"
CASES = "[conv1d-fp32-k3-p1] or [conv2d-fp32-k3-p1] or [conv3d-fp32-k3-p1]"


@pytest.fixture(scope="module")
def bases(wheelhouse: Path) -> tuple[str, str]:
    return torchbases.ensure(torchbases.CURRENT, wheelhouse), torchbases.ensure(torchbases.CANDIDATE, wheelhouse)


def convmatrix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convmatrix", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=3600, check=False)


@pytest.fixture(scope="module")
def upgrade_run(tmp_path_factory: pytest.TempPathFactory, bases: tuple[str, str]) -> tuple[Path, Path, str]:
    """Both bases through the container lane, a few cases each: their images built (or reused),
    the suite run in each."""
    tmp = tmp_path_factory.mktemp("upgrade")
    path = tmp / "upgrade.toml"
    path.write_text(MATRIX)
    out = tmp / "run"
    started = time.monotonic()
    done = convmatrix("run", "-m", str(path), "--lane", "container", "--out", str(out), "--", "-k", CASES)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    print(f"convmatrix run over both bases: {took:.1f} s")
    return path, out, done.stdout + done.stderr


def test_the_matrix_has_one_cell_per_base_and_the_current_one_is_the_control(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(MATRIX)
    loaded = matrix_model.load(path)
    assert [c.id for c in loaded.cells] == [CURRENT_CELL, CANDIDATE_CELL]
    assert loaded.control is not None and loaded.control.id == CURRENT_CELL


def test_each_cell_records_the_stack_its_image_carries(upgrade_run: tuple[Path, Path, str]) -> None:
    _, out, output = upgrade_run
    for cell, base in ((CURRENT_CELL, torchbases.CURRENT), (CANDIDATE_CELL, torchbases.CANDIDATE)):
        meta = json.loads((ran(out, cell) / "cell.json").read_text())
        assert meta["requested"]["torch"] == "image" and meta["requested"]["base"] == base.tag
        assert meta["expected"] == {}  # nothing requested, so nothing can mismatch
        assert meta["observed"]["torch"] == base.torch
        assert meta["observed"]["python"].startswith("3.11.")
        assert meta["exit_code"] == 0 and meta["image"].startswith("convmatrix/cell:")
        assert f"{cell}: the stack of {base.tag}: torch {base.torch}" in output
    assert json.loads((ran(out, CURRENT_CELL) / "cell.json").read_text())["observed"]["cuda"] == "12.4"
    assert "STACK MISMATCH" not in output


def test_the_report_compares_the_candidate_base_with_the_current_one(upgrade_run: tuple[Path, Path, str]) -> None:
    _, out, _ = upgrade_run
    report = convmatrix("report", str(out), "--format", "json")
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr
    data = json.loads(report.stdout)
    cells = {c["cell"]: c for c in data["cells"]}
    assert (cells[CURRENT_CELL]["verdict"], cells[CANDIDATE_CELL]["verdict"]) == ("control", "ok")
    assert cells[CANDIDATE_CELL]["observed"]["torch"] == torchbases.CANDIDATE.torch
    assert not cells[CURRENT_CELL]["stack_mismatch"] and not cells[CANDIDATE_CELL]["stack_mismatch"]
    assert {c["case"] for c in data["cases"] if c["cell"] == CANDIDATE_CELL} == {
        "conv1d-fp32-k3-p1", "conv2d-fp32-k3-p1", "conv3d-fp32-k3-p1"}
    text = convmatrix("report", str(out), "--color", "never").stdout
    # The grid groups each base by the torch it carried, and names the base.
    assert f"container · torch {torchbases.CURRENT.torch} (observed)" in text
    assert f"container · torch {torchbases.CANDIDATE.torch} (observed)" in text
    assert torchbases.CANDIDATE.tag in text


def test_a_rerun_builds_nothing(upgrade_run: tuple[Path, Path, str]) -> None:
    path, _, _ = upgrade_run
    dry = convmatrix("build", "-m", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = [line for line in dry.stdout.splitlines() if " -> convmatrix/cell:" in line]
    assert len(lines) == 2 and all(line.endswith("up to date") for line in lines), dry.stdout


def test_a_base_without_ensurepip_still_gets_the_suite(bases: tuple[str, str], tmp_path: Path) -> None:
    """Ubuntu's python3 without python3-venv (NGC's images) cannot make a venv with pip: the cell's
    venv is made without one, and the base's own pip installs the suite's requirements into it."""
    base = torchbases.without_ensurepip(bases[1])
    path = tmp_path / "m.toml"
    path.write_text(f'name = "no-ensurepip"\n[container]\nflavour = "system"\nbase = "{base}"\n'
                    '[axes]\nlane = ["container"]\n')
    done = convmatrix("run", "-m", str(path), "--out", str(tmp_path / "run"), "--", "-k", "[conv1d-fp32-k3-p1]")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (result,) = (tmp_path / "run").glob("*@cpu@*")
    meta = json.loads((result / "cell.json").read_text())
    assert meta["exit_code"] == 0 and meta["observed"]["torch"] == torchbases.CANDIDATE.torch
    records = (result / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in records] == ["passed"]
