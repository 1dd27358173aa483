"""cli/explore.py's options with hostile values: each is argparse's bad value (exit 2, one line
naming the option), never a search that stops at once or never stops (issue 51)."""

from __future__ import annotations

import pytest

from convmatrix.cli.main import parser


@pytest.mark.parametrize(("option", "value"), [
    ("--budget", "0"), ("--budget", "-5"), ("--budget", "1e3"), ("--budget", "x"),
    ("--minutes", "0"), ("--minutes", "-1"), ("--minutes", "nan"), ("--minutes", "inf"), ("--minutes", "x"),
    ("--seed", "1.5"), ("--seed", "x"),
])
def test_a_hostile_option_value_is_bad_input(option: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parser().parse_args(["explore", "--cell", "c", "--out", "o", option, value])
    assert caught.value.code == 2
    assert option in capsys.readouterr().err


def test_good_values_are_taken() -> None:
    args = parser().parse_args(["explore", "--cell", "c", "--out", "o", "--budget", "7", "--minutes", "0.5",
                                "--seed", "-3"])
    assert (args.budget, args.minutes, args.seed) == (7, 0.5, -3)
