"""`convmatrix record RUN...`: a run, judged as `report` judges it, into the history database
(history/record.py): one transaction, the same run twice adds nothing."""

from __future__ import annotations

import argparse
import os
from typing import Any

from convmatrix.cli import history as history_cmd
from convmatrix.cli import report as report_cmd
from convmatrix.errors import BadInput
from convmatrix.results import night


def add_parser(sub: Any) -> None:
    r = sub.add_parser("record", help="record a run's verdicts into the history database")
    r.add_argument("results", nargs="+", help="run directories or cell results directories (one run)")
    r.add_argument("--history", default=history_cmd.DEFAULT, metavar="URL", help=history_cmd.URL_HELP)
    r.add_argument("--run-id", help="the run's key in the history (default: the run directory's name)")
    r.add_argument("--control", help="the control cell id (default: the cell the matrix marked)")
    r.add_argument("--at", metavar="TIME", default=os.environ.get(night.AT_VARIABLE),
                   help="the run's time, shared by all its shards (ISO-8601; default $CONVMATRIX_RUN_AT, else "
                        "when the first of its plans was written)")
    r.add_argument("--expect-gpu", action="append", default=[], metavar="KEY[,KEY...]",
                   help="GPU keys the results must cover, as for `report`")


def run(args: argparse.Namespace) -> int:
    from convmatrix.history import backends, record  # SQLAlchemy: start-up time (cli/history.url)

    with report_cmd.bulk():
        loaded, report = report_cmd.made(args.results, args.control, args.expect_gpu)
        if loaded.errors:
            # Unreadable results are recorded nowhere: nothing half-known enters the history.
            raise BadInput("\n".join(loaded.errors))
        judged = report_cmd.identified(report, loaded, args.run_id, args.at)
        chosen = history_cmd.url(args.history)
        with backends.opened(chosen) as engine, engine.begin() as conn:
            done = record.record(conn, judged)
    already = f" ({done.present} already there)" if done.present else ""
    print(f"recorded run {done.run} into {backends.shown(chosen)}: {done.added} cells added{already}")
    return 0
