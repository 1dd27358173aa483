"""What a baremetal cell installs, in which order, from which index (pure: unit-tested)."""

from __future__ import annotations

from pathlib import Path

from convmatrix import stacks
from convmatrix.cells import Cell

PYTORCH_INDEX = "https://download.pytorch.org/whl/{variant}"
SUITE_REQUIREMENTS = ("pytest>=8", "pytest-xdist>=3")


def torch_index(cell: Cell) -> str | None:
    """The index that has this torch variant; None = the default index (PyPI).

    PyPI's torch is a CUDA build of one variant per release (cu124 for 2.5.x): installing that
    variant from PyPI needs no extra index, which also works where only PyPI is reachable.
    """
    release = stacks.load().release(cell.torch)
    if release is not None and cell.cuda == release.pypi_default:
        return None
    return PYTORCH_INDEX.format(variant=cell.cuda)


def steps(cell: Cell, wheelhouse: Path | None = None) -> list[list[str]]:
    """Arguments for successive `pip install` calls.

    The cuDNN override goes last so that nothing installed after it re-resolves torch's pin
    and puts the bundled cuDNN back.
    """
    source = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
    index = torch_index(cell)
    torch_source = source or (["--index-url", index] if index else [])
    plan = [[*torch_source, f"torch=={cell.torch}"], [*source, *SUITE_REQUIREMENTS]]
    if cell.cudnn != "bundled":
        plan.append([*source, f"{stacks.cudnn_package(cell.cuda)}=={cell.cudnn}"])
    return plan
