"""`convmatrix repro`: a failing case of a cell as a standalone torch script to hand upstream
(prove/repro.py; docs/contracts.md: Repro scripts)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from convmatrix.cli.output import say, write_output
from convmatrix.errors import BadInput
from convmatrix.prove import minimal, repro


def add_parser(sub: Any) -> None:
    r = sub.add_parser(
        "repro", help="a failing case as a standalone torch script (exit 1 reproduces, 0 passes, 3 control fails)",
        description="Write a script that imports only torch and builds CASE exactly as CELL ran it (shapes, seeded "
                    "inputs, layout, dtype, autocast, cuDNN settings, direction), compares it with a float64 "
                    "reference under the suite's bound and exits 1 when the error reproduces, 0 when it passes, "
                    "3 when its control fails too. With --all: one script per failing case of the cell.")
    r.add_argument("run", type=Path, help="the run directory (or the cell's results directory itself)")
    r.add_argument("cell", help="the cell: its results directory's name (<cell>@<gpu>@<host>) or its cell id")
    r.add_argument("case", nargs="?", help="the case id (or --all)")
    r.add_argument("--all", action="store_true", help="every failing case of the cell, one script each")
    r.add_argument("-o", "--output", type=Path,
                   help="the script's file (default: stdout); with --all the directory (default: .)")
    r.add_argument("--minimal", action="store_true",
                   help="a short script to paste into an issue: versions, the tensors as the case built them, the "
                        "op; exit 1 when the signature appears, 0 when not (the full script has the suite's bound)")
    r.add_argument("--device", choices=repro.DEVICES, default=None,
                   help="the device the script runs on by default (default: the one the cell ran on)")


def run(args: argparse.Namespace) -> int:
    if args.all == (args.case is not None):
        raise BadInput("repro: name one CASE, or give --all")
    if args.minimal and args.all:
        raise BadInput("repro: --minimal takes one CASE, not --all")
    if args.minimal:
        write_output(minimal.minimal(args.run, args.cell, args.case, args.device), args.output)
        return 0
    if not args.all:
        write_output(repro.repro(args.run, args.cell, args.case, args.device), args.output)
        return 0
    made, refused = repro.repro_all(args.run, args.cell, args.device)
    if not made and not refused:
        raise BadInput(f"{args.run}: cell {repro.comment_text(args.cell, 200)!r} has no failing case")
    folder = args.output if args.output is not None else Path(".")
    for case_id, text in made.items():
        path = folder / f"repro-{case_id}.py"  # a checked case id: no '/', no leading '.'
        write_output(text, path)
        say(str(path))
    if refused:
        raise BadInput("\n".join(f"no script: {line}" for line in refused))
    return 0
