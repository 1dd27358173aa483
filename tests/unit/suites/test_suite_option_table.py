"""The suite's options as one table (suites/options.py): what the suite adds to pytest, and what
the harness checks a run's suite options by before any cell runs."""

from __future__ import annotations

import pytest

from testkit import load_suite_module

options = load_suite_module("options")


@pytest.mark.parametrize("args", [
    [], ["-k", "conv1d and fp16", "-x", "-p", "convmatrix_faults"], ["--cudnn-benchmark", "on", "--pad-channels=8"],
    ["--device", "cpu", "--case-timeout", "30", "--in-process", "--continue-run"], ["--durations", "5"],
    ["--maxfail=2", "-n", "2", "--isolate", "--gpu-per-worker", "off"], ["--", "--cudnn-benchmark", "on"],
])
def test_good_suite_options_and_pytests_own_pass(args: list[str]) -> None:
    assert options.problems(args) == []


@pytest.mark.parametrize(("args", "says"), [
    (["--cudnn-benchmarkk", "on"], "did you mean --cudnn-benchmark?"),
    (["--channel-last", "on"], "did you mean --channels-last?"),
    (["--cudnn-deterministic=maybe"], "expected one of on, off"),
    (["--pad-channels", "8.5"], "expected a whole number"),
    (["--case-timeout", "1e999"], "expected seconds"),
    (["--case-timeout", "-1"], "expected seconds"),
    (["--in-process=yes"], "takes no value"),
    (["--device"], "needs a value"),
])
def test_bad_suite_options_are_named(args: list[str], says: str) -> None:
    (problem,) = options.problems(args)
    assert problem.startswith(args[0].split("=")[0]) and says in problem


def test_every_option_belongs_to_a_group_pytest_is_given() -> None:
    added: list[tuple[str, dict[str, object]]] = []

    class Group:
        def addoption(self, name: str, **kwargs: object) -> None:
            added.append((name, kwargs))

    for which in ("suite", "isolation"):
        options.addoptions(Group(), which)
    assert [name for name, _ in added] == [o.name for o in options.OPTIONS]
    kinds = dict(added)
    assert kinds["--isolate"]["action"] == "store_true" and kinds["--pad-channels"]["type"] is int
    assert kinds["--cudnn-benchmark"]["choices"] == ("on", "off")
