"""`convmatrix export`: a fleet's runs, judged as `convmatrix report` judges them, as a bundle to
publish and merge into the public atlas (atlas/export.py; docs/atlas.md; docs/contracts.md:
Bundles)."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any

from convmatrix.atlas import bundle, export
from convmatrix.cli import report as report_cmd
from convmatrix.cli.output import say, write_output
from convmatrix.errors import BadInput
from convmatrix.escape import one_line


def add_parser(sub: Any) -> None:
    e = sub.add_parser(
        "export", help="runs' outcomes as a bundle to publish, with nothing that names the fleet",
        description="Judge each RUN as `convmatrix report` does and write its outcomes as a bundle for the public "
                    "atlas: GPUs by model, generation and MIG profile, the stacks as observed, per case its verdict, "
                    "family, cuDNN sub-code, a reason, known issues and the repro's fields. No host or user names, "
                    "paths, addresses or environment: what is dropped is listed in the bundle (--show prints it).")
    e.add_argument("runs", nargs="+", metavar="RUN", help="run directories (each judged on its own)")
    e.add_argument("-o", "--output", type=Path, help="the bundle file to write")
    e.add_argument("--fleet", help="the public label of this fleet (letters, digits, '_.-', at most 64; "
                                   "default: an opaque one, new with each set of runs)")
    e.add_argument("--show", action="store_true", help="print what the bundle keeps and drops (with -o: then write)")
    e.add_argument("--control", help="the control cell id (default: the cell the matrix marked)")


def run(args: argparse.Namespace) -> int:
    if args.output is None and not args.show:
        raise BadInput("export: -o BUNDLE says where to write it (or --show, to see what it would keep)")
    if args.fleet is not None and not bundle.FLEET.fullmatch(args.fleet):
        raise BadInput(f"--fleet {one_line(args.fleet)[:80]!r}: letters, digits and '_.-', starting with a letter "
                       f"or digit, at most 64")
    judged, errors = [], []
    with report_cmd.bulk():
        for path in args.runs:
            loaded, report = report_cmd.made([path], args.control, [])
            errors += loaded.errors
            judged.append(export.Judged(path=Path(path), results=loaded.results, report=report))
    made = export.bundle_of(judged, fleet=args.fleet, today=datetime.datetime.now(datetime.UTC).date())
    if args.show:
        for line in export.show(made):
            say(line)
    if args.output is not None:
        write_output(bundle.write(made).decode("ascii"), args.output)
        size = bundle.summary(made)
        say(f"wrote {args.output}: {size['runs']} run(s), {size['cells']} cell(s), {size['cases']} case(s)")
    if errors:  # as `report`: what could be read is in the bundle; what could not, one line each (exit 2)
        raise BadInput("\n".join(errors))
    return 0
