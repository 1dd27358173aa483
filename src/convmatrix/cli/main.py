"""The convmatrix command: matrix, build, report, run, triage, slurm, k8s and prove
(docs/contracts.md; README.md). Each subcommand is a module of this package with an
`add_parser` and a `run`; this one parses and dispatches, and turns errors into exit codes."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Sequence

from convmatrix import interrupts
from convmatrix.cli import build, fleet, prove, report, triage
from convmatrix.cli import matrix as matrix_cmd
from convmatrix.cli import run as run_cmd
from convmatrix.errors import ConvmatrixError
from convmatrix.escape import one_line

# In the order `convmatrix --help` lists them.
SUBCOMMANDS = (matrix_cmd, build, report, run_cmd, triage)
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "matrix": matrix_cmd.run, "build": build.run, "report": report.run, "run": run_cmd.run,
    "triage": triage.run, "prove": prove.run, **fleet.FLEET_COMMANDS,
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="convmatrix", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    fleet.add_fleet_parsers(sub)
    prove.add_parser(sub)
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
        # A cell id, a directory name or a message from a run may hold anything: no escape sequence
        # reaches the terminal (escape.one_line, as the text report does).
        print(f"convmatrix: {one_line(line)}", file=sys.stderr, flush=True)
