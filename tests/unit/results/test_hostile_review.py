"""What a hostile review of this stop's work found, each a test that failed before its fix
(issue 21): a working directory that reaches a Slurm script, symlinked cell and blocking
directories, numbers too large for a float, a knob set that is none, raw escapes in triage's
warnings, a U+2028 that forged an error line, plans that grew quadratically, symlinked plans/ and
.locks/ in a run directory."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from convmatrix.cli.main import main
from convmatrix.errors import BadInput
from convmatrix.results import plans, rundir
from testkit import REPO, record, write_result

SECRET = "SECRET-FROM-OUTSIDE"


def test_a_working_directory_with_a_line_break_is_refused_by_slurm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    here = tmp_path / "cw\ntouch PWNED #"
    here.mkdir()
    monkeypatch.chdir(here)
    code = main(["slurm", "-m", str(REPO / "matrix" / "default.toml"), "--shards", "1", "--out",
                 str(tmp_path / "out"), "--dry-run"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and "the working directory" in captured.err


def outside(tmp_path: Path) -> Path:
    return write_result(tmp_path / "elsewhere", "x", [record("b", "failed", SECRET)], cell={"ended": "x"}, host="h1")


def test_a_symlinked_cell_directory_is_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    write_result(run, "ctl", [record("b")], cell={"control": True, "ended": "x"}, host="h1")
    (run / "x@cpu@h1").symlink_to(outside(tmp_path))
    main(["report", str(run), "--format", "json"])
    assert SECRET not in capsys.readouterr().out


def test_a_symlinked_blocking_directory_is_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    write_result(run, "ctl", [record("b")], cell={"control": True, "ended": "x"}, host="h1")
    cell = write_result(run, "x", [record("b", "failed", "boom")], cell={"ended": "x"}, host="h1")
    (cell / "blocking").symlink_to(outside(tmp_path))
    assert main(["report", str(run)]) == 2
    captured = capsys.readouterr()
    assert SECRET not in captured.out and "is a symlink" in captured.err


@pytest.mark.parametrize("timing", [{"forward_ms": 10**309}, {"forward_ms": 1.0, "forward_runs": [10**400, 1, 2]}])
def test_a_number_too_large_for_a_float_is_no_timing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     timing: dict[str, object]) -> None:
    run = tmp_path / "run"
    write_result(run, "ctl", [record("a")], cell={"control": True, "ended": "x"})
    write_result(run, "x", [record("a", timing=timing)], cell={"ended": "x"})
    assert main(["report", str(run)]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("knobs", ["abc", 5, {"a": [1]}])
def test_prove_names_a_requested_knob_set_that_is_none(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       knobs: object) -> None:
    run = tmp_path / "run"
    write_result(run, "ctl", [record("a")], cell={"control": True, "ended": "x", "requested": {"knobs": knobs}})
    assert main(["prove", str(run), str(run), "--pair", "cudnn=bundled:9.5.1.17"]) == 2
    assert "field 'requested' knobs" in capsys.readouterr().err


def test_triage_warnings_carry_no_escape_sequences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "t\x1b]0;PWNED\x07\x1b[2J.gz"
    log.write_bytes(gzip.compress(b"step 1\nRuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.\n" * 100)[:-20])
    main(["triage", str(log)])
    err = capsys.readouterr().err
    assert "warning" in err and "\x1b" not in err and "\x07" not in err


def test_a_line_separator_in_a_message_does_not_forge_a_line_of_its_own() -> None:
    assert BadInput("cell x\u2028convmatrix report: all cells ok\u0085").lines() == [
        "cell x\u2028convmatrix report: all cells ok\u0085"]


def test_plans_expecting_many_gpus_are_one_line_not_a_hang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    write_result(run, "ctl", [record("a")], cell={"control": True, "ended": "x"}, host="h")
    (run / plans.PLANS).mkdir()
    for name in ("a", "b"):
        keys = [f"g{name}{i}-sm90" for i in range(20_000)]
        (run / plans.PLANS / f"{name}.json").write_text(json.dumps(
            {"schema": 1, "host": "h", "expected": [], "fleet_gpus": keys}))
    assert main(["report", str(run)]) == 2
    assert "more than 256" in capsys.readouterr().err


def test_symlinked_plans_and_locks_in_a_run_directory_are_replaced_not_followed(tmp_path: Path) -> None:
    run, target = tmp_path / "run", tmp_path / "target"
    run.mkdir()
    target.mkdir()
    victim = target / "victim"
    victim.write_text("keep me")
    (run / plans.PLANS).symlink_to(target)
    plans.write(run, host="h", selection={}, fleet_gpus=(), expected=[])
    assert [p.name for p in target.iterdir()] == ["victim"] and (run / plans.PLANS).is_dir()
    (run / rundir.LOCKS).mkdir()
    (run / rundir.LOCKS / "c@cpu@h").symlink_to(victim)
    with pytest.raises(OSError, match=r"symbolic links|Too many levels"), rundir.held_lock(run / "c@cpu@h"):
        pass
    assert victim.read_text() == "keep me"
