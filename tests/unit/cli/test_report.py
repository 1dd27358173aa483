"""`convmatrix report` and a cell's first cause: read from first_cause.json, which the harness
writes when the cell finishes, and worked out from log.txt only for a directory without one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from convmatrix.cli.main import main
from testkit import env_json, record, write_result

SIGNATURE = ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
             "non-contiguous input.")
LOG = ["collected 2 items", "suites/test_conv.py::test_conv[a] PASSED", "suites/test_conv.py::test_conv[b] FAILED",
       "Traceback (most recent call last):", f"E   {SIGNATURE}", "1 failed, 1 passed"]


def a_run(tmp_path: Path) -> tuple[Path, Path]:
    """A control that passes both cases and a candidate whose case b hits the signature (log line 5)."""
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a"), record("b")], env=env_json("ctrl"), cell={"control": True, "ended": "x"})
    bad = write_result(run, "cand", [record("a"), record("b", "failed", SIGNATURE)], env=env_json("cand"),
                       cell={"ended": "x"})
    (bad / "log.txt").write_text("\n".join(LOG) + "\n")
    return run, bad


def cause_of(run: Path, tmp_path: Path, cell: str = "cand") -> object:
    out = tmp_path / "report.json"
    assert main(["report", str(run), "--format", "json", "-o", str(out), "--fail-on", "never"]) == 0
    (row,) = [c for c in json.loads(out.read_text())["cells"] if c["cell"] == cell]
    return row["first_cause"]


def test_a_stored_first_cause_is_read_and_no_log_is_scanned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, bad = a_run(tmp_path)
    (bad / "first_cause.json").write_text(json.dumps(
        {"schema": 1, "family": "cudnn_not_supported", "line": 7, "rank": 2, "fatal": True}))

    def no_scan(*_args: object, **_kwargs: object) -> object:
        raise AssertionError("the report scanned a log although the cell stored its first cause")

    monkeypatch.setattr("convmatrix.triage.scan.scan_path", no_scan)
    assert cause_of(run, tmp_path) == {"log": str(bad / "log.txt"), "family": "cudnn_not_supported", "line": 7,
                                       "rank": 2, "fatal": True}


def test_a_directory_without_first_cause_gets_it_from_its_log_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from convmatrix.triage import scan

    run, bad = a_run(tmp_path)
    scanned: list[str] = []
    real = scan.scan_open

    def counting(handle: Any, context: int = scan.DEFAULT_CONTEXT, *, name: str, limit: int) -> dict[str, object]:
        scanned.append(name)  # the log, read through its one open file (issue 46), never by path
        return real(handle, context, name=name, limit=limit)

    monkeypatch.setattr(scan, "scan_open", counting)
    cause = cause_of(run, tmp_path)
    assert cause == {"log": str(bad / "log.txt"), "family": "cudnn_not_supported", "line": 5, "rank": None,
                     "fatal": True}
    assert scanned == [str(bad / "log.txt")]  # the failing cell's log, once; never the control's


def test_a_stored_none_means_no_cause_and_no_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, bad = a_run(tmp_path)
    (bad / "first_cause.json").write_text(json.dumps(
        {"schema": 1, "family": None, "line": None, "rank": None, "fatal": False}))
    monkeypatch.setattr("convmatrix.triage.scan.scan_open", lambda *_a, **_k: pytest.fail("scanned"))
    assert cause_of(run, tmp_path) is None


@pytest.mark.parametrize(("content", "field"), [
    ({"schema": 1, "family": 5}, "'family'"),
    ({"schema": 1, "family": "cudnn_not_supported", "line": "7"}, "'line'"),
    ({"schema": 1, "family": "cudnn_not_supported", "line": 0}, "'line'"),
    ({"schema": 1, "family": "cudnn_not_supported", "fatal": "yes"}, "'fatal'"),
    ({"schema": 1}, "'family'"),
    ({"schema": 2, "family": None}, "schema 2"),
])
def test_a_malformed_first_cause_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: dict[str, object], field: str
) -> None:
    run, bad = a_run(tmp_path)
    (bad / "first_cause.json").write_text(json.dumps(content))
    code = main(["report", str(run), "--format", "text"])
    out, err = capsys.readouterr()
    assert code == 2
    (line,) = [e for e in err.splitlines() if "first_cause.json" in e]
    assert line.startswith(f"convmatrix: {bad / 'first_cause.json'}: ") and field in line
    assert "ctrl" in out  # every readable cell is still reported


def test_first_cause_json_that_is_not_json_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, bad = a_run(tmp_path)
    (bad / "first_cause.json").write_text("{not json")
    assert main(["report", str(run)]) == 2
    assert f"{bad / 'first_cause.json'}: not JSON" in capsys.readouterr().err
