"""`convmatrix report`: results compared with the control, in one of the report's formats."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from convmatrix import results
from convmatrix.cli import history as history_cmd
from convmatrix.cli.output import write_output
from convmatrix.errors import BadInput
from convmatrix.matrix import values
from convmatrix.report import model as report_model
from convmatrix.report import nights, render, verdicts
from convmatrix.report.model import Report
from convmatrix.results import first_diff, night, rundir
from convmatrix.results.first_diff import Difference
from convmatrix.results.read import CellResult
from convmatrix.triage import scan


def add_parser(sub: Any) -> None:
    r = sub.add_parser("report", help="compare results with the control and report")
    r.add_argument("results", nargs="+", help="run directories or cell results directories")
    r.add_argument("--control", help="the control cell id (default: the cell the matrix marked)")
    r.add_argument("--baseline", nargs="+", default=[], help="earlier results to compare each case with")
    r.add_argument("--format", choices=render.FORMATS, default="text")
    r.add_argument("-o", "--output", type=Path, help="write the report here instead of stdout")
    r.add_argument("--fail-on", type=verdicts.fail_on, default="regression", metavar="POLICY[,POLICY...]",
                   help="what makes the exit 1: " + ", ".join(verdicts.FAIL_ON) + " (a comma-separated list: red "
                        "under any; first-red applies to the findings of the others listed)")
    r.add_argument("--expect-gpu", action="append", default=[], metavar="KEY[,KEY...]",
                   help="GPU keys the results must cover: a planned cell without a result on one is NOT RUN")
    r.add_argument("--history", metavar="URL", help="mark each failing case and cell against this history "
                   "database (first-red, recurring, recovered, flaky): " + history_cmd.URL_HELP)
    r.add_argument("--run-id", help="with --history: this run's key there (default: the run directory's name)")
    r.add_argument("--at", metavar="TIME", default=os.environ.get(night.AT_VARIABLE),
                   help="with --history: this run's time (ISO-8601; default $CONVMATRIX_RUN_AT, else when its "
                        "first plan was written): only runs recorded earlier are its past")
    r.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the text report (auto: on a terminal, unless NO_COLOR or CI is set)")


def made(paths: list[str], control: str | None, expect_gpu: list[str]) -> tuple[results.Loaded, Report]:
    """The results under paths, judged: what `report` renders and `record` stores."""
    loaded = results.load(paths, expect_gpus=values.gpu_keys("--expect-gpu", expect_gpu))
    if not loaded.results:
        raise BadInput("\n".join(loaded.errors) or "no results to report")
    loaded.results = [with_first_cause(r) for r in loaded.results]
    chosen = verdicts.control_id(loaded.results, control)
    return loaded, report_model.build(loaded.results, chosen, loaded.notes, differ=first_differences)


def run(args: argparse.Namespace) -> int:
    first_red = verdicts.first_red_policy(args.fail_on)
    if first_red and not args.history:
        raise BadInput("--fail-on first-red: needs a history database (--history URL, or --history default)")
    with bulk():
        loaded, report = made(args.results, args.control, args.expect_gpu)
        if args.history:
            report = against_history(report, loaded, args.history, args.run_id, args.at,
                                     verdicts.policy(args.fail_on))
        # Every format marks red what the exit code counts (`never` changes only the exit).
        report = replace(report, policy=verdicts.policy(args.fail_on))
        errors = list(loaded.errors)
        if args.baseline:
            baseline = results.load(args.baseline)
            errors += [f"--baseline: {e}" for e in baseline.errors]
            report = report_model.with_baseline(report, baseline)
        color = color_wanted(args.color, args.output is None and sys.stdout.isatty(), os.environ)
        write_output(render.stream(report, args.format, color=color), args.output)
    if errors:
        raise BadInput("\n".join(errors))
    # first-red: the control's health still decides (exit 3); then only what went red tonight.
    if first_red:
        verdicts.judge(report, args.fail_on, nights.first_red(report), nights.summary(report))
    else:
        verdicts.judge(report, args.fail_on)
    return 0


def against_history(report: Report, loaded: results.Loaded, given: str, run_id: str | None,
                    at: str | None = None, policy: str = "regression") -> Report:
    """Each cell and case marked against the history database (history/lookup.py): against the
    runs recorded before this one's time, whatever was recorded after it; red under policy, the
    --fail-on list's (first-red then applies to its findings)."""
    from convmatrix.history import backends, lookup  # SQLAlchemy only with --history: start-up time

    judged = identified(report, loaded, run_id, at)
    with backends.opened(history_cmd.url(given), write=False) as engine, engine.begin() as conn:
        marks = lookup.marks(conn, judged, policy)
    return report_model.with_history(report, marks)


HISTORY_REFUSES = ("is kept out of the history: its cells ran their library audit alone; report it without "
                   "--history, record only full runs")
AUDIT_ONLY_REFUSED = f"{night.AUDIT_ONLY_RUN} {HISTORY_REFUSES}"


def identified(report: Report, loaded: results.Loaded, run_id: str | None, at: str | None) -> night.Night:
    """The report's judged night with its key and its shared time (results/night.py). A night of
    the library audit alone (`run --audit-only`) is none of the history's: refused here, so that
    neither `record` nor `report --history` reads its one case as the cell's night."""
    assert report.judged is not None
    night.refuse_audit_only(report.judged, HISTORY_REFUSES)
    return replace(report.judged, run=night.run_key(loaded, run_id), at=night.shared_time(loaded, at))


def with_first_cause(result: CellResult) -> CellResult:
    """A failing cell's first cause, worked out once here from its log.txt when its directory has
    no first_cause.json (older than the file, or copied from elsewhere): the report reads causes,
    it does not scan logs, and nothing it showed before is lost. The log is read through one open
    file, no further than its bound (scan.first_cause); a log cut there is said on stderr, one line."""
    if result.cause_known or not result.failing:
        return result
    notes: list[str] = []
    cause = scan.first_cause(result.path / rundir.LOG, notes)
    for note in notes:
        print(f"convmatrix report: {note}", file=sys.stderr)
    return replace(result, first_cause=cause, cause_known=True)


def first_differences(result: CellResult, control: CellResult, cases: list[str]) -> dict[str, Difference]:
    """The first line of each failing case's log section that the control's section lacks."""
    return first_diff.first_differences(result.path / rundir.LOG, control.path / rundir.LOG, cases)


def color_wanted(choice: str, terminal: bool, env: Mapping[str, str]) -> bool:
    """--color: always, never, or auto: on a terminal, unless NO_COLOR (no-color.org) or CI is
    set, since a CI log viewer or a pipe shows escape sequences as litter."""
    if choice != "auto":
        return choice == "always"
    return terminal and not env.get("NO_COLOR") and not env.get("CI")


@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """The cyclic garbage collector off while a report is made: a fleet's results are 200,000
    case objects and as many rows, none of them in a cycle, and each collection would walk
    them all again (a third of the time of a 1,000-cell report). Frozen before it is back on:
    whatever was made meanwhile sits in the youngest generation, and the first collection would
    walk it all once more (0.1 s); refcounting still frees them."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.freeze()
            gc.enable()
