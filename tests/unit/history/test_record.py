"""history/record.py: a run recorded whole or not at all, once, beside other recorders; in SQLite
and in a real PostgreSQL server."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given

from convmatrix.cli import report as report_cmd
from convmatrix.history import backends, record, schema
from convmatrix.report.model import Report
from historykit import night
from strategies import env_values
from testkit import REPO, env_json, write_result
from testkit import record as line

AT = datetime.datetime(2026, 11, 1, 2, tzinfo=datetime.UTC)


def judged(run: Path) -> Report:
    return report_cmd.made([str(run)], None, [])[1]


def rows(url: str) -> dict[str, int]:
    with backends.opened(url) as engine, engine.begin() as conn:
        schema.migrate(conn)  # a database whose first recording was undone has no tables either
        return {t.name: int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one())
                for t in (schema.runs, schema.cells, schema.cases)}


def store(url: str, report: Report, run: str = "r1", at: datetime.datetime = AT) -> record.Recorded:
    assert report.judged is not None
    with backends.opened(url) as engine, engine.begin() as conn:
        return record.record(conn, replace(report.judged, run=run, at=at))


def test_what_is_stored(history_url: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [line("a"), line("b")], env=env_json("ctrl", suite_version="s1", image_id="sha256:ab",
                                                                      driver="550.1"), cell={"control": True})
    write_result(run, "cand", [line("a", duration_s=1.5), line("b", "failed", "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED")],
                 env=env_json("cand", suite_version="s1", cudnn=90100), cell={}, host="h1")
    done = store(history_url, judged(run))
    assert (done.added, done.present) == (2, 0)
    with backends.opened(history_url) as engine, engine.connect() as conn:
        c = schema.cells.c
        cand = conn.execute(sa.select(schema.cells).where(c.cell == "cand")).one()._mapping
        assert (cand["gpu_key"], cand["host"], cand["torch"], cand["cudnn"], cand["suite_version"]) == (
            "cpu", "h1", "2.5.1+cu124", "90100", "s1")
        assert (cand["verdict"], cand["red"], cand["stack"]) == ("regression", True,
                                                                  "torch=2.5.1+cu124;cuda=12.4;cudnn=90100")
        ctrl = conn.execute(sa.select(schema.cells).where(c.cell == "ctrl")).one()._mapping
        assert (ctrl["image"], ctrl["driver"], ctrl["verdict"], ctrl["red"]) == ("sha256:ab", "550.1", "control", False)
        k = schema.cases.c
        found = {r.name: r for r in conn.execute(sa.select(schema.cases, schema.case_names.c.name)
                                                 .join_from(schema.cases, schema.case_names)
                                                 .where(k.cell_id == cand["id"]))}
        assert (found["a"].verdict, found["a"].red, found["a"].duration_s) == ("ok", False, 1.5)
        assert (found["b"].verdict, found["b"].red, found["b"].outcome, found["b"].family) == (
            "regression", True, "fail", "cudnn_not_supported")


def test_an_error_mid_record_leaves_no_half_run(history_url: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injected after the run and its cells are inserted, before its cases: nothing stays."""
    report = judged(night(tmp_path, 1, broken=("a",)))
    real = backends.insert_new

    def failing(conn: Any, table: sa.Table, made: list[dict[str, Any]]) -> None:
        if table is schema.cases:
            raise RuntimeError("injected: the recorder dies here")
        real(conn, table, made)

    monkeypatch.setattr(backends, "insert_new", failing)
    with pytest.raises(RuntimeError, match="injected"):
        store(history_url, report)
    monkeypatch.setattr(backends, "insert_new", real)
    assert rows(history_url) == {"runs": 0, "cells": 0, "cases": 0}
    assert store(history_url, report).added == 2  # and the run records whole afterwards
    assert rows(history_url) == {"runs": 1, "cells": 2, "cases": 6}


KILLED = """
import sys, time
from convmatrix.cli import report as report_cmd
from convmatrix.history import backends, record, schema
real = backends.insert_new
def slow(conn, table, made):
    real(conn, table, made)
    if table is schema.cells:
        print("inside", flush=True)
        time.sleep(60)
backends.insert_new = slow
report = report_cmd.made([sys.argv[2]], None, [])[1]
import dataclasses, datetime
with backends.opened(sys.argv[1]) as engine, engine.begin() as conn:
    record.record(conn, dataclasses.replace(report.judged, run="r1", at=datetime.datetime(2026, 11, 1)))
"""


