"""A cell's install plan, in named parts that both lanes read: the baremetal lane runs its steps
with `uv pip install` in a venv, the container lane hands the same parts to the Dockerfile as
build arguments (images.build_args). One plan, so the two lanes install one stack the same way.

Torch comes from PyPI when the variant is the one PyPI ships for that release (cu124 for 2.5.x;
that works where only PyPI is reachable), else from download.pytorch.org/whl/<variant>; then the
suite's requirements; then the cuDNN override last, so that nothing re-resolves torch's pin and
puts the bundled cuDNN back. A wheelhouse replaces every index.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from convmatrix.matrix import stacks
from convmatrix.matrix.cells import Cell
from convmatrix.matrix.values import IMAGE

PYTORCH_INDEX = "https://download.pytorch.org/whl/{variant}"
SUITE_REQUIREMENTS = ("pytest>=8", "pytest-xdist>=3")


@dataclass(frozen=True, kw_only=True)
class Plan:
    source: tuple[str, ...]  # pip's source options: a wheelhouse's, or none (the indexes)
    torch: tuple[str, ...]  # torch's own arguments (its index, its pin); none for a system base's torch
    suite: tuple[str, ...] = SUITE_REQUIREMENTS
    cudnn: str = ""  # the cuDNN override's requirement; "" for none

    def steps(self) -> list[list[str]]:
        """Arguments for successive `pip install` calls: torch, the suite's requirements, then
        the cuDNN override (the baremetal venv's stamp holds these, so their form is kept)."""
        steps = [[*self.source, *self.torch]] if self.torch else []
        steps.append([*self.source, *self.suite])
        if self.cudnn:
            steps.append([*self.source, self.cudnn])
        return steps


def torch_index(cell: Cell) -> str | None:
    """The index that has this torch variant; None = the default index (PyPI)."""
    release = stacks.load().release(cell.torch)
    if release is not None and cell.cuda == release.pypi_default:
        return None
    return PYTORCH_INDEX.format(variant=cell.cuda)


def plan(cell: Cell, wheelhouse: Path | None = None) -> Plan:
    source = ("--no-index", "--find-links", str(wheelhouse)) if wheelhouse else ()
    if cell.from_image():
        # Only a system base gets here (prune.impossible): its torch is the image's, never installed.
        cudnn = cell.cudnn if cell.cudnn not in ("bundled", IMAGE) else ""
        return Plan(source=source, torch=(), cudnn=f"{stacks.cudnn_package(cell.cuda)}=={cudnn}" if cudnn else "")
    index = None if wheelhouse else torch_index(cell)
    torch = (*(("--index-url", index) if index else ()), f"torch=={cell.torch}")
    cudnn = f"{stacks.cudnn_package(cell.cuda)}=={cell.cudnn}" if cell.cudnn != "bundled" else ""
    return Plan(source=source, torch=torch, cudnn=cudnn)
