"""`convmatrix export`: a fleet's runs, judged as `convmatrix report` judges them, as a bundle to
publish and merge into the public atlas (atlas/export.py; docs/atlas.md; docs/contracts.md:
Bundles)."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any

from convmatrix.atlas import bundle, export
from convmatrix.atlas.model import Bundle
from convmatrix.cli import history as history_cmd
from convmatrix.cli import report as report_cmd
from convmatrix.cli.output import say, write_output
from convmatrix.errors import BadInput
from convmatrix.escape import one_line
from convmatrix.results import night


def add_parser(sub: Any) -> None:
    e = sub.add_parser(
        "export", help="runs' outcomes as a bundle to publish, with nothing that names the fleet",
        description="Judge each RUN as `convmatrix report` does and write its outcomes as a bundle for the public "
                    "atlas: GPUs by model, generation and MIG profile, the stacks as observed, per case its verdict, "
                    "family, cuDNN sub-code, a reason, known issues and the repro's fields. No host or user names, "
                    "paths, addresses or environment: what is dropped is listed in the bundle (--show prints it).")
    e.add_argument("runs", nargs="*", metavar="RUN", help="run directories (each judged on its own)")
    e.add_argument("--history", metavar="URL", help="instead of RUN...: the runs recorded in this history database "
                   "(fewer fields: no repro, message or sources): " + history_cmd.URL_HELP)
    e.add_argument("--last", type=int, default=None, metavar="N",
                   help="with --history: the newest N recorded runs (default 30)")
    e.add_argument("-o", "--output", type=Path, help="the bundle file to write")
    e.add_argument("--fleet", help="the public label of this fleet, the same every night (letters, digits, '_.-', "
                                   "at most 64); needed with -o")
    e.add_argument("--show", action="store_true", help="print what the bundle keeps and drops (with -o: then write)")
    e.add_argument("--control", help="the control cell id (default: the cell the matrix marked)")


def run(args: argparse.Namespace) -> int:
    if bool(args.runs) == bool(args.history):
        raise BadInput("export: give RUN directories, or --history URL (not both)")
    if args.last is not None and (not args.history or not 1 <= args.last <= bundle.MAX_RUNS):
        raise BadInput(f"--last: with --history, 1 to {bundle.MAX_RUNS:,} runs")
    if args.output is None and not args.show:
        raise BadInput("export: -o BUNDLE says where to write it (or --show, to see what it would keep)")
    if args.output is not None and args.fleet is None:
        # An unlabelled bundle would be a new fleet to the atlas each night: one fleet's nights
        # counted as many, and its own flaky cases shown as fleets that disagree.
        raise BadInput("export: -o needs --fleet LABEL, your fleet's public name, the same every night "
                       "(--show alone previews without one)")
    if args.fleet is not None and not bundle.FLEET.fullmatch(args.fleet):
        raise BadInput(f"--fleet {one_line(args.fleet)[:80]!r}: letters, digits and '_.-', starting with a letter "
                       f"or digit, at most 64")
    today = datetime.datetime.now(datetime.UTC).date()
    errors: list[str] = []
    made = from_history(args, today) if args.history else from_runs(args, today, errors)
    if args.show:
        for line in export.show(made):
            say(line)
    if args.output is not None:
        write_output(bundle.write(made).decode("ascii"), args.output)
        size = bundle.summary(made)
        say(f"wrote {one_line(str(args.output))}: {size['runs']} run(s), {size['cells']} cell(s), "
            f"{size['cases']} case(s)")
    if errors:  # as `report`: what could be read is in the bundle; what could not, one line each (exit 2)
        raise BadInput("\n".join(errors))
    return 0


def from_runs(args: argparse.Namespace, today: datetime.date, errors: list[str]) -> Bundle:
    """Each RUN judged as `report RUN` judges it; what could not be read added to errors."""
    judged = []
    with report_cmd.bulk():
        for path in args.runs:
            loaded, report = report_cmd.made([path], args.control, [])
            if report.judged is not None:
                # One case of each cell ran: not a night of the atlas (as it is none of the history's).
                night.refuse_audit_only(report.judged, report_cmd.HISTORY_REFUSES, f"{path}: ")
            errors += loaded.errors
            judged.append(export.Judged(path=Path(path), results=loaded.results, report=report))
    return export.bundle_of(judged, fleet=args.fleet, today=today)


def from_history(args: argparse.Namespace, today: datetime.date) -> Bundle:
    # SQLAlchemy only with --history: start-up time (as cli/report.py's against_history).
    from convmatrix.atlas import from_history  # start-up time
    from convmatrix.history import backends  # start-up time

    with backends.opened(history_cmd.url(args.history), write=False) as engine, engine.begin() as conn:
        return from_history.bundle_of(conn, last=args.last or from_history.LAST, fleet=args.fleet, today=today)
