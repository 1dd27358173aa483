"""Bad input and ordinary ends are one line with the right exit code, never a traceback (issue 21,
item 9), and nothing recorded is lost."""

from __future__ import annotations

import codecs
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from convmatrix import matrix
from convmatrix.cli.main import main
from convmatrix.errors import BadInput
from convmatrix.results import rundir
from testkit import REPO, record, write_result

SIG = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."


def test_a_negative_or_infinite_timing_is_no_timing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    bad = {"forward_ms": -3.0, "forward_runs": [-1.0, -2.0, -3.0], "backward_ms": None}
    write_result(run, "ctrl", [record("a", timing={"forward_ms": 1.0, "forward_runs": [1.0, 1.0, 1.0]})],
                 cell={"control": True, "ended": "x"})
    write_result(run, "cand", [record("a", timing=bad)], cell={"ended": "x"})
    for fmt in ("text", "json", "markdown", "html", "junit"):
        assert main(["report", str(run), "--format", fmt, "-o", str(tmp_path / f"r.{fmt}")]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("value", ["\\u0000", "", "a\\u0007b"])
def test_a_wheelhouse_that_is_no_path_is_one_line(write_matrix: Callable[[str], Path], value: str) -> None:
    path = write_matrix(f'name = "t"\nwheelhouse = "{value}"\n[axes]\nlane = ["host"]\n')
    with pytest.raises(BadInput, match="wheelhouse"):
        matrix.load(path)


def test_triage_into_a_closed_pipe_says_nothing_and_exits_0(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("".join(f"line {i}\n" for i in range(5000)) + f"E   {SIG}\n")
    done = subprocess.run(f"{sys.executable} -m convmatrix triage {log} --context 4000 | head -1", shell=True,
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
                          timeout=120, check=False)
    assert done.stdout.startswith(str(log)) and done.stderr == "", done.stderr


def test_triage_reads_a_utf16_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "windows.log"
    log.write_bytes(codecs.BOM_UTF16_LE + f"step 1\r\n{SIG}\r\nafter\r\n".encode("utf-16-le"))
    assert main(["triage", str(log), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["family"], result["line"]) == ("cudnn_not_supported", 2)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_report_leaves_no_temporary_file_and_one_line(tmp_path: Path, signum: int) -> None:
    """The report is stopped while it writes -o: its temporary file goes, the old report stays."""
    run = tmp_path / "run"
    # 50,000 cases in five cells: a cell's results.jsonl holds at most rundir.MAX_LINES lines.
    write_result(run, "ctrl", [record(f"c{i}") for i in range(10_000)], cell={"control": True, "ended": "x"})
    for n in range(4):
        write_result(run, f"cand{n}", [record(f"c{i}") for i in range(10_000)], cell={"ended": "x"})
    out = tmp_path / "report.json"
    out.write_text("the previous report")
    proc = subprocess.Popen([sys.executable, "-m", "convmatrix", "report", str(run), "--format", "json", "-o", str(out)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Once it writes (the temporary file beside -o exists), stop it.
    for _ in range(600):
        if list(tmp_path.glob(".report.json.*.tmp")) or proc.poll() is not None:
            break
        subprocess.run(["sleep", "0.01"], check=False)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the report finished before the signal reached it")  # nothing to clean up then
    assert proc.returncode == 128 + signum and "Traceback" not in err and err.count("\n") == 1, err
    assert not list(tmp_path.glob(".report.json.*.tmp")) and out.read_text() == "the previous report"


def test_a_result_left_as_old_by_a_kill_between_two_renames_is_put_back(tmp_path: Path) -> None:
    final = tmp_path / "c@cpu@h"
    with rundir.replacing(final) as work:
        rundir.write_json(work / rundir.CELL_JSON, {"schema": 1, "exit_code": 0})
    os.replace(final, final.with_name(final.name + ".old"))  # the first rename, then SIGKILL
    rundir.recover(final)
    assert json.loads((final / rundir.CELL_JSON).read_text())["exit_code"] == 0
    assert not final.with_name(final.name + ".old").exists()
