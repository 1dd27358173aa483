"""What a bundle holds, as the atlas reads it: a fleet's runs, each cell's observed stack and GPU,
and per case the one verdict (results/verdicts.py) with what a reader needs to act on it. Nothing
here names a host, a user, a path or an address: export drops them (docs/atlas.md lists what), and
the reader (atlas/bundle.py) refuses a bundle whose fields do not fit these types and bounds.

Plain frozen dataclasses, so that the exporter builds them, the bundle reader validates into them
and the site reads them, none knowing the others."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The bundle format's name and version: a new field is a new version (docs/atlas.md). Version 2
# (this batch's one: issues 47-49) adds a case's cost and a cell's loaded cuDNN (`libraries`); the
# reader still takes version 1's files.
FORMAT = "convmatrix-bundle"
VERSION = 2
READS = (1, 2)


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """A GPU by what it is, never by which one: its model, compute capability and MIG profile."""

    model: str  # e.g. "NVIDIA H200"
    capability: str  # e.g. "9.0"
    generation: str  # e.g. "sm90": gpus.py's generation of the capability
    mig: str | None = None  # the MIG profile of a slice, e.g. "1g.18gb"; None for a whole GPU


@dataclass(frozen=True, kw_only=True)
class Stack:
    """The stack as the cell observed it (env.json), not as the matrix asked for it."""

    torch: str | None
    cuda: str | None  # torch.version.cuda
    cudnn: str | None  # the cuDNN torch loaded, dotted (e.g. "9.1.0")
    driver: str | None  # the NVIDIA driver, e.g. "550.54.15"
    image_digest: str | None  # the container image's digest (sha256:...); None off the container lane
    lane: str  # host, venv or container


@dataclass(frozen=True, kw_only=True)
class Repro:
    """The results-line fields prove/repro.py reads to write a case's script: enough to rebuild
    the case exactly as the cell ran it."""

    params: Mapping[str, Any]
    shapes: Mapping[str, Any] | None
    knobs: Mapping[str, Any]
    device: str  # cuda or cpu


@dataclass(frozen=True, kw_only=True)
class Cost:
    """A case that passed on both sides, against the control's (results.verdicts.Cost): the backend
    each ran and the ratios of peak memory and time (time_ratio_low: the bound `slower` is judged by)."""

    backend: str | None
    control_backend: str | None
    memory_ratio: float | None = None
    time_ratio: float | None = None
    time_ratio_low: float | None = None


@dataclass(frozen=True, kw_only=True)
class Case:
    """One case of one cell: its verdict against the control, and for a failing case what failed."""

    case: str  # the case id
    verdict: str  # a results.outcomes.Verdict value
    outcome: str  # a results.outcomes.Outcome value
    family: str | None = None  # results/families.py
    subcode: int | None = None  # cuDNN's status sub-code (--explain), e.g. 3002
    reason: str | None = None  # a one-line summary of why it failed, bounded
    known: tuple[str, ...] = ()  # ids of known upstream issues the failure meets (results/known.py)
    sources: tuple[str, ...] = ()  # public links the case comes from (its case file's sources)
    repro: Repro | None = None  # failing cases only
    cost: Cost | None = None  # version 2: passed on both sides at a cost (fallback, memory, slower)


@dataclass(frozen=True, kw_only=True)
class LoadedFile:
    """One cuDNN file as the cell's library audit found it: by its soname's stem, never its path."""

    name: str  # e.g. "libcudnn_cnn" (libcudnn.so.9's is "libcudnn")
    version: str | None  # e.g. "9.2.1"
    origin: str | None  # wheel, torch-lib, LD_LIBRARY_PATH, ld cache or system path (results/libraries.ORIGINS)


@dataclass(frozen=True, kw_only=True)
class Libraries:
    """What the cell's process loaded of cuDNN (results/libraries.kept; issue 47): whether a file
    came from outside the cell's own packages with another version, and each cuDNN file."""

    swapped: bool
    cudnn: tuple[LoadedFile, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One stack on one GPU in one run."""

    stack: Stack
    gpu: Gpu
    verdict: str  # the cell's one verdict (or "control", "no-control")
    control: bool = False  # the run's known-good control cell
    cases: tuple[Case, ...] = ()
    libraries: Libraries | None = None  # version 2: its library audit, None without one


@dataclass(frozen=True, kw_only=True)
class Run:
    """One run of a fleet, named by an opaque id (a digest, not the run's own name)."""

    run: str
    date: str  # YYYY-MM-DD, the day it ran (no time of day)
    cells: tuple[Cell, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Bundle:
    """One fleet's export: what it ran, and what it left out."""

    fleet: str  # the public label its owner chose (export --fleet), or an opaque digest
    created: str  # YYYY-MM-DD
    tool: str  # the convmatrix version that exported it
    runs: tuple[Run, ...] = ()
    dropped: tuple[str, ...] = field(default=())  # what export left out, in words
