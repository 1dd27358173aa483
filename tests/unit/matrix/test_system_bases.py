"""A system base's stack comes from its image ("image"): matrix parsing, ids, pruning, build
arguments, what is expected and what is only observed, and how the report names such cells."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from convmatrix import matrix
from convmatrix.errors import BadInput
from convmatrix.matrix.cells import Cell
from convmatrix.matrix.values import IMAGE
from convmatrix.report import grid as report_grid
from convmatrix.report.model import CellRow
from convmatrix.results import stackcheck
from convmatrix.run.lanes import images

UPGRADE = """
name = "upgrade"
[container]
flavour = "system"
[axes]
lane = ["container"]
base = ["nvcr.io/nvidia/pytorch:24.10-py3", "nvcr.io/nvidia/pytorch:25.01-py3"]
[control]
base = "nvcr.io/nvidia/pytorch:24.10-py3"
"""
OLD, NEW = "container-nvcr.io-nvidia-pytorch-24.10-py3", "container-nvcr.io-nvidia-pytorch-25.01-py3"


def system_cell(*, torch: str = IMAGE, python: str = IMAGE) -> Cell:
    return Cell(lane="container", flavour="system", torch=torch, cuda=IMAGE, cudnn=IMAGE, python=python,
                base="nvcr.io/nvidia/pytorch:24.10-py3")


def test_a_base_upgrade_is_one_cell_per_base_with_its_stack_from_the_image(
        write_matrix: Callable[[str], Path]) -> None:
    m = matrix.load(write_matrix(UPGRADE))
    assert [c.id for c in m.cells] == [OLD, NEW]
    assert m.control is not None and m.control.id == OLD
    assert all(c.from_image() == ("torch", "cuda", "cudnn", "python") for c in m.cells)
    assert m.cells[1].values() == {"lane": "container", "torch": IMAGE, "cuda": IMAGE, "cudnn": IMAGE,
                                   "python": IMAGE, "base": "nvcr.io/nvidia/pytorch:25.01-py3",
                                   "flavour": "system"}


def test_a_named_value_is_requested_and_goes_into_the_id(write_matrix: Callable[[str], Path]) -> None:
    m = matrix.load(write_matrix(UPGRADE.replace("[control]", 'python = ["3.12"]\n[control]')))
    assert [c.id for c in m.cells] == ["container-py3.12-nvcr.io-nvidia-pytorch-24.10-py3",
                                       "container-py3.12-nvcr.io-nvidia-pytorch-25.01-py3"]
    assert m.cells[0].from_image() == ("torch", "cuda", "cudnn")


def test_explicit_image_values_are_the_same_cells(write_matrix: Callable[..., Path]) -> None:
    spelt = UPGRADE.replace("[control]", 'torch = ["image"]\ncuda = ["image"]\ncudnn = ["image"]\n'
                                         'python = ["image"]\n[control]')
    assert matrix.load(write_matrix(spelt)).cells == matrix.load(write_matrix(UPGRADE, "other.toml")).cells


def test_an_include_of_a_system_base_takes_its_stack_from_the_image(write_matrix: Callable[[str], Path]) -> None:
    text = UPGRADE + '[[include]]\nlane = "container"\nbase = "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime"\n'
    m = matrix.load(write_matrix(text))
    assert m.cells[-1].id == "container-pytorch-pytorch-2.6.0-cuda12.4-cudnn9-runtime"


def test_image_values_elsewhere_are_pruned_with_the_reason(write_matrix: Callable[[str], Path]) -> None:
    text = """
    name = "t"
    [container]
    base = "convmatrix/base:bookworm"
    [axes]
    lane = ["container", "baremetal"]
    torch = ["image", "2.5.1"]
    cuda = ["cu124"]
    cudnn = ["bundled"]
    python = ["3.11"]
    """
    m = matrix.load(write_matrix(text))
    assert [c.id for c in m.cells] == ["container-torch2.5.1-cu124-cudnnbundled-py3.11",
                                       "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11"]
    assert {p.reason for p in m.pruned} == {
        "torch = 'image' is for container cells of a system base ([container] flavour = \"system\"): "
        "the others install their stack"}


def test_a_cudnn_override_needs_a_cuda_variant_named(write_matrix: Callable[..., Path]) -> None:
    with pytest.raises(BadInput, match="a cuDNN override needs a CUDA variant"):
        matrix.load(write_matrix(UPGRADE.replace("[control]", 'cudnn = ["9.5.1.17"]\n[control]')))
    named = UPGRADE.replace("[control]", 'cuda = ["cu126"]\ncudnn = ["9.5.1.17"]\n[control]')
    (cell, _) = matrix.load(write_matrix(named, "named.toml")).cells
    assert images.build_args(cell, "system", None)["CUDNN_SPEC"] == "nvidia-cudnn-cu12==9.5.1.17"


def test_a_misspelt_image_value_names_the_field(write_matrix: Callable[[str], Path]) -> None:
    with pytest.raises(BadInput, match=r"\[axes\]\.torch\[0\]: 'images' is not a torch release like 2.5.1, "
                                       r"or 'image'"):
        matrix.load(write_matrix(UPGRADE.replace("[control]", 'torch = ["images"]\n[control]')))


def test_build_args_install_nothing_of_the_stack_and_check_no_python(tmp_path: Path) -> None:
    args = images.build_args(system_cell(), "system", None)
    assert args == {"BASE": "nvcr.io/nvidia/pytorch:24.10-py3", "FLAVOUR": "system", "PYTHON_VERSION": IMAGE,
                    "SOURCE_ARGS": "", "TORCH_ARGS": "", "SUITE_REQUIREMENTS": "pytest>=8 pytest-xdist>=3",
                    "CUDNN_SPEC": "", "CACHE_ID": "pyimage-torchimage-image-system-nvcr.io-nvidia-pytorch-24.10-py3",
                    "CUDNN_LIBRARY_PATH": ""}  # the base's own cuDNN: no folder of the cell's first (issue 47)
    assert images.build_args(system_cell(), "system", tmp_path)["SOURCE_ARGS"] == "--no-index --find-links /wheelhouse"
    assert images.build_args(system_cell(python="3.12"), "system", None)["PYTHON_VERSION"] == "3.12"


def test_nothing_taken_from_the_image_is_expected_so_it_never_mismatches() -> None:
    assert system_cell().expected() == {}
    observed = {"torch": "2.6.0a0+ecf3bae", "cuda": "12.8", "cudnn": 90700, "python": "3.12.3"}
    assert stackcheck.mismatches(system_cell().expected(), observed) == []
    # A value the cell does name is checked against what the image carries.
    named = system_cell(torch="2.5.1")
    assert stackcheck.mismatches(named.expected(), observed) == ["torch: requested 2.5.1, observed 2.6.0a0+ecf3bae"]


def test_the_observed_stack_is_recorded_and_told_in_one_line() -> None:
    env = {"torch": "2.5.1+cu124", "cuda": "12.4", "cudnn": 90100, "python": "3.11.2", "driver": None}
    assert stackcheck.observed(env) == {"torch": "2.5.1+cu124", "cuda": "12.4", "cudnn": 90100, "python": "3.11.2"}
    assert stackcheck.describe(env) == "torch 2.5.1+cu124, CUDA 12.4, cuDNN 90100, Python 3.11.2"
    assert stackcheck.describe({}) == "torch none, CUDA none, cuDNN none, Python ?"


def row(cell: Cell, observed: dict[str, Any]) -> CellRow:
    fields: dict[str, Any] = {name: None for name in CellRow.__dataclass_fields__}
    fields.update(cell=cell.id, stack=cell.values(), observed=observed, lane="container")
    return CellRow(**fields)


def test_the_grid_groups_a_system_base_by_the_torch_it_carried_and_names_the_base() -> None:
    cell = system_cell()
    seen = row(cell, {"torch": "2.5.0a0+e000cf0", "cudnn": 90500})
    assert report_grid.group_title(seen) == "container · torch 2.5.0a0+e000cf0 (observed)"
    assert report_grid.sub_label(seen, [], {}) == "cuDNN 90500 (observed) · nvcr.io/nvidia/pytorch:24.10-py3"
    assert report_grid.sub_label(seen, ["lane", "base"], {}) == (
        "cuDNN 90500 (observed) · nvcr.io/nvidia/pytorch:24.10-py3 · container")


def test_a_system_base_that_never_ran_says_its_cudnn_was_not_observed() -> None:
    # A base that was never pulled wrote no env.json: the row must not claim the suite saw "none".
    never = row(system_cell(), {})
    assert report_grid.group_title(never) == "container · (not observed)"
    assert report_grid.sub_label(never, [], {}) == "cuDNN (not observed) · nvcr.io/nvidia/pytorch:24.10-py3"
    # A suite that ran on a torch without cuDNN did observe none.
    cpu_only = row(system_cell(), {"torch": "2.5.1+cpu", "cudnn": None})
    assert report_grid.sub_label(cpu_only, [], {}) == "cuDNN none (observed) · nvcr.io/nvidia/pytorch:24.10-py3"
