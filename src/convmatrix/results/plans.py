"""A run's plan: every cell, GPU key and host it was meant to run, written into the run directory
before any cell runs (<run>/plans/<host>-<digest>.json), so that the report answers for what was
asked, not only for what happened to run. A planned cell@gpu@host without a complete result is
`not-run` (docs/contracts.md: The plan).

A plan is read like every other file a run leaves: as untrusted input, checked field by field,
one line naming the file and field for what is wrong.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convmatrix.results import rundir

PLANS = "plans"  # <run>/plans/: one file per runner and selection
SCHEMA = 1
MAX_BYTES = 64 << 20  # a plan of 100,000 cells on their GPUs is ~10 MB; past this it is not one of ours
MAX_FLEET_GPUS = 256  # GPU generations one fleet expects: each is multiplied by every planned cell
PLAN_FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (int,), "host": (str,), "matrix": (str,), "written": (str,), "shard": (list, type(None)),
    "lanes": (list,), "cells": (list,), "fleet_gpus": (list,), "expected": (list,),
}
ENTRY_FIELDS: dict[str, tuple[type, ...]] = {
    "cell": (str,), "gpu_key": (str,), "host": (str, type(None)), "optional": (bool,), "lane": (str,),
    "requested": (dict,),
}


@dataclass(frozen=True, kw_only=True)
class Expected:
    """One planned run: a cell on a GPU key, on one host (None: on any, as a fleet expects it)."""

    cell: str
    gpu_key: str
    host: str | None
    optional: bool = False
    lane: str = ""
    requested: dict[str, Any] | None = None  # the cell's axis values, as cell.json's "requested"
    source: str = ""  # the plan file (or option) that expects it, for the reason a not-run gives

    @property
    def where(self) -> str:
        return f"{self.cell}@{self.gpu_key}" + (f"@{self.host}" if self.host else "")


def plan_path(run_dir: Path, host: str, selection: dict[str, Any]) -> Path:
    """One file per host and selection (matrix, lanes, cells, shard): the same command run again
    replaces its plan; another selection into the same run directory adds one."""
    digest = hashlib.sha256(json.dumps(selection, sort_keys=True).encode()).hexdigest()[:12]
    return run_dir / PLANS / f"{host}-{digest}.json"


def write(run_dir: Path, *, host: str, selection: dict[str, Any], fleet_gpus: Sequence[str],
          expected: Iterable[Expected]) -> Path:
    path = plan_path(run_dir, host, selection)
    # The same command again (a --resume of the night) keeps the first plan's time: the night's
    # shared time (results/night.shared_time) is its plans' earliest, and a resume is the same night.
    folder = run_dir / PLANS
    before = load(path, []) if not folder.is_symlink() and path.is_file() and not path.is_symlink() else None
    kept = before.get("written") if before else None
    written = kept if rundir.records.parse_time(kept) else rundir.records.now()
    rundir.write_plain(path, json.dumps({
        "schema": SCHEMA, "host": host, "written": written, **selection,
        "fleet_gpus": list(fleet_gpus),
        "expected": [{"cell": e.cell, "gpu_key": e.gpu_key, "host": e.host, "optional": e.optional,
                      "lane": e.lane, "requested": e.requested or {}} for e in expected],
    }).encode(), run_dir)  # a plain file under the run directory: a symlinked plans/ is replaced, not followed
    return path


def read(run_dir: Path, errors: list[str],
         written: list[datetime.datetime] | None = None) -> tuple[list[Expected], list[str]]:
    """Every plan in a run directory: what they expect, and the GPU keys their matrices' [fleet]
    tables name (and, into written, when each plan was first written). A plan that cannot be read
    is one line in errors, and expects nothing."""
    folder = run_dir / PLANS
    if not folder.is_dir() or folder.is_symlink():
        return [], []
    expected: list[Expected] = []
    fleet: dict[str, None] = {}  # in order, each once (a set would lose the order, a list cost n²)
    for path in sorted(folder.glob("*.json")):
        data = load(path, errors)
        if data is None:
            continue
        fleet.update(dict.fromkeys(data["fleet_gpus"]))
        if written is not None and (at := rundir.records.parse_time(data.get("written"))) is not None:
            written.append(at)
        expected += [Expected(cell=e["cell"], gpu_key=e["gpu_key"], host=e["host"], optional=e["optional"],
                              lane=e.get("lane", ""), requested=e.get("requested") or {}, source=str(path))
                     for e in data["expected"]]
    if len(fleet) > MAX_FLEET_GPUS:
        errors.append(f"{folder}: the plans expect {len(fleet)} GPU generations, more than {MAX_FLEET_GPUS}; "
                      "none of them is expected")
        return expected, []
    return expected, list(fleet)


def load(path: Path, errors: list[str]) -> dict[str, Any] | None:
    if path.is_symlink() or not path.is_file():
        errors.append(f"{path}: not a plain file (a plan is one; nothing of it was read)")
        return None
    if path.stat().st_size > MAX_BYTES:
        errors.append(f"{path}: {path.stat().st_size} bytes, more than a plan holds ({MAX_BYTES}); not read")
        return None
    data = rundir.load_object(path, errors)
    if not data:
        return None
    problems = plan_problems(data)
    if problems:
        errors += [f"{path}: {p}" for p in problems]
        return None
    return data


def plan_problems(data: dict[str, Any]) -> list[str]:
    if data.get("schema") != SCHEMA:
        return [f"schema {data.get('schema')!r}, this convmatrix reads plan schema {SCHEMA}"]
    problems: list[str] = rundir.records.type_problems(data, PLAN_FIELDS, ("host", "expected"))
    if problems:
        return problems
    if not rundir.HOST.fullmatch(data["host"]):
        problems.append(f"field 'host': not a host name: {data['host'][:64]!r}")
    if not all(isinstance(g, str) and g for g in data.get("fleet_gpus", [])):
        problems.append("field 'fleet_gpus': expected a list of GPU keys")
    data.setdefault("fleet_gpus", [])
    for i, entry in enumerate(data["expected"]):
        where = f"field 'expected' [{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: expected an object")
            continue
        problems += [f"{where}: {p}" for p in rundir.records.type_problems(entry, ENTRY_FIELDS,
                                                                          ("cell", "gpu_key", "optional"))]
        host = entry.get("host")
        if isinstance(host, str) and not rundir.HOST.fullmatch(host):
            problems.append(f"{where}: field 'host': not a host name: {host[:64]!r}")
        entry.setdefault("host", None)
        if len(problems) > 20:
            return [*problems, "… and more"]
    return problems
