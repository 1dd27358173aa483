"""No escape sequence from a run reaches a terminal or a job summary raw (issue 21, item 7): the
cli's error lines, prove's text and triage's text pass through the per-format escaping the
report files use; prove's job summary is its escaped markdown, never text in a fence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convmatrix.cli.main import main
from testkit import REPO, record, write_result

RAW = ["\x1b]0;owned\x07", "\x1bc", "\x9b2J", "\x00", "\x08", "\x1b[2J"]
HOSTILE = "boom " + "".join(RAW) + " end"


def no_raw_controls(text: str) -> bool:
    return not any(ch in text for ch in ("\x1b", "\x9b", "\x00", "\x08", "\x07"))


def test_error_lines_carry_no_escape_sequences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = HOSTILE.replace("\x00", "")  # a file name cannot hold a NUL
    (tmp_path / f"run{name}").mkdir()
    assert main(["report", str(tmp_path / f"run{name}")]) == 2
    err = capsys.readouterr().err
    assert "no results here" in err and no_raw_controls(err)


def test_a_path_argument_with_a_nul_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", f"{tmp_path}/a\x00b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a path" in err and no_raw_controls(err)


def test_triage_text_carries_no_escape_sequences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log"
    log.write_text(f"step 1 {HOSTILE}\n[rank0]: RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED {HOSTILE}\n")
    assert main(["triage", str(log)]) == 0
    out = capsys.readouterr().out
    assert "cudnn_not_supported at line 2" in out and no_raw_controls(out)


def test_prove_text_carries_no_escape_sequences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sig = f"RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED {HOSTILE}"
    run = tmp_path / "run"
    for cell, failing in (("ctrl", False), ("cand", True)):
        write_result(run, cell, [record("a", "failed", sig) if failing else record("a")],
                     cell={"control": cell == "ctrl", "ended": "x", "gpu_key": f"cpu{HOSTILE}"})
    main(["prove", str(run), str(run)])
    captured = capsys.readouterr()
    assert no_raw_controls(captured.out) and no_raw_controls(captured.err)


def test_the_fix_proof_workflow_puts_escaped_markdown_in_the_summary_not_a_fence() -> None:
    workflow = (REPO / ".github" / "workflows" / "fix-proof.yml").read_text()
    assert "--format markdown -o proof.md" in workflow and "```" not in workflow
    assert json.dumps("```").strip('"') not in workflow
