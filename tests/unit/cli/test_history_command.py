"""`convmatrix history [CELL [CASE]]`: the recorded runs, a cell's timeline, a case's (history/timeline.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convmatrix.cli.main import main
from historykit import night, recorded
from testkit import env_json, record, write_result


def three_nights(url: str, base: Path) -> None:
    for n, broken in ((1, ()), (2, ("b",)), (3, ("b",))):
        assert recorded(night(base, n, broken=broken), url) == 0


def test_the_runs(history_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    three_nights(history_url, tmp_path)
    capsys.readouterr()
    assert main(["history", "--history", history_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["2026-11-01T02:00:00 night-001: 2 cells, 0 red", "2026-11-02T02:00:00 night-002: 2 cells, 1 red",
                     "2026-11-03T02:00:00 night-003: 2 cells, 1 red"]


def test_a_cell_and_a_case(history_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    three_nights(history_url, tmp_path)
    capsys.readouterr()
    assert main(["history", "cand", "--history", history_url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "cand: 3 runs, 2 red; last 3: .XX (X red, . not)"
    assert out[2].startswith("2026-11-02T02:00:00 night-002: cpu regression")
    assert main(["history", "cand", "b", "--history", history_url, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(e["run"], e["verdict"], e["red"], e["family"]) for e in data["entries"]] == [
        ("night-001", "ok", False, None), ("night-002", "regression", True, "cudnn_not_supported"),
        ("night-003", "regression", True, "cudnn_not_supported")]
    assert main(["history", "cand", "nosuch", "--history", history_url, "--format", "json"]) == 0
    assert {e["verdict"] for e in json.loads(capsys.readouterr().out)["entries"]} == {"absent"}


def test_limits_and_nothing(history_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    three_nights(history_url, tmp_path)
    capsys.readouterr()
    assert main(["history", "cand", "--history", history_url, "--limit", "1"]) == 0
    assert "night-003" in capsys.readouterr().out
    assert main(["history", "cand", "--history", history_url, "--limit", "0"]) == 2


def test_an_unknown_cell_is_one_line_with_the_closest_ids(history_url: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 45: an unknown id printed "no recorded runs of that cell" and exited 0 (a typo in a
    CI step read as a cell that never ran); now exit 2 and the closest recorded ids."""
    three_nights(history_url, tmp_path)
    capsys.readouterr()
    assert main(["history", "cnad", "--history", history_url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no recorded cell 'cnad'" in err[0] and "the closest: cand" in err[0]


def test_the_short_id_the_report_prints_names_its_cell(history_url: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    long = "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11"
    run = tmp_path / "night-001"
    write_result(run, "ctrl", [record("a")], env=env_json("ctrl"), cell={"control": True})
    write_result(run, long, [record("a")], env=env_json(long), cell={})
    assert recorded(run, history_url) == 0
    capsys.readouterr()
    assert main(["history", "bm-2.5.1-cu124-bundled-py3.11", "--history", history_url]) == 0
    assert capsys.readouterr().out.startswith(f"{long}: 1 runs")


def test_sqlalchemy_is_loaded_only_by_the_commands_that_use_a_history() -> None:
    """Start-up time: `convmatrix report` without --history, and every other command, never import it."""
    import subprocess
    import sys

    from testkit import REPO

    script = ("import sys; import convmatrix.cli.main, convmatrix.report.model, convmatrix.report.render; "
              "print(sorted(m for m in ('sqlalchemy', 'psycopg') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(REPO / "src")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_reader_never_makes_a_history_a_mistyped_url_would_have(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Review of issue 36: `history` and `report --history` on a mistyped SQLite path made and
    migrated an empty database, and the report then marked every red case first-red. A reader
    now says there is no history there (one line, exit 2) and writes nothing."""
    typo = tmp_path / "typo.sqlite"
    assert main(["history", "--history", f"sqlite:///{typo}"]) == 2
    assert "nothing was recorded there" in capsys.readouterr().err and not typo.exists()
    run = night(tmp_path, 1, broken=("b",))
    assert main(["report", str(run), "--history", f"sqlite:///{typo}", "--fail-on", "first-red"]) == 2
    assert not typo.exists()
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")  # a file, but no history in it
    assert main(["history", "--history", f"sqlite:///{empty}"]) == 2
    assert "no convmatrix history here" in capsys.readouterr().err and empty.read_bytes() == b""
