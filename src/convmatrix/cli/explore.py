"""The ``convmatrix explore`` subcommand: draw convolution configurations around what is known to
be fragile, run them on a candidate cell against the matrix's control, shrink each failure to a
minimal case file, and say where the failures lie (explore/, docs/explore.md)."""

from __future__ import annotations

import argparse
import datetime
import random
import sys
from pathlib import Path
from typing import Any

from convmatrix import gpus, interrupts, matrix, results
from convmatrix.cli import history as history_cmd
from convmatrix.errors import BadInput, NotGreen
from convmatrix.escape import one_line
from convmatrix.explore import finds, lane, search
from convmatrix.prove import minimal
from convmatrix.results import night, rundir


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "explore", help="search for conv configurations that fail on a cell and not on the control",
        description="Draws configurations (seeded), runs them as ordinary cases on --cell and the matrix's "
                    "control, shrinks each failure to a minimal case file in --out/finds/, and prints where the "
                    "failures lie. Exit 0 nothing found, 1 something found, 2 bad input, 4 a batch could not "
                    "run. Suite options after -- (plugins included); explore selects its own cases with -k.")
    p.add_argument("-m", "--matrix", default=None, help="matrix file (default as for `matrix`)")
    p.add_argument("--cell", required=True, metavar="CELL",
                   help="the candidate cell (the matrix's control is the other)")
    p.add_argument("--budget", type=positive, default=200, metavar="N", help="configurations to draw (default 200)")
    p.add_argument("--minutes", type=minutes, default=None, metavar="M",
                   help="stop drawing after M minutes of wall time")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="the draw's seed (default: a new one, printed; the same seed draws the same configurations)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="batches, finds and the tried log (a later run with the same DIR never draws them again)")
    p.add_argument("--allow-cpu", action="store_true", help="run CUDA stacks on a runner without a GPU (as `run`)")
    p.add_argument("--history", metavar="URL", default=None,
                   help="also keep what was tried in the history database and never draw it again for this cell: "
                        + history_cmd.URL_HELP)
    p.add_argument("suite_args", nargs="*", metavar="SUITE OPTION", help="after --: the suite's options")


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def minutes(text: str) -> float:
    """A wall-time bound: a finite number above 0 (`nan`, `inf`, 0 and below are argparse's bad value, exit 2)."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise ValueError(text)
    return value


def run(args: argparse.Namespace) -> int:
    loaded = matrix.load(args.matrix or matrix.default_matrix())
    if loaded.control is None:
        raise BadInput(f"{loaded.path}: [control]: explore compares with the control; this matrix names none")
    cell = loaded.cell(args.cell)
    if cell.id == loaded.control.id:
        raise BadInput(f"--cell {cell.id}: that is the control; name the candidate")
    if any(a == "-k" or a.startswith("-k") for a in args.suite_args):
        raise BadInput("suite options: -k: explore selects its own cases (each batch's); leave -k out")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    out: Path = args.out
    rundir.make_dirs(out, out.parent)
    before, keys = finds.read_tried(out)
    if args.history:
        keys |= stored_keys(args.history, cell.id)
    runner = lane.SuiteLane(matrix=loaded.path, cell=cell.id, control=loaded.control.id, out=out,
                            suite_args=tuple(args.suite_args), allow_cpu=args.allow_cpu)

    def said(done: search.Exploration) -> None:
        found = ", ".join(f"{f} after {n}" for f, n in done.found_after.items()) or "nothing yet"
        print(one_line(f"explore: {len(done.tried)}/{args.budget} tried ({found})"), file=sys.stderr, flush=True)

    print(f"explore: {cell.id} against {loaded.control.id}, seed {seed}, budget {args.budget}"
          + (f", {len(keys)} tried before" if keys else ""), file=sys.stderr, flush=True)
    with interrupts.interruptible():
        done = search.explore(runner, seed=seed, budget=args.budget, minutes=args.minutes, before=keys, on_batch=said,
                              cuda=bool(gpus.discover()))
    finds.write_tried(out, before, done.tried, seed)
    if args.history:
        store(args.history, cell.id, done, seed)
    stacks = observed_stacks(runner)
    written = []
    for found in done.shrunk:
        data = finds.case_file(found, seed=seed, cell=cell.id, control=loaded.control.id, stacks=stacks,
                               found_after=done.found_after[found.family])
        script = repro_of(runner, found) if found.family not in lane.COST_NAMES else None
        written.append((found, finds.write_find(out, found, data, script)))
    for line in finds.summary(done.regions, written, tried=len(done.tried), skipped=done.skipped,
                              batches=runner.batches, stopped=done.stopped, seed=seed):
        print(one_line(line), flush=True)
    if written:
        raise NotGreen(f"explore: {len(written)} finding(s) on {cell.id}: {', '.join(f.family for f, _ in written)}")
    return 0


def stored_keys(given: str, cell: str) -> set[str]:
    from convmatrix.explore import tried  # SQLAlchemy only with --history: start-up time

    return tried.keys_at(history_cmd.url(given), cell)


def store(given: str, cell: str, done: search.Exploration, seed: int) -> None:
    from convmatrix.explore import tried  # SQLAlchemy only with --history: start-up time

    tried.store_at(history_cmd.url(given), cell, done.tried, seed, datetime.datetime.now(datetime.UTC))


def observed_stacks(runner: lane.SuiteLane) -> dict[str, str]:
    """Each cell's stack as its last batch observed it (torch, CUDA, cuDNN): the finds' provenance."""
    if runner.last_run is None:
        return {}
    made = {}
    for result in results.load([str(runner.last_run)]).results:
        seen = result.observed or {}
        made[result.cell] = " ".join(f"{k} {seen.get(k)}" for k in ("torch", "cuda", "cudnn") if seen.get(k))
    return made


def repro_of(runner: lane.SuiteLane, found: Any) -> str | None:
    """The minimal repro script of the find, from a run of it alone (its confirming batch)."""
    got = runner.judge([found.config])
    if got != [found.family] or runner.last_run is None:
        return None  # it did not fail alone again: a flaky find; the case file still stands
    loaded = results.load([str(runner.last_run)])
    judged = night.judge(loaded.results, runner.control)
    for judged_cell in judged.cells:
        if judged_cell.cell == runner.cell:
            for case in judged_cell.cases:
                if case.case.endswith("-c0000"):
                    try:
                        return minimal.minimal(runner.last_run, judged_cell.result.path.name, case.case)
                    except Exception:  # a repro is a help, not the finding: the case file stands without it
                        return None
    return None
