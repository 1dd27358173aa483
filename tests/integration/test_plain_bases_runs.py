"""The wheel flavour on bases that are not Python images (issue 25, item 2), for real: a base
whose python3 lacks python3-venv (Debian's and Ubuntu's without it), one with no Python at all
(NVIDIA's nvidia/cuda runtime images), and an air-gapped one where apt reaches nothing. Each is a
stand-in made here from Debian packages (tests/torchbases.py: PLAIN_BASES), since no registry is
reachable; images/check-python is what is under test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import containerkit
import torchbases
from convmatrix.run.lanes.images import docker_cli
from testkit import ran

pytestmark = pytest.mark.usefixtures("docker_engine", "its_images_removed")
CASES = ("-k", "conv2d-fp32-k3-p1 and not bwd and not 2g")  # a few CPU cases: the build is what is under test
MATRIX = """
name = "plain-bases"
wheelhouse = "{wheelhouse}"
[axes]
lane = ["container"]
torch = ["2.13.0"]
cuda = ["cpu"]
cudnn = ["bundled"]
python = ["{python}"]
base = [{bases}]
"""


def convmatrix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convmatrix", *args], capture_output=True, text=True,
                          timeout=3600, check=False)


def matrix(path: Path, wheelhouse: Path, bases: list[str], python: str = "3.11") -> Path:
    path.write_text(MATRIX.format(wheelhouse=wheelhouse, python=python, bases=", ".join(f'"{b}"' for b in bases)))
    return path


def cell_id(base: str, python: str = "3.11") -> str:
    return f"container-torch2.13.0-cpu-cudnnbundled-py{python}-{base.replace('/', '-').replace(':', '-')}"


@pytest.fixture(scope="module")
def its_images_removed() -> Iterator[None]:
    """The cell images this module makes are its own (the plain bases' cells, and a CUDA wheel
    cell of 5.4 GB): removed after it, with BuildKit's cache of them."""
    before = containerkit.cell_images()
    yield
    containerkit.remove_images_since(before)


@pytest.fixture(scope="module")
def plain(wheelhouse: Path) -> dict[str, str]:
    return {tag.rsplit(":", 1)[1]: torchbases.plain_base(tag) for tag in torchbases.PLAIN_BASES}


def test_a_base_without_venv_or_without_python_gets_them_from_its_distribution(
        plain: dict[str, str], wheelhouse: Path, tmp_path: Path) -> None:
    bases = [plain["no-venv"], plain["no-python"]]
    out = tmp_path / "run"
    done = convmatrix("run", "-m", str(matrix(tmp_path / "m.toml", wheelhouse, bases)), "--out", str(out),
                      "--", *CASES)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for base in bases:
        cell = ran(out, cell_id(base))
        meta = json.loads((cell / "cell.json").read_text())
        assert meta["exit_code"] == 0 and meta["base"] == base and meta["base_id"].startswith("sha256:")
        assert json.loads((cell / "env.json").read_text())["python"].startswith("3.11")
        lines = [json.loads(x) for x in (cell / "results.jsonl").read_text().splitlines()]
        assert lines and all(r["status"] == "passed" for r in lines), lines


