"""history/schema.py: made on an empty database, migrated a step per version, a newer one refused."""

from __future__ import annotations

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
    """A version 2 that adds a column: a version-1 database gets it, and says 2, in one go."""
    migrated(history_url)

    def add_note(conn: Connection) -> None:
        conn.execute(sa.text("ALTER TABLE runs ADD COLUMN note VARCHAR(100)"))

    monkeypatch.setattr(schema, "VERSION", 2)
    monkeypatch.setitem(schema.MIGRATIONS, 1, add_note)
    migrated(history_url)
    assert version(history_url) == 2
    with backends.opened(history_url) as engine, engine.connect() as conn:
        assert "note" in {c["name"] for c in sa.inspect(conn).get_columns("runs")}


def test_a_step_that_fails_leaves_the_database_as_it_was(history_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    migrated(history_url)

    def broken(conn: Connection) -> None:
        conn.execute(sa.text("ALTER TABLE runs ADD COLUMN half VARCHAR(10)"))
        raise RuntimeError("injected: the step fails half-way")

    monkeypatch.setattr(schema, "VERSION", 2)
    monkeypatch.setitem(schema.MIGRATIONS, 1, broken)
    with pytest.raises(RuntimeError):
        migrated(history_url)
    assert version(history_url) == 1
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
    monkeypatch.setattr(schema, "VERSION", 3)
    with pytest.raises(BadInput, match="cannot migrate"):
        migrated(history_url)
