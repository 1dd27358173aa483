"""The convmatrix command: matrix, build, report, triage and prove (docs/contracts.md; README.md)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from convmatrix import interrupts, matrix, results
from convmatrix.cli import prove as prove_cli
from convmatrix.cli import triage as triage_cli
from convmatrix.cli.fleet import FLEET_COMMANDS, add_fleet_parsers  # slurm, k8s
from convmatrix.errors import BadInput, ConvmatrixError
from convmatrix.report import model as report_model
from convmatrix.report import render, verdicts
from convmatrix.results import rundir
from convmatrix.run import options
from convmatrix.run.lanes import LANES

DEFAULT_MATRIX = "matrix/default.toml"


def default_matrix() -> str:
    return os.environ.get("CONVMATRIX_MATRIX") or DEFAULT_MATRIX


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="convmatrix", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    m = sub.add_parser("matrix", help="the expanded cells, and what was pruned and why")
    m.add_argument(
        "-m", "--matrix", default=None, help=f"matrix file (default: $CONVMATRIX_MATRIX or {DEFAULT_MATRIX})"
    )
    m.add_argument("--format", choices=("table", "json"), default="table")
    b = sub.add_parser("build", help="build the images the matrix's container cells need")
    b.add_argument("-m", "--matrix", default=None, help="matrix file (default as for `matrix`)")
    b.add_argument("--cell", action="append", default=[], metavar="GLOB", help="only cells whose id matches")
    b.add_argument("--dry-run", action="store_true", help="say what would be built and why; build nothing")
    b.add_argument("--wheelhouse", type=Path, help="install from these wheels only (overrides the matrix)")
    r = sub.add_parser("report", help="compare results with the control and report")
    r.add_argument("results", nargs="+", help="run directories or cell results directories")
    r.add_argument("--control", help="the control cell id (default: the cell the matrix marked)")
    r.add_argument("--baseline", nargs="+", default=[], help="earlier results to compare each case with")
    r.add_argument("--format", choices=render.FORMATS, default="text")
    r.add_argument("-o", "--output", type=Path, help="write the report here instead of stdout")
    r.add_argument("--fail-on", choices=verdicts.FAIL_ON, default="regression")
    r.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the text report (auto: on a terminal, unless NO_COLOR or CI is set)")
    ru = sub.add_parser(
        "run", help="run the suite for the matrix's cells on this machine, into a run directory",
        description="Run options: --out DIR, --shard I/N, --resume, --gpus 0,1, --every-gpu, "
                    "--rerun-blocking, --jobs N, --prepare-ahead N, --prepare-disk GB, --reuse-results; "
                    "suite options after --.")
    ru.add_argument("-m", "--matrix", default=None, help="matrix file (default as for `matrix`)")
    ru.add_argument("--lane", action="append", default=[], choices=sorted(LANES), help="only these lanes")
    ru.add_argument("--cell", action="append", default=[], metavar="ID", help="only these cells")
    ru.add_argument("--strict", action="store_true",
                    help="a cell that cannot run here is recorded (INVALID) and fails the run")
    triage_cli.add_parser(sub)
    add_fleet_parsers(sub)
    prove_cli.add_parser(sub)
    return top


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; `run` hands what it does not know, and all after `--`, to the run options."""
    argv = list(argv)
    if argv[:1] != ["run"]:
        return parser().parse_args(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, rest = parser().parse_known_args(argv[:cut])
    args.run_options = [*rest, *argv[cut:]]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        code: int = COMMANDS[args.command](args)
        return code
    except ConvmatrixError as exc:
        for line in exc.lines():
            say_err(line)
        return exc.exit_code
    except interrupts.Interrupted as exc:
        say_err(exc.line())
        return exc.exit_code


def say_err(line: str) -> None:
    """One line on stderr, which may be gone (nox, killed with us, read our output)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"convmatrix: {line}", file=sys.stderr, flush=True)


def cmd_matrix(args: argparse.Namespace) -> int:
    loaded = matrix.load(args.matrix or default_matrix())
    print(render_matrix(loaded, args.format), end="")
    return 0


def render_matrix(m: matrix.Matrix, fmt: str) -> str:
    from tabulate import tabulate

    cells = [
        {"id": c.id, **c.values(), "expected_cudnn": c.expected_cudnn(), "control": c == m.control} for c in m.cells
    ]
    pruned = [{**p.values, "reason": p.reason} for p in m.pruned]
    if fmt == "json":
        return json.dumps({"name": m.name, "path": str(m.path), "cells": cells, "pruned": pruned}, indent=2) + "\n"
    rows = [
        [
            f"{c['id']} (control)" if c["control"] else c["id"],
            c["lane"],
            c["torch"],
            c["cuda"],
            c["cudnn"] if c["cudnn"] != "bundled" else f"bundled {c['expected_cudnn']}".strip(),
            c["python"],
            c["base"],
        ]
        for c in cells
    ]
    out = [f"{m.path}: {m.name}: {len(cells)} cells, {len(pruned)} pruned", ""]
    out.append(
        tabulate(
            rows,
            headers=["cell", "lane", "torch", "cuda", "cudnn", "python", "base"],
            tablefmt="simple",
            disable_numparse=True,
        )
    )
    if pruned:
        prows = [[p["lane"], p["torch"], p["cuda"], p["cudnn"], p["python"], p["reason"]] for p in pruned]
        out += [
            "",
            "pruned:",
            tabulate(
                prows,
                headers=["lane", "torch", "cuda", "cudnn", "python", "why"],
                tablefmt="simple",
                disable_numparse=True,
            ),
        ]
    return "\n".join(out) + "\n"


def cmd_run(args: argparse.Namespace) -> int:
    loaded = matrix.load(args.matrix or default_matrix())
    opts = options.parse(args.run_options)
    cells = [c for c in loaded.cells if (not args.lane or c.lane in args.lane) and (not args.cell or c.id in args.cell)]
    unknown = sorted(set(args.cell) - {c.id for c in loaded.cells})
    if unknown:
        raise BadInput(f"{loaded.path}: no cell {unknown[0]} (`convmatrix matrix` lists them)")
    # SIGTERM or SIGINT (CI cancelling, nox interrupted) ends the run promptly: the suite and
    # its container are stopped, the cut-short run recorded as such, and one line says where.
    from convmatrix.run import orchestrate  # here: the other commands (triage on a 1 GB log) start without it

    with interrupts.interruptible():
        interrupts.die_with_parent()
        orchestrate.run(loaded, cells, opts, say, strict=args.strict)
    return 0


def say(line: str) -> None:
    print(line, flush=True)


def cmd_build(args: argparse.Namespace) -> int:
    from convmatrix.run.lanes import container  # needs the docker SDK; the other commands do not

    container.build_all(matrix.load(args.matrix or default_matrix()), args.cell, dry_run=args.dry_run,
                        wheelhouse=args.wheelhouse.resolve() if args.wheelhouse else None)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    with bulk():
        loaded = results.load(args.results)
        if not loaded.results:
            raise BadInput("\n".join(loaded.errors) or "no results to report")
        control = verdicts.control_id(loaded.results, args.control)
        report = report_model.build(loaded.results, control, loaded.notes)
        errors = list(loaded.errors)
        if args.baseline:
            baseline = results.load(args.baseline)
            errors += [f"--baseline: {e}" for e in baseline.errors]
            report = report_model.with_baseline(report, baseline)
        color = color_wanted(args.color, args.output is None and sys.stdout.isatty(), os.environ)
        write_output(render.stream(report, args.format, color=color), args.output)
    if errors:
        raise BadInput("\n".join(errors))
    verdicts.judge(report, args.fail_on)
    return 0


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


def write_output(text: str | Iterator[str], output: Path | None) -> None:
    """The report on stdout, or in -o's file, written whole or not at all (rundir.write_whole):
    a reader never sees half a report, and a failed write leaves the previous one."""
    parts = (text,) if isinstance(text, str) else text
    if output is None:
        sys.stdout.writelines(parts)
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        rundir.write_whole(output, parts)
    except OSError as exc:
        raise BadInput(f"-o {output}: cannot write the report ({exc.strerror or exc})") from None


COMMANDS = {"matrix": cmd_matrix, "build": cmd_build, "report": cmd_report, "run": cmd_run, "triage": triage_cli.run,
            "prove": prove_cli.run, **FLEET_COMMANDS}
