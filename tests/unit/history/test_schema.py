"""history/schema.py: made on an empty database, migrated a step per version, a newer one refused."""

from __future__ import annotations

import datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convmatrix.errors import BadInput
from convmatrix.history import backends, schema


def version(url: str) -> int:
    with backends.opened(url) as engine, engine.connect() as conn:
        return int(conn.execute(sa.select(schema.schema_version.c.version)).scalar_one())


def migrated(url: str) -> None:
    with backends.opened(url) as engine, engine.begin() as conn:
        schema.migrate(conn)


def test_an_empty_database_gets_the_tables_at_the_current_version(history_url: str) -> None:
    migrated(history_url)
    migrated(history_url)  # twice: nothing more
    assert version(history_url) == schema.VERSION
    with backends.opened(history_url) as engine, engine.connect() as conn:
        assert {"schema_version", "runs", "cells", "cases"} <= set(sa.inspect(conn).get_table_names())


def test_an_older_database_is_migrated_a_step_at_a_time(history_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A next version that adds a column: a database at today's version gets it, and says so, in one go."""
    migrated(history_url)
    today = schema.VERSION

    def add_note(conn: Connection) -> None:
        conn.execute(sa.text("ALTER TABLE runs ADD COLUMN note VARCHAR(100)"))

    monkeypatch.setattr(schema, "VERSION", today + 1)
    monkeypatch.setitem(schema.MIGRATIONS, today, add_note)
    migrated(history_url)
    assert version(history_url) == today + 1
    with backends.opened(history_url) as engine, engine.connect() as conn:
        assert "note" in {c["name"] for c in sa.inspect(conn).get_columns("runs")}


def test_a_step_that_fails_leaves_the_database_as_it_was(history_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    migrated(history_url)

    def broken(conn: Connection) -> None:
        conn.execute(sa.text("ALTER TABLE runs ADD COLUMN half VARCHAR(10)"))
        raise RuntimeError("injected: the step fails half-way")

    today = schema.VERSION
    monkeypatch.setattr(schema, "VERSION", today + 1)
    monkeypatch.setitem(schema.MIGRATIONS, today, broken)
    with pytest.raises(RuntimeError):
        migrated(history_url)
    assert version(history_url) == today
    with backends.opened(history_url) as engine, engine.connect() as conn:
        assert "half" not in {c["name"] for c in sa.inspect(conn).get_columns("runs")}


def test_a_newer_database_is_refused_untouched(history_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    migrated(history_url)
    with backends.opened(history_url) as engine, engine.begin() as conn:
        conn.execute(schema.schema_version.update().values(version=schema.VERSION + 1))
    with pytest.raises(BadInput, match=f"schema version {schema.VERSION + 1}; this convmatrix knows up to"):
        migrated(history_url)
    assert version(history_url) == schema.VERSION + 1


def test_a_version_without_its_step_is_refused(history_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    migrated(history_url)
    monkeypatch.setattr(schema, "VERSION", schema.VERSION + 2)
    with pytest.raises(BadInput, match="cannot migrate"):
        migrated(history_url)


def version_one(url: str) -> None:
    """A database as convmatrix made it at schema version 1 (before the judged night): today's
    tables less the columns version 2 added, one run with a red cell and case in it."""
    old = sa.MetaData()
    added = {("runs", "version"), ("cells", "unjudged"), ("cases", "unjudged"), ("cells", "libraries_line"),
             ("cells", "libraries"),
             *(("cases", c) for c in ("backend", "control_backend", "memory_ratio", "time_ratio", "time_ratio_low"))}
    for table in schema.metadata.sorted_tables:
        if table.name == "explored":  # the step makes it
            continue
        columns = [sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
                   for c in table.columns if (table.name, c.name) not in added]
        sa.Table(table.name, old, *columns)
    with backends.opened(url) as engine, engine.begin() as conn:
        old.create_all(conn)
        conn.execute(old.tables["schema_version"].insert().values(id=1, version=1))
        conn.execute(old.tables["runs"].insert().values(id=1, run="old", at=datetime.datetime(2026, 11, 1),
                                                        recorded=datetime.datetime(2026, 11, 1)))
        conn.execute(old.tables["cells"].insert().values(id=1, run_id=1, at=datetime.datetime(2026, 11, 1), cell="cand",
                                                         gpu_key="cpu", host="", stack="", verdict="invalid", red=True))
        conn.execute(old.tables["case_names"].insert().values(id=1, name="a"))
        conn.execute(old.tables["cases"].insert().values(cell_id=1, case_id=1, verdict="invalid", red=True,
                                                         outcome="pass"))


def test_a_version_one_history_is_migrated_and_its_nights_stay_as_they_were(history_url: str) -> None:
    """Issue 45's one migration: version 1's rows keep their verdicts and red, and say they were
    recorded before the judged night (runs.version 1, unjudged NULL)."""
    version_one(history_url)
    migrated(history_url)
    assert version(history_url) == 2
    with backends.opened(history_url) as engine, engine.connect() as conn:
        assert conn.execute(sa.select(schema.runs.c.version)).scalar_one() == 1
        assert tuple(conn.execute(sa.select(schema.cells.c.verdict, schema.cells.c.red,
                                            schema.cells.c.unjudged)).one()) == ("invalid", True, None)
        assert tuple(conn.execute(sa.select(schema.cases.c.red, schema.cases.c.unjudged)).one()) == (True, None)
        # Issue 47's columns, added by the same step: NULL for the nights recorded before the audit.
        assert tuple(conn.execute(sa.select(schema.cells.c.libraries_line, schema.cells.c.libraries)).one()) == (
            None, None)
