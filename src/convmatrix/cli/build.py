"""`convmatrix build`: the images the matrix's container cells need."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from convmatrix import matrix
from convmatrix.matrix.cells import ENGINES


def add_parser(sub: Any) -> None:
    b = sub.add_parser("build", help="build the images the matrix's container cells need")
    b.add_argument("-m", "--matrix", default=None, help="matrix file (default as for `matrix`)")
    b.add_argument("--cell", action="append", default=[], metavar="GLOB", help="only cells whose id matches")
    b.add_argument("--dry-run", action="store_true", help="say what would be built and why; build nothing")
    b.add_argument("--wheelhouse", type=Path, help="install from these wheels only (overrides the matrix)")
    b.add_argument("--engine", choices=ENGINES, help="the engine to build for (overrides the matrix)")


def run(args: argparse.Namespace) -> int:
    from convmatrix.run.lanes import container  # needs the docker SDK; the other commands do not

    loaded = matrix.load(args.matrix or matrix.default_matrix())
    container.build_all(loaded.through(args.engine) if args.engine else loaded, args.cell, dry_run=args.dry_run,
                        wheelhouse=args.wheelhouse.resolve() if args.wheelhouse else None)
    return 0
