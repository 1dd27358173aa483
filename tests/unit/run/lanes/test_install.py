"""A cell's install plan (run/lanes/install.py): the steps the baremetal lane runs and the named
parts the container lane's Dockerfile takes, one plan for both."""

from __future__ import annotations

from pathlib import Path

import pytest

from convmatrix.matrix.cells import Cell
from convmatrix.matrix.values import IMAGE
from convmatrix.run.lanes import images, install


def cell(*, torch: str = "2.5.1", cuda: str = "cu124", cudnn: str = "bundled", python: str = "3.11") -> Cell:
    return Cell(lane="baremetal", torch=torch, cuda=cuda, cudnn=cudnn, python=python)


def test_pypi_default_variant_installs_from_pypi() -> None:
    assert install.plan(cell()).steps() == [["torch==2.5.1"], list(install.SUITE_REQUIREMENTS)]


def test_other_variant_uses_its_pytorch_index() -> None:
    first = install.plan(cell(cuda="cu121")).steps()[0]
    assert first == ["--index-url", "https://download.pytorch.org/whl/cu121", "torch==2.5.1"]


def test_override_is_installed_last() -> None:
    plan = install.plan(cell(cudnn="9.5.1.17")).steps()
    assert plan[-1] == ["nvidia-cudnn-cu12==9.5.1.17"]
    assert plan[0] == ["torch==2.5.1"]


def test_wheelhouse_means_no_index_anywhere(tmp_path: Path) -> None:
    plan = install.plan(cell(cuda="cu118", cudnn="9.5.1.17"), wheelhouse=tmp_path).steps()
    for step in plan:
        assert step[:3] == ["--no-index", "--find-links", str(tmp_path)]
        assert "--index-url" not in step
    assert plan[-1][-1] == "nvidia-cudnn-cu11==9.5.1.17"


@pytest.mark.parametrize("wheelhouse", [None, Path("/wheelhouse")])
@pytest.mark.parametrize(("cuda", "cudnn"), [("cu124", "bundled"), ("cu121", "9.5.1.17"), ("cu118", "9.1.0.70")])
def test_the_container_lane_installs_the_parts_the_baremetal_lane_steps_through(
    wheelhouse: Path | None, cuda: str, cudnn: str
) -> None:
    """The Dockerfile runs `pip install SOURCE TORCH`, `pip install SOURCE SUITE`, then `pip
    install SOURCE CUDNN` when there is one: its build arguments, split back, are the venv's steps."""
    stack = Cell(lane="container", torch="2.5.1", cuda=cuda, cudnn=cudnn, python="3.11", base="python:3.11-slim")
    args = images.build_args(stack, "wheel", wheelhouse)
    source = args["SOURCE_ARGS"].split()
    rebuilt = [[*source, *args["TORCH_ARGS"].split()], [*source, *args["SUITE_REQUIREMENTS"].split()]]
    rebuilt += [[*source, args["CUDNN_SPEC"]]] if args["CUDNN_SPEC"] else []
    assert rebuilt == install.plan(stack, wheelhouse).steps()


def test_a_system_bases_own_torch_is_never_installed() -> None:
    stack = Cell(lane="container", torch=IMAGE, cuda=IMAGE, cudnn=IMAGE, python=IMAGE, base="nvcr.io/nvidia/pytorch:24.10-py3",
                 flavour="system")
    plan = install.plan(stack)
    assert plan.torch == () and plan.cudnn == ""
    assert plan.steps() == [list(install.SUITE_REQUIREMENTS)]
