"""`convmatrix history [CELL [CASE]]`: the recorded runs, a cell's timeline, or one case's, from
the history database; and what `record` and `report --history` share: which database, which run."""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from convmatrix.errors import BadInput
from convmatrix.escape import one_line
from convmatrix.results.read import EPOCH, Loaded

DEFAULT = "default"  # --history default: $CONVMATRIX_HISTORY, else SQLite under $CONVMATRIX_HOME
URL_HELP = ("the history database: sqlite:///PATH, postgresql://USER@HOST/DB, or `default` "
            "($CONVMATRIX_HISTORY, else history.sqlite in $CONVMATRIX_HOME)")


def add_parser(sub: Any) -> None:
    h = sub.add_parser("history", help="the recorded runs, a cell's timeline or a case's, from the history database")
    h.add_argument("cell", nargs="?", help="a cell id: its runs, each with its verdict")
    h.add_argument("case", nargs="?", help="a case id of that cell: its verdict in each run")
    h.add_argument("--history", default=DEFAULT, metavar="URL", help=URL_HELP)
    h.add_argument("--format", choices=("text", "json"), default="text")
    h.add_argument("--limit", type=int, default=400, help="the newest N runs (default 400)")


def url(given: str | None) -> str:
    from convmatrix.history import backends  # SQLAlchemy only for the commands that use a history: start-up time

    return backends.chosen(None if given in (None, DEFAULT) else given)


def run_key(loaded: Loaded, given: str | None) -> str:
    """--run-id, else the names of the run directories given (a nightly's reports/runs/<stamp>),
    else of the folders holding the cell directories given."""
    if given is not None:
        # Printable: a NUL is no PostgreSQL text, and the key is shown in every history line.
        if not given.strip() or len(given) > 200 or not given.isprintable():
            raise BadInput(f"--run-id {given[:200]!r}: 1 to 200 printable characters")
        return given
    names = sorted({Path(p).resolve().name for p in loaded.run_dirs}
                   or {r.path.resolve().parent.name for r in loaded.results})
    key = "+".join(names)
    if not key or len(key) > 200:
        raise BadInput("the run has no usable name (over 200 characters, or none): give --run-id")
    return key


def run_at(loaded: Loaded) -> datetime.datetime:
    """When the run ran: the first end among its cells (cell.json), else now."""
    ended = [r.ended for r in loaded.results if r.ended != EPOCH]
    return min(ended) if ended else datetime.datetime.now(datetime.UTC)


def run(args: argparse.Namespace) -> int:
    from convmatrix.history import backends, timeline  # SQLAlchemy: start-up time (see url())

    if args.limit < 1:
        raise BadInput(f"--limit {args.limit}: must be 1 or more")
    if args.case and not args.cell:
        raise BadInput("a CASE needs its CELL")
    chosen = url(args.history)
    with backends.opened(chosen, write=False) as engine, engine.begin() as conn:
        entries = (timeline.of_cell(conn, args.cell, args.case, args.limit) if args.cell
                   else timeline.runs(conn, args.limit))
    if args.format == "json":
        print(json.dumps({"history": backends.shown(chosen), "cell": args.cell, "case": args.case,
                          "entries": [e.json() for e in entries]}, indent=1))
        return 0
    for line in text_lines(entries, bool(args.cell), args.case):
        print(one_line(line))
    return 0


def text_lines(entries: Sequence[Any], cell: bool, case: str | None) -> list[str]:
    if not entries:
        return ["no recorded runs" + (" of that cell" if cell else "")]
    if not cell:
        return [f"{e.date[:19]} {e.run}: {e.cells} cells, {e.verdict}" for e in entries]
    strip = "".join("X" if e.red else "." for e in entries[-60:])
    out = [f"{entries[0].cell}{' ' + case if case else ''}: {len(entries)} runs, "
           f"{sum(e.red for e in entries)} red; last {min(60, len(entries))}: {strip} (X red, . not)"]
    for e in entries:
        where = f"{e.gpu_key}@{e.host}" if e.host else e.gpu_key
        family = f" {e.family}" if e.family else ""
        out.append(f"{e.date[:19]} {e.run}: {where} {e.verdict}{family} [{e.stack}]")
    return out
