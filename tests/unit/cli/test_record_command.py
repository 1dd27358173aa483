"""`convmatrix record` and `report --history`: the nights of the issue (36), in SQLite and in a
real PostgreSQL server alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from convmatrix.cli.main import main
from historykit import case_mark, night, recorded, reported


def test_a_case_broken_on_night_two_is_first_red_then_recurring(history_url: str, tmp_path: Path) -> None:
    one = night(tmp_path, 1)
    assert recorded(one, history_url) == 0
    two = night(tmp_path, 2, broken=("b",))
    code, report = reported(two, history_url, tmp_path, "--fail-on", "first-red")
    assert code == 1  # what changed tonight: b went red for the first time
    mark = case_mark(report, "b")
    assert mark["state"] == "first-red" and mark["first_bad"]["run"] == "night-002"
    assert mark["last_good"] == {"run": "night-001", "date": "2026-11-01"}
    assert case_mark(report, "a") is None
    assert recorded(two, history_url) == 0
    three = night(tmp_path, 3, broken=("b",))
    code, report = reported(three, history_url, tmp_path, "--fail-on", "first-red")
    assert code == 0  # red still, but nothing new: first-red does not fail it
    mark = case_mark(report, "b")
    assert mark["state"] == "recurring"
    assert (mark["since"], mark["streak"], mark["runs"]) == ("2026-11-02", 2, 3)
    # The cell carries its own mark too, and the regression policy still fails the night.
    (cand,) = [c for c in report["cells"] if c["cell"] == "cand"]
    assert cand["history"]["state"] == "recurring"
    assert main(["report", str(three), "--history", history_url]) == 1


def test_a_case_alternating_over_eight_nights_is_flaky(history_url: str, tmp_path: Path) -> None:
    for n in range(1, 8):
        assert recorded(night(tmp_path, n, broken=("c",) if n % 2 else ()), history_url) == 0
    code, report = reported(night(tmp_path, 8), history_url, tmp_path, "--fail-on", "first-red")
    assert code == 0
    mark = case_mark(report, "c")
    assert mark["state"] == "flaky" and mark["flips"] == 7
    assert mark["flakiness"] > 0.6


def test_green_after_red_is_recovered(history_url: str, tmp_path: Path) -> None:
    for n, broken in ((1, ()), (2, ()), (3, ("a",))):
        assert recorded(night(tmp_path, n, broken=broken), history_url) == 0
    _, report = reported(night(tmp_path, 4), history_url, tmp_path)
    mark = case_mark(report, "a")
    assert mark["state"] == "recovered" and mark["first_bad"]["run"] == "night-003"


def test_another_stack_starts_its_own_series(history_url: str, tmp_path: Path) -> None:
    """Red on a new torch is first-red there, whatever the old one did."""
    for n in (1, 2):
        assert recorded(night(tmp_path, n, broken=("b",)), history_url) == 0
    _, report = reported(night(tmp_path, 3, broken=("b",), torch="2.6.0+cu126"), history_url, tmp_path)
    assert case_mark(report, "b")["state"] == "first-red"


def test_the_same_run_twice_adds_nothing(history_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = night(tmp_path, 1, broken=("a",))
    assert recorded(run, history_url) == 0
    first = counts(history_url)
    assert recorded(run, history_url) == 0
    assert counts(history_url) == first == (1, 2, 6)
    assert "0 cells added (2 already there)" in capsys.readouterr().out


def test_a_report_of_a_recorded_run_leaves_it_out_of_its_own_past(history_url: str, tmp_path: Path) -> None:
    assert recorded(night(tmp_path, 1), history_url) == 0
    two = night(tmp_path, 2, broken=("b",))
    assert recorded(two, history_url) == 0
    _, report = reported(two, history_url, tmp_path)
    assert case_mark(report, "b")["state"] == "first-red"


def test_first_red_without_a_history_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(night(tmp_path, 1)), "--fail-on", "first-red"]) == 2
    assert "needs a history database" in capsys.readouterr().err


def test_an_unreadable_database_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "history.sqlite"
    garbage.write_bytes(b"this is no database, " * 100)
    url = f"sqlite:///{garbage}"
    assert recorded(night(tmp_path, 1), url) == 2
    assert main(["report", str(night(tmp_path, 2)), "--history", url]) == 2
    assert main(["history", "--history", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all("file is not a database" in line for line in err)
    assert garbage.read_bytes() == b"this is no database, " * 100  # nothing lost


def test_an_unreachable_server_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql://nobody:secret@/x?host={tmp_path}"
    assert recorded(night(tmp_path, 1), url) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("convmatrix: history postgresql://nobody:***@/x") and "secret" not in line


def test_a_url_of_another_kind_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert recorded(night(tmp_path, 1), "mysql://x/y") == 2
    assert "not a database this convmatrix records into" in capsys.readouterr().err


def test_the_default_history_lives_in_the_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CONVMATRIX_HISTORY", raising=False)
    assert main(["record", str(night(tmp_path, 1))]) == 0
    assert (tmp_path / "home" / "history.sqlite").is_file()
    monkeypatch.setenv("CONVMATRIX_HISTORY", f"sqlite:///{tmp_path / 'elsewhere.sqlite'}")
    assert main(["record", str(night(tmp_path, 2))]) == 0
    assert (tmp_path / "elsewhere.sqlite").is_file()


def counts(url: str) -> tuple[int, int, int]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            runs, cells, cases = (int(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one())
                                  for t in ("runs", "cells", "cases"))
    finally:
        engine.dispose()
    return runs, cells, cases


@pytest.mark.parametrize("run_id", ["", "   ", "a\nb", "a\rb", "nul\x00", "x" * 201, "\x1b[2J"])
def test_a_hostile_run_id_is_one_line_and_nothing_recorded(run_id: str, history_url: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """--run-id names a run in the history and in every line `history` prints: printable, 1 to 200."""
    assert recorded(night(tmp_path, 1), history_url, "--run-id", run_id) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--run-id" in err and "\x1b" not in err
    assert main(["history", "--history", history_url]) == 2  # nothing was recorded: no history there
