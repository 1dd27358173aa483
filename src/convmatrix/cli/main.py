"""The convmatrix command: matrix, cases, stacks, build, report, record, history, run, triage, gc,
repro, export, slurm, k8s, prove, bisect and explore (docs/contracts.md; README.md). Each subcommand is a
module of this package with an `add_parser` and a `run`; this one parses and dispatches, and turns
errors into exit codes."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType

from convmatrix import __version__, interrupts
from convmatrix.errors import ConvmatrixError, InfrastructureError
from convmatrix.escape import one_line

# Each subcommand and the module of this package that adds its parser and runs it, in the order
# `convmatrix --help` lists them. A module is imported only when its command is parsed or run:
# importing all of them (the atlas, the run lanes, the bundle reader ...) took 0.35 s of every
# command's start, about what `triage` spends reading a 1 GB log and a fifth of `report`'s
# 1,000-cell merge (issue 49: bench/run.py's triage_vs_grep and report_merge_s).
MODULES = {
    "matrix": "matrix", "cases": "cases", "stacks": "stacks", "build": "build", "report": "report",
    "record": "record", "history": "history", "run": "run", "triage": "triage", "gc": "gc", "repro": "repro",
    "export": "export", "atlas": "atlas", "slurm": "fleet", "k8s": "fleet", "prove": "prove", "bisect": "bisect",
    "explore": "explore",
}


def module(name: str) -> ModuleType:
    """The module of this package that holds the subcommand `name`."""
    return importlib.import_module(f"convmatrix.cli.{MODULES[name]}")


class Commands(dict[str, Callable[[argparse.Namespace], int]]):
    """Each subcommand's `run`, looked up (its module imported) on first use; a test may set one."""

    def __missing__(self, name: str) -> Callable[[argparse.Namespace], int]:
        found = module(name)
        runner: Callable[[argparse.Namespace], int] = found.FLEET_COMMANDS[name] if MODULES[name] == "fleet" \
            else found.run
        self[name] = runner
        return runner


COMMANDS = Commands()


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser. With `only` (a subcommand), only that subcommand's module adds
    its parser; every other name is an empty placeholder, so the usage and errors read as the full
    parser's do (a test holds them equal) without importing each module."""
    top = argparse.ArgumentParser(prog="convmatrix", description=__doc__.split("\n\n")[0])
    top.add_argument("--version", action=VersionAction,
                     help="print the version, the suite's folder and its suite_version, and exit")
    sub = top.add_subparsers(dest="command", required=True)
    for name in dict.fromkeys(MODULES.values()):
        names = [command for command, owner in MODULES.items() if owner == name]
        if only is not None and only not in names:
            for command in names:
                sub.add_parser(command)
        elif name == "fleet":
            module("slurm").add_fleet_parsers(sub)
        else:
            module(names[0]).add_parser(sub)
    return top


def version() -> str:
    """What `convmatrix --version` prints: the harness's version and the suite it runs (the
    checkout's suites/, or the copy the wheel carries: rundir.SUITE_DIR) with its suite_version."""
    from convmatrix.results import rundir  # only for --version: start-up time (see MODULES)

    suite = rundir.SUITE_DIR
    return f"convmatrix {__version__}\nsuite {suite} (suite_version {rundir.records.suite_version(str(suite))})"


class VersionAction(argparse.Action):
    """--version, with the suite's digest taken only when asked for (argparse's own takes a string
    made with the parser)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=str(kwargs.get("help")))

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(version())
        parser.exit()


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; `run` hands what it does not know, and all after `--`, to the run options."""
    argv = list(argv)
    # The command named first (the usual case) needs only its own module's parser; anything else
    # (--help, --version, a mistyped command) gets them all.
    only = argv[0] if argv and argv[0] in MODULES else None
    if argv[:1] != ["run"]:
        return parser(only).parse_args(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, rest = parser(only).parse_known_args(argv[:cut])
    args.run_options = [*rest, *argv[cut:]]
    return args


# The commands that only read and write files: SIGTERM and Ctrl-C end them through Interrupted,
# so that a half-written -o is removed and one line says so (`run` handles its own).
READERS = ("report", "triage", "prove", "matrix", "cases", "stacks", "repro", "history", "record", "export",
           "atlas")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        # Signal handlers can be set in the main thread only (an embedding program may call us
        # from another: then the signals stay its own).
        if args.command in READERS and threading.current_thread() is threading.main_thread():
            with interrupts.interruptible():
                code: int = COMMANDS[args.command](args)
        else:
            code = COMMANDS[args.command](args)
        return code
    except ConvmatrixError as exc:
        for line in exc.lines():
            say_err(line)
        return exc.exit_code
    except interrupts.Interrupted as exc:
        say_err(exc.line())
        return exc.exit_code
    except KeyboardInterrupt:
        say_err("interrupted (SIGINT)")
        return 130
    except BrokenPipeError:
        # The reader went away (`convmatrix triage LOG | head -1`): what it wanted it has; say nothing.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        # The machine, not the input: a full disk, a directory removed under us. One line, exit 4.
        say_err(f"{str(exc.filename) + ': ' if exc.filename else ''}{exc.strerror or exc}")
        return InfrastructureError.exit_code


def say_err(line: str) -> None:
    """One line on stderr, which may be gone (nox, killed with us, read our output)."""
    with contextlib.suppress(OSError, ValueError):
        # A cell id, a directory name or a message from a run may hold anything: no escape sequence
        # reaches the terminal (escape.one_line, as the text report does).
        print(f"convmatrix: {one_line(line)}", file=sys.stderr, flush=True)
