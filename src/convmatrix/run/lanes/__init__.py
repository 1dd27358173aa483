"""The lanes: where a cell's suite runs. One module per lane, each implementing `Lane`; one
orchestration (convmatrix.orchestrate) drives them all the same way.

    host       the interpreter at hand ($CONVMATRIX_PYTHON or python3), installing nothing
    baremetal  a uv venv per cell: torch, the suite's requirements, then a cuDNN override
    container  an image per cell (built when missing), the suite run in it through the docker SDK

A new lane is one module with a class that has these three methods, named in LANES.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from convmatrix.matrix.cells import Cell
from convmatrix.matrix.parse import Matrix
from convmatrix.run.runner import Target

Log = Callable[[str], None]

# lane name -> "module:Class"; imported on first use, so that a lane's own dependencies (the docker
# SDK for containers) are needed only where that lane runs.
LANES = {
    "host": "convmatrix.run.lanes.host:Host",
    "baremetal": "convmatrix.run.lanes.baremetal:Baremetal",
    "container": "convmatrix.run.lanes.container:Container",
}


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A cell made ready to run: what runs the suite, and what cell.json records of it."""

    python: str  # the interpreter that runs the suite, as the lane sees it
    record: Mapping[str, str] = field(default_factory=dict)  # venv, image id, ...
    lock: str = ""  # what identifies the environment's contents (reuse.py); "": unknown, never reused


@dataclass(frozen=True, kw_only=True)
class SuiteRun:
    """One run of the suite for a target: all of it, or the selected node ids (a re-run)."""

    target: Target
    args: tuple[str, ...]  # the user's suite options
    select: tuple[str, ...] = ()  # node ids from the repository root; () = the whole suite
    results_dir: Path | None = None  # default: the target's
    env: Mapping[str, str] = field(default_factory=dict)  # added to the suite's environment

    @property
    def out(self) -> Path:
        return self.results_dir or self.target.results_dir


class Lane(Protocol):
    def problem(self, cell: Cell) -> str | None:
        """Why this lane cannot run the cell on this machine (no interpreter, no engine), or None."""

    def prepare(self, cell: Cell, matrix: Matrix, log: Log) -> Prepared:
        """Make the cell's environment (a venv, an image); InfrastructureError when that fails."""

    def run(self, prepared: Prepared, run: SuiteRun, log: Log) -> int:
        """Run the suite into run.out, everything it prints into its log.txt; its exit status."""


def lane(name: str) -> Lane:
    module, _, cls = LANES[name].partition(":")
    made: Lane = getattr(importlib.import_module(module), cls)()
    return made