def test_a_kill_mid_record_leaves_no_half_run(history_url: str, tmp_path: Path) -> None:
    """SIGKILL while the run and its cells are written but not its cases: the transaction never
    committed, so the database has no trace of the run, and the next recording takes it whole."""
    run = night(tmp_path, 1)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.Popen([sys.executable, "-c", KILLED, history_url, str(run)], stdout=subprocess.PIPE,
                             env=env, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "inside"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout:
            child.stdout.close()
    assert store(history_url, judged(run)).added == 2
    assert rows(history_url) == {"runs": 1, "cells": 2, "cases": 6}


def test_shards_of_one_run_recording_at_once_each_add_their_cells(history_url: str, tmp_path: Path) -> None:
    """Four shards, each its own cells of one run, all at once, plus each recorded twice: every
    cell once, nothing refused (transactions and unique keys, no file lock)."""
    reports = []
    for shard in range(4):
        run = tmp_path / f"shard{shard}" / "night"
        write_result(run, "ctrl", [line("a")], env=env_json("ctrl"), cell={"control": True}, host=f"h{shard}")
        write_result(run, f"cand{shard}", [line("a")], env=env_json(f"cand{shard}"), cell={}, host=f"h{shard}")
        reports.append(judged(run))
    store(history_url, reports[0], run="warm")  # the schema made once beforehand: not what is tested here
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def go(report: Report) -> None:
        try:
            start.wait()
            store(history_url, report, run="night")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(r,)) for r in reports * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    counted = rows(history_url)
    assert counted["runs"] == 2 and counted["cells"] == 2 + 8 and counted["cases"] == 2 + 8


def test_a_first_recording_by_two_at_once_makes_the_schema_once(history_url: str, tmp_path: Path) -> None:
    a, b = judged(night(tmp_path / "a", 1)), judged(night(tmp_path / "b", 1))
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def go(report: Report, run: str) -> None:
        try:
            start.wait()
            store(history_url, report, run=run)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(a, "x")), threading.Thread(target=go, args=(b, "y"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and rows(history_url)["runs"] == 2


def test_the_stack_key_and_the_diff_hash() -> None:
    assert record.stack_key({}) == ""
    assert record.stack_key({"torch": "2.5.1", "cudnn": 90100}) == "torch=2.5.1;cuda=;cudnn=90100"
    from convmatrix.results.first_diff import Difference

    # Numbers and addresses differ run to run; the hash of the line does not.
    one = record.diff_hash(Difference(line=3, text="E  RuntimeError at 0x7f00aa: size 12 took 3.5 ms"))
    two = record.diff_hash(Difference(line=9, text="E  RuntimeError at 0x7f11bb: size 99 took 4.1 ms"))
    assert one == two and one is not None and len(one) == 16
    assert record.diff_hash(None) is None


def test_a_run_time_is_stored_in_utc(history_url: str, tmp_path: Path) -> None:
    report = judged(night(tmp_path, 1))
    east = datetime.datetime(2026, 11, 1, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=3)))
    store(history_url, report, run="r", at=east)
    with backends.opened(history_url) as engine, engine.connect() as conn:
        assert conn.execute(sa.select(schema.runs.c.at)).scalar_one() == datetime.datetime(2026, 11, 1, 2)


