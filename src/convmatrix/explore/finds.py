"""What explore leaves in --out (docs/explore.md): per family found, the minimal configuration as a
case file with its provenance (the same [provenance] table the zoo's files carry: found by explore,
the seed, both stacks) and, for a failure, the minimal repro script of its confirming run; the
tried log (one JSON line per configuration run, what a later run with the same --out does not draw
again); and the summary a person reads."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from convmatrix import __version__
from convmatrix.explore.regions import Region
from convmatrix.explore.shrink import Shrunk
from convmatrix.explore.space import Config, as_json, entry, from_json, key
from convmatrix.results import rundir

TRIED = "tried.jsonl"
MAX_TRIED = 64 << 20  # the tried log read back: a million configurations at most, not unbounded


def name_of(family: str) -> str:
    """A case name (suites/casefile.py NAME) for a family's find."""
    word = re.sub(r"[^a-z0-9_]+", "_", family.lower()).strip("_") or "finding"
    return f"found-{word}"[:64].rstrip("-_")


def case_file(found: Shrunk, *, seed: int, cell: str, control: str, stacks: Mapping[str, str],
              found_after: int) -> dict[str, Any]:
    c = found.config
    return {
        "description": f"found by convmatrix explore: fails with {found.family} on {cell}, not on {control}",
        "provenance": {
            "package": "convmatrix", "version": __version__, "model": "convmatrix.explore:explore",
            "inputs": [{"shape": [c.batch, c.in_channels, *c.size], "dtype": c.dtype}], "dtype": c.dtype,
            "config": {"seed": seed, "cell": cell, "control": control, "family": found.family,
                       "candidate_stack": stacks.get(cell, ""), "control_stack": stacks.get(control, ""),
                       "found_after": found_after, "shrink_rounds": found.rounds, "shrink_tried": found.tried},
            "recorded_by": "convmatrix explore",
        },
        "case": [entry(c, name_of(found.family))],
    }


def write_find(out: Path, found: Shrunk, data: Mapping[str, Any], repro: str | None) -> Path:
    path = out / "finds" / f"{name_of(found.family)}.json"
    rundir.write_plain(path, (json.dumps(data, indent=1) + "\n").encode(), out)
    if repro is not None:
        rundir.write_plain(path.with_suffix(".repro.py"), repro.encode(), out)
    return path


def tried_lines(tried: Iterable[tuple[Config, str | None]], seed: int) -> bytes:
    return "".join(json.dumps({"key": key(c), "seed": seed, "config": as_json(c), "found": got}) + "\n"
                   for c, got in tried).encode()


def write_tried(out: Path, before: bytes, tried: Sequence[tuple[Config, str | None]], seed: int) -> None:
    rundir.write_plain(out / TRIED, before + tried_lines(tried, seed), out)


def read_tried(out: Path) -> tuple[bytes, set[str]]:
    """The tried log already in --out (its bytes, kept whole) and the keys it names; a line that is
    not one is skipped (the keys are all a later search needs)."""
    try:
        data = rundir.read_plain(out / TRIED, MAX_TRIED, out)
    except FileNotFoundError:
        return b"", set()
    keys = set()
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
            keys.add(key(from_json(record["config"])))
        except (ValueError, KeyError, TypeError):
            continue
    return data, keys


def summary(regions: Sequence[Region], finds: Sequence[tuple[Shrunk, Path]], *, tried: int, skipped: int,
            batches: int, stopped: str, seed: int) -> list[str]:
    lines = [f"explore: {tried} configuration(s) tried in {batches} batch(es), seed {seed}; stopped at {stopped}"
             + (f"; {skipped} drawn again and skipped (tried before)" if skipped else "")]
    if not finds:
        lines.append("nothing found: every configuration tried behaved on the candidate as on the control")
    for found, path in finds:
        lines.append(f"found {found.family}: shrunk in {found.rounds} run(s) ({found.tried} configurations) to {path}")
    for region in regions:
        lines.append(f"region {region.line()}")
    return lines
