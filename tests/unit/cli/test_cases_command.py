"""`convmatrix cases` (cli/cases.py): case files listed as the suite runs them, and a failed job's
log made into one (`--from-log`, triage/snippets.py)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from convmatrix.cli.main import main
from testkit import REPO

# Quoted from https://github.com/liuxz1011/TodyNet/issues/12 (the snippet as the report shows it).
TODYNET = REPO / "tests" / "data" / "logs" / "snippets" / "todynet12.log"


def test_the_command_writes_a_case_file_that_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "prod.toml"
    assert main(["cases", "--from-log", str(TODYNET), "-o", str(out)]) == 0
    assert "1 case(s) captured" in capsys.readouterr().err
    assert main(["cases", str(out)]) == 0
    assert "prod-conv2d-fp32-k1x3-p0x1-bwd-bench_on-todynet12_conv2d_1" in capsys.readouterr().out


def test_the_command_on_a_log_without_snippets_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log"
    log.write_text("RuntimeError: FIND was unable to find an engine to execute this computation\n")
    assert main(["cases", "--from-log", str(log)]) == 2
    err = capsys.readouterr().err
    assert "traceback only" in err and "no repro snippet to capture" in err


def test_files_and_from_log_together_are_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cases", str(TODYNET), "--from-log", str(TODYNET)]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["cases"]) == 2
    assert "name case files" in capsys.readouterr().err


# Issue 32, item 7: the file is written in the format its name says, as the suite reads it.
def test_a_json_output_is_json_and_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cap.json"
    assert main(["cases", "--from-log", str(TODYNET), "-o", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))  # TOML here was the old bug: not JSON at all
    assert len(data["case"]) == 1 and "Captured by `convmatrix cases --from-log`" in data["description"]
    capsys.readouterr()
    assert main(["cases", str(out)]) == 0
    assert "cap-conv2d-fp32-k1x3-p0x1-bwd-bench_on-todynet12_conv2d_1" in capsys.readouterr().out


def test_a_toml_output_is_toml(tmp_path: Path) -> None:
    out = tmp_path / "cap.toml"
    assert main(["cases", "--from-log", str(TODYNET), "-o", str(out)]) == 0
    assert len(tomllib.loads(out.read_text(encoding="utf-8"))["case"]) == 1


@pytest.mark.parametrize("name", ["cap.txt", "cap", "cap.TOML", "cap.yaml"])
def test_an_output_of_no_case_file_format_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      name: str) -> None:
    assert main(["cases", "--from-log", str(TODYNET), "-o", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "a case file is named .toml (TOML) or .json (JSON)" in err
    assert not (tmp_path / name).exists()