def test_postgresql_copies_a_large_run_in_and_still_adds_each_row_once(tmp_path: Path, pg_server: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The COPY path (backends.copy_new, a fleet's run) stores what the INSERT path stores, once."""
    import pgserver

    report = judged(night(tmp_path, 1, broken=("b",)))
    plain, copied = (pgserver.fresh_database(pg_server, f"copy{n}") for n in (1, 2))
    store(plain, report)
    monkeypatch.setattr(backends, "COPY_FROM", 1)
    store(copied, report)
    store(copied, report)  # again: nothing added

    def contents(url: str) -> list[tuple[Any, ...]]:
        with backends.opened(url) as engine, engine.connect() as conn:
            c, k, n = schema.cells.c, schema.cases.c, schema.case_names.c
            return [tuple(row) for row in conn.execute(
                sa.select(c.cell, c.gpu_key, c.stack, c.verdict, c.red, n.name, k.verdict, k.red, k.outcome, k.family,
                          k.subcode, k.first_diff, k.duration_s)
                .select_from(schema.cases.join(schema.cells).join(schema.case_names))
                .order_by(c.cell, n.name))]

    assert contents(copied) == contents(plain) and len(contents(plain)) == 6
    assert rows(copied) == {"runs": 1, "cells": 2, "cases": 6}


def test_the_longest_names_a_run_may_hold_are_stored(history_url: str, tmp_path: Path) -> None:
    """A cell id as long as a result directory allows, a case id of 160 characters (CASE_ID) and
    observed values of any length (kept to 100 characters): PostgreSQL's VARCHAR limits hold."""
    run = tmp_path / "run"
    cell, case = "c" * 200, "k" * 160
    write_result(run, "ctrl", [line(case)], env=env_json("ctrl"), cell={"control": True})
    write_result(run, cell, [line(case, "failed", "boom")], cell={},
                 env=env_json(cell, torch="t" * 300, cuda="u" * 300, cudnn=10 ** 300, driver="d" * 300))
    assert store(history_url, judged(run)).added == 2
    with backends.opened(history_url) as engine, engine.connect() as conn:
        stored = conn.execute(sa.select(schema.cells.c.torch, schema.cells.c.stack)
                              .where(schema.cells.c.cell == cell)).one()
    assert stored.torch == "t" * 100 and stored.stack == f"torch={'t' * 100};cuda={'u' * 100};cudnn=1{'0' * 99}"


ODD = {"driver": "550\udfff", "torch": "2.5.1\x00+cu124", "cuda": "12.4\x1b[2J", "image_id": "sha256:\x00ab",
       "suite_version": "s\ud800"}


def odd_night(base: Path, n: int, broken: tuple[str, ...] = ()) -> Path:
    run = base / f"odd-{n}"
    ended = f"2026-11-{n:02d}T02:00:00+00:00"
    write_result(run, "ctrl", [line("a"), line("b")], env=env_json("ctrl", ended=ended, **ODD),
                 cell={"control": True, "ended": ended})
    write_result(run, "cand", [line(c, "failed", "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED") if c in broken else line(c)
                               for c in ("a", "b")], env=env_json("cand", ended=ended, **ODD), cell={"ended": ended})
    return run


def test_a_night_with_a_surrogate_and_a_nul_in_its_env_is_recorded(history_url: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 46: a lone surrogate in env.json crashed `record` with a traceback (UnicodeEncodeError,
    nothing recorded, and the nightly wrote no report); a NUL lost the night on PostgreSQL. Both
    back-ends now store the same escaped text, and the series is found again the next night."""
    from historykit import recorded, reported

    assert recorded(odd_night(tmp_path, 1), history_url) == 0
    assert "2 cells added" in capsys.readouterr().out
    with backends.opened(history_url) as engine, engine.connect() as conn:
        c = schema.cells.c
        stored = conn.execute(sa.select(c.driver, c.torch, c.cuda, c.image, c.suite_version, c.stack)
                              .where(c.cell == "cand")).one()
    assert tuple(stored[:5]) == ("550\\udfff", "2.5.1\\u0000+cu124", "12.4\\u001b[2J", "sha256:\\u0000ab", "s\\ud800")
    assert stored.stack == "torch=2.5.1\\u0000+cu124;cuda=12.4\\u001b[2J;cudnn=90100"
    assert recorded(odd_night(tmp_path, 2), history_url) == 0
    code, report = reported(odd_night(tmp_path, 3, broken=("b",)), history_url, tmp_path, "--fail-on", "first-red")
    (row,) = [c for c in report["cases"] if c["cell"] == "cand" and c["case"] == "b"]
    assert code == 1 and row["history"]["state"] == "first-red" and row["history"]["runs"] == 3


def test_tables_are_never_made_beside_another_programs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 46: `record --history sqlite:///other-app.db` added convmatrix's tables to another
    program's database."""
    import sqlite3

    from historykit import recorded

    other = tmp_path / "other-app.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    assert recorded(night(tmp_path, 1), f"sqlite:///{other}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other table(s) (users)" in err[0]
    with sqlite3.connect(other) as db:
        assert [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["users"]


@given(values=env_values())
def test_record_never_shows_a_traceback(values: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    """Whatever text a cell's env.json holds (any code point, lone surrogates and NUL among them):
    record stores the night (exit 0) or says one line (exit 2); never an exception."""
    from historykit import recorded

    base = tmp_path_factory.mktemp("fuzz")
    run = base / "run"
    write_result(run, "ctrl", [line("a")], env=env_json("ctrl", **values), cell={"control": True})
    write_result(run, "cand", [line("a")], env=env_json("cand", **values), cell={})
    assert recorded(run, f"sqlite:///{base / 'h.sqlite'}") in (0, 2)
