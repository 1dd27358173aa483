"""`convmatrix run`: the suite for the matrix's cells on this machine, into a run directory."""

from __future__ import annotations

import argparse
from typing import Any

from convmatrix import interrupts, matrix
from convmatrix.cli.output import say
from convmatrix.errors import BadInput
from convmatrix.run import options
from convmatrix.run.lanes import LANES


def add_parser(sub: Any) -> None:
    ru = sub.add_parser(
        "run", help="run the suite for the matrix's cells on this machine, into a run directory",
        description="Run the suite for the matrix's cells on this machine, into a run directory.\n"
                    "Suite options (pytest's and the suite's) go after a second --.",
        # The run options are parsed by run/options.py (the nox sessions pass the same ones):
        # listed from that parser, so that --help can never miss one.
        epilog=options.help_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    ru.add_argument("-m", "--matrix", default=None, help="matrix file (default as for `matrix`)")
    ru.add_argument("--lane", action="append", default=[], choices=sorted(LANES), help="only these lanes")
    ru.add_argument("--cell", action="append", default=[], metavar="ID", help="only these cells")
    ru.add_argument("--strict", action="store_true",
                    help="a cell that cannot run here is recorded (INVALID) and fails the run")


def run(args: argparse.Namespace) -> int:
    loaded = matrix.load(args.matrix or matrix.default_matrix())
    opts = options.parse(args.run_options)
    if opts.engine:
        loaded = loaded.through(opts.engine)
    cells = [c for c in loaded.cells if (not args.lane or c.lane in args.lane) and (not args.cell or c.id in args.cell)]
    unknown = sorted(set(args.cell) - {c.id for c in loaded.cells})
    if unknown:
        raise BadInput(f"{loaded.path}: no cell {unknown[0]} (`convmatrix matrix` lists them)")
    if not cells:
        # A selection that runs nothing must not end like a green run: exit 0 with no output.
        lanes = sorted({c.lane for c in loaded.cells})
        chosen = " ".join([*(f"--lane {lane}" for lane in args.lane), *(f"--cell {c}" for c in args.cell)])
        raise BadInput(f"{loaded.path}: {chosen} selects no cell (its cells' lanes: {', '.join(lanes) or 'none'})")
    # SIGTERM or SIGINT (CI cancelling, nox interrupted) ends the run promptly: the suite and
    # its container are stopped, the cut-short run recorded as such, and one line says where.
    from convmatrix.run import orchestrate  # here: the other commands (triage on a 1 GB log) start without it

    with interrupts.interruptible():
        interrupts.die_with_parent()
        orchestrate.run(loaded, cells, opts, say, strict=args.strict,
                        selection={"lanes": args.lane, "cells": args.cell})
    return 0
