"""cli/main.py imports a subcommand's module only when that command is parsed or run (issue 49:
importing all of them was 0.35 s of every command's start): the parser it builds for one command
reads as the full one does, and a command does not import the others."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from convmatrix.cli import main as cli
from testkit import REPO


def subparser(top: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = action.choices[name]
    return found


@pytest.mark.parametrize("name", list(cli.MODULES))
def test_one_commands_parser_reads_as_the_full_one(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    full, one = cli.parser(), cli.parser(name)
    assert one.format_usage() == full.format_usage()
    assert subparser(one, name).format_help() == subparser(full, name).format_help()
    errors = []
    for top in (full, one):
        with pytest.raises(SystemExit) as exited:
            top.parse_args([name, "--no-such-option"])
        errors.append((exited.value.code, capsys.readouterr().err))
    assert errors[0] == errors[1]


def test_the_full_parser_lists_every_command_in_order() -> None:
    action = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(action.choices) == list(cli.MODULES)
    assert all(a.help for a in action._choices_actions)  # none of them a placeholder


def test_a_command_imports_its_own_module_only() -> None:
    # In a fresh interpreter: `triage` must not pay for the atlas, the run lanes or the report.
    code = ("import sys, json; from convmatrix.cli import main; main.parse(['triage', 'x.log']); "
            "main.COMMANDS['triage']; print(json.dumps(sorted(m for m in sys.modules if m.startswith('convmatrix'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(REPO / "src")}, cwd=REPO)
    loaded = set(json.loads(done.stdout))
    assert "convmatrix.cli.triage" in loaded
    assert not loaded & {"convmatrix.cli.atlas", "convmatrix.atlas.bundle", "convmatrix.cli.run",
                         "convmatrix.cli.report", "convmatrix.run.runner", "convmatrix.history.backends"}


def test_each_command_runs_through_its_modules_run() -> None:
    for name, owner in cli.MODULES.items():
        found = cli.module(name)
        assert cli.COMMANDS[name] is (found.FLEET_COMMANDS[name] if owner == "fleet" else found.run)