def test_an_air_gapped_base_without_venv_bootstraps_pip_from_the_wheelhouse(
        plain: dict[str, str], wheelhouse: Path, tmp_path: Path) -> None:
    """apt reaches no mirror: the base's pip puts pip into a venv made without it, from the
    wheelhouse alone (which then needs a pip wheel: one is added to a copy here)."""
    wheels = tmp_path / "wheels"
    shutil.copytree(wheelhouse, wheels, copy_function=os.link)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                    str(wheels), "pip"], check=True, timeout=600)
    out = tmp_path / "run"
    done = convmatrix("run", "-m", str(matrix(tmp_path / "m.toml", wheels, [plain["no-venv-offline"]])),
                      "--out", str(out), "--", *CASES)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cell = ran(out, cell_id(plain["no-venv-offline"]))
    lines = (cell / "results.jsonl").read_text().splitlines()
    assert lines and all(json.loads(x)["status"] == "passed" for x in lines)
    # Still no ensurepip or python3-venv in the image (apt reached nothing): the venv's pip came from
    # the system's pip and the wheelhouse (its build says so on a cold cache).
    image = json.loads((cell / "cell.json").read_text())["image_id"]
    seen = subprocess.run([docker_cli(), "run", "--rm", "--network", "none", image, "sh", "-c",
                           "python3 -c 'import ensurepip' 2>/dev/null && echo ensurepip; "
                           "dpkg -s python3.11-venv >/dev/null 2>&1 && echo venv-package; "
                           "/opt/cell/bin/python -m pip --version"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert seen.stdout.startswith("pip ") and "/opt/cell/lib/python3.11/site-packages/pip" in seen.stdout, seen


def test_a_base_whose_distribution_has_another_python_is_one_clear_build_error(
        plain: dict[str, str], wheelhouse: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = convmatrix("run", "-m", str(matrix(tmp_path / "m.toml", wheelhouse, [plain["no-python"]], "3.12")),
                      "--out", str(out), "--", *CASES)
    said = done.stdout + done.stderr
    assert ("convmatrix: the base image has Python 3.11 (installed from the base's distribution packages), "
            "the cell asks for Python 3.12, and its distribution has no python3.12") in said, said[-3000:]
    report = convmatrix("report", str(out), "--format", "json")
    (cell,) = json.loads(report.stdout)["cells"]
    assert cell["verdict"] == "invalid" and any("image build failed" in p for p in cell["problems"]), cell


def test_the_wheels_cudnn_wins_over_a_system_cudnn_on_the_library_path(tmp_path: Path) -> None:
    """A CUDA base's own cuDNN (here a real libcudnn.so.9 of 9.5.1.17) on LD_LIBRARY_PATH: the cell's
    torch 2.5.1 cu124 must load the 9.1.0.70 its wheel pins, or the cell tests another stack than it
    names. torch reports the loaded cuDNN without a GPU, so this runs on the CPU."""
    base = torchbases.system_cudnn_base()
    text = MATRIX.format(wheelhouse="", python="3.11", bases=f'"{base}"').replace('wheelhouse = ""\n', "")
    (tmp_path / "m.toml").write_text(text.replace('torch = ["2.13.0"]', 'torch = ["2.5.1"]')
                                     .replace('cuda = ["cpu"]', 'cuda = ["cu124"]'))
    out = tmp_path / "run"
    done = convmatrix("run", "-m", str(tmp_path / "m.toml"), "--out", str(out), "--", *CASES)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cell = ran(out, f"container-torch2.5.1-cu124-cudnnbundled-py3.11-{base.replace('/', '-').replace(':', '-')}")
    assert json.loads((cell / "env.json").read_text())["cudnn"] == 90100
    report = convmatrix("report", str(out), "--format", "json")
    (row,) = json.loads(report.stdout)["cells"]
    assert not row.get("stack_mismatch"), row
    # Inside the same image: with the base's library path alone (what the cell image overrides), torch
    # loads its wheel's libcudnn.so.9 (DT_RPATH) but that one opens the base's libcudnn_graph.so.9 by
    # name, and reports the base's release: the mix the image's LD_LIBRARY_PATH prevents.
    image = json.loads((cell / "cell.json").read_text())["image_id"]
    probe = "import os, torch; print(os.environ['LD_LIBRARY_PATH']); print(torch.backends.cudnn.version())"
    for path, expected in (("", ["/opt/cell/lib/python3.11/site-packages/nvidia/cudnn/lib:/usr/lib/cudnn-system",
                                 "90100"]),
                           ("/usr/lib/cudnn-system", ["/usr/lib/cudnn-system", "90501"])):
        seen = subprocess.run([docker_cli(), "run", "--rm", "--network", "none",
                               *(["-e", f"LD_LIBRARY_PATH={path}"] if path else []), image, "python", "-c", probe],
                              capture_output=True, text=True, timeout=600, check=False)
        assert [line for line in seen.stdout.split("\n") if line][-2:] == expected, seen.stdout + seen.stderr
