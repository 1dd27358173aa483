"""Issue 46, "Logs are opened by path after a check": a cell's log.txt is triaged through one
descriptor (never by its path: not by this process, not by rg or grep), and no more than
rundir.MAX_LOG bytes of it are read; past them the cause says the log was cut. `report` of a cell
without first_cause.json scanned an 8 GiB sparse log whole (2 min 15 s)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from convmatrix import results
from convmatrix.cli import report
from convmatrix.results import rundir
from convmatrix.triage import scan
from strategies import bytes_read
from testkit import record, write_result

SIG = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
LOG = f"suites/test_conv.py::test_conv[a] FAILED\n[rank3]: {SIG}\n"
HUGE = 8 << 30  # the sparse log: no disk, 8 GiB of holes after LOG
BOUND = 8 << 20  # rundir.MAX_LOG in these tests
SLACK = 4 << 20  # results.jsonl, env.json, imports: everything else read
# The bytes of the log first_cause may read: the prefilter's copy (which the kernel counts twice:
# sendfile into a pipe is a read and a splice) and the lines around the hits, each within the bound.
READS = 3


def failing_cell(tmp_path: Path, size: int | None = None) -> Path:
    cell = write_result(tmp_path / "run", "c", [record("a", "failed", SIG)])
    (cell / rundir.LOG).write_text(LOG)
    if size is not None:
        os.truncate(cell / rundir.LOG, size)
    return cell


@pytest.mark.parametrize("prefilter", ["rg", "grep"])
def test_rg_and_grep_get_the_log_s_descriptor_never_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             prefilter: str) -> None:
    cell = failing_cell(tmp_path)
    if prefilter == "grep":
        monkeypatch.setattr(scan, "ripgrep", lambda: None)
    argvs: list[list[str]] = []
    real = subprocess.Popen

    def spy(cmd: list[str], *args: Any, **kwargs: Any) -> Any:
        argvs.append([str(a) for a in cmd])
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    cause = scan.first_cause(cell / rundir.LOG)
    assert cause is not None and (cause.family, cause.line, cause.rank) == ("cudnn_not_supported", 2, 3)
    assert argvs, "no prefilter ran"
    assert not [a for argv in argvs for a in argv if str(cell) in a or rundir.LOG in a], argvs


def test_report_of_a_cell_without_first_cause_json_reads_a_huge_sparse_log_within_the_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(rundir, "MAX_LOG", BOUND, raising=False)
    cell = failing_cell(tmp_path, HUGE)
    loaded = results.load([str(cell)])
    [result] = loaded.results
    assert result.failing and not result.cause_known
    start = bytes_read()
    found = report.with_first_cause(result)
    read = bytes_read() - start
    assert read <= READS * BOUND + SLACK, f"{read:,} bytes of an {HUGE:,}-byte log read"
    assert found.first_cause is not None and (found.first_cause.family, found.first_cause.line) == (
        "cudnn_not_supported", 2)
    err = capsys.readouterr().err
    assert f"{BOUND:,}" in err and f"{HUGE:,}" in err, err  # the cut is said, with what was read of what


@pytest.mark.parametrize("prefilter", ["1", "0"])
def test_a_log_past_the_bound_is_triaged_in_its_first_bytes_and_the_cause_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefilter: str) -> None:
    monkeypatch.setattr(rundir, "MAX_LOG", BOUND, raising=False)
    monkeypatch.setenv("CONVMATRIX_TRIAGE_GREP", prefilter)
    cell = failing_cell(tmp_path, 2 << 30)
    notes: list[str] = []
    start = bytes_read()
    cause = scan.first_cause(cell / rundir.LOG, notes)
    assert bytes_read() - start <= READS * BOUND + SLACK
    assert cause is not None and (cause.family, cause.line) == ("cudnn_not_supported", 2)
    assert len(notes) == 1 and f"first {BOUND:,} bytes" in notes[0] and f"{2 << 30:,}" in notes[0], notes


def test_a_cause_past_the_bound_is_not_found_and_the_note_says_why(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rundir, "MAX_LOG", 1 << 16, raising=False)
    cell = failing_cell(tmp_path)
    (cell / rundir.LOG).write_text("step 1 loss 0.5\n" * 10_000 + LOG)
    notes: list[str] = []
    assert scan.first_cause(cell / rundir.LOG, notes) is None
    assert len(notes) == 1 and "first 65,536 bytes" in notes[0], notes
