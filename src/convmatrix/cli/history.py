"""`convmatrix history [CELL [CASE]]`: the recorded runs, a cell's timeline, or one case's, from
the history database; and what `record` and `report --history` share: which database, which run."""

from __future__ import annotations

import argparse
import difflib
import json
from collections.abc import Sequence
from typing import Any

from convmatrix.errors import BadInput
from convmatrix.escape import one_line
from convmatrix.matrix.cells import abbreviate

DEFAULT = "default"  # --history default: $CONVMATRIX_HISTORY, else SQLite under $CONVMATRIX_HOME
URL_HELP = ("the history database: sqlite:///PATH, postgresql://USER@HOST/DB, or `default` "
            "($CONVMATRIX_HISTORY, else history.sqlite in $CONVMATRIX_HOME)")


def add_parser(sub: Any) -> None:
    h = sub.add_parser("history", help="the recorded runs, a cell's timeline or a case's, from the history database")
    h.add_argument("cell", nargs="?", help="a cell id: its runs, each with its verdict")
    h.add_argument("case", nargs="?", help="a case id of that cell: its verdict in each run")
    h.add_argument("--history", default=DEFAULT, metavar="URL", help=URL_HELP)
    h.add_argument("--format", choices=("text", "json", "html"), default="text",
                   help="html: a static page of every cell x the newest nights into -o DIR (DIR/index.html)")
    h.add_argument("--limit", type=int, default=400, help="the newest N runs (default 400)")
    h.add_argument("-o", "--out", metavar="DIR", help="--format html: the folder the page is written into")
    h.add_argument("--link", metavar="TEMPLATE",
                   help="--format html: each night's report, a URL with {run}: https://ci.example/{run}/report.html")


def url(given: str | None) -> str:
    from convmatrix.history import backends  # SQLAlchemy only for the commands that use a history: start-up time

    return backends.chosen(None if given in (None, DEFAULT) else given)


def run(args: argparse.Namespace) -> int:
    from convmatrix.history import backends, timeline  # SQLAlchemy: start-up time (see url())

    if args.limit < 1:
        raise BadInput(f"--limit {args.limit}: must be 1 or more")
    if args.case and not args.cell:
        raise BadInput("a CASE needs its CELL")
    if args.format == "html" or args.out or args.link:
        return page(args)
    chosen = url(args.history)
    with backends.opened(chosen, write=False) as engine, engine.begin() as conn:
        cell = resolve(args.cell, timeline.cell_ids(conn)) if args.cell else None
        entries = (timeline.of_cell(conn, cell, args.case, args.limit) if cell
                   else timeline.runs(conn, args.limit))
    if args.format == "json":
        print(json.dumps({"history": backends.shown(chosen), "cell": cell, "case": args.case,
                          "entries": [e.json() for e in entries]}, indent=1))
        return 0
    for line in text_lines(entries, bool(args.cell), args.case):
        print(one_line(line))
    return 0


def page(args: argparse.Namespace) -> int:
    """--format html: the history page (report/history_page.py) as DIR/index.html."""
    from pathlib import Path

    from convmatrix.cli.output import write_output  # cli.output imports results: start-up time
    from convmatrix.history import backends, timeline  # SQLAlchemy: start-up time (see url())
    from convmatrix.report import history_page  # the page's view, only for --format html

    if args.format != "html":
        raise BadInput("-o and --link are for --format html (the history page)")
    if args.cell:
        raise BadInput("--format html draws every recorded cell: give no CELL (its runs: --format text or json)")
    if not args.out:
        raise BadInput("--format html needs -o DIR: the page is written as DIR/index.html")
    link = history_page.check_link(args.link) if args.link else None
    chosen = url(args.history)
    with backends.opened(chosen, write=False) as engine, engine.begin() as conn:
        sheet = timeline.sheet(conn, args.limit)
    text = history_page.render(sheet, link=link, source=backends.shown(chosen))
    out = Path(args.out) / "index.html"
    write_output(text, out)  # whole or not at all, as the report's -o
    print(out)
    return 0


def resolve(given: str, known: Sequence[str]) -> str:
    """The recorded cell id that `given` names: itself, or the short id the report prints
    (matrix.cells.abbreviate); unknown, or short for several: one line with the closest, exit 2."""
    if given in known:
        return given
    short = [cell for cell in known if abbreviate(cell) == given]
    if len(short) == 1:
        return short[0]
    if short:
        raise BadInput(f"cell {one_line(given)!r} is short for {len(short)} recorded cells: "
                       f"{', '.join(sorted(short)[:5])}; give the full id")
    names = {abbreviate(cell): cell for cell in known} | {cell: cell for cell in known}
    close = [names[n] for n in difflib.get_close_matches(given, list(names), n=3, cutoff=0.5)]
    hint = f"; the closest: {', '.join(dict.fromkeys(close))}" if close else (
        "; nothing is recorded" if not known else f"; {len(known)} recorded, e.g. {', '.join(sorted(known)[:3])}")
    raise BadInput(f"no recorded cell {one_line(given)[:200]!r} in the history{hint}")


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
        unjudged = f" (not judged: {e.unjudged})" if e.unjudged else ""
        older = " (recorded before schema 2: red as judged then)" if e.version < 2 else ""
        out.append(f"{e.date[:19]} {e.run}: {where} {e.verdict}{family}{unjudged} [{e.stack}]{older}")
    return out
