"""What explore tried, kept in the history database (the `explored` table of schema 2): each
configuration's key once per cell, with what it found, so that a nightly's explore never draws it
again however its --out changes."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convmatrix.explore.space import Config, key
from convmatrix.history import backends, schema
from convmatrix.history.record import clean, utc

FOUND = 100  # the column's width: a family or a verdict's name is far shorter


def keys_at(url: str, cell: str) -> set[str]:
    """keys() of the history at url; none from a history that has no `explored` table yet (recorded
    by nothing, or an older schema `record` would migrate): the first night explores from nothing.
    Opened as a writer's (store_at writes there at the end): a new SQLite file is made, not refused."""
    with backends.opened(url) as engine, engine.connect() as conn:
        inspector = sa.inspect(conn)
        if not (inspector.has_table("schema_version") and inspector.has_table("explored")):
            return set()
        return keys(conn, cell)


def store_at(url: str, cell: str, tried: Sequence[tuple[Config, str | None]], seed: int,
             at: datetime.datetime) -> None:
    """store() into the history at url, in one transaction."""
    with backends.opened(url) as engine, engine.begin() as conn:
        store(conn, cell, tried, seed, at)


def keys(conn: Connection, cell: str) -> set[str]:
    """The configurations tried on this cell before (none when the history has no such table yet)."""
    schema.check(conn)
    t = schema.explored.c
    return set(conn.execute(sa.select(t.key).where(t.cell == clean(cell))).scalars())


def store(conn: Connection, cell: str, tried: Sequence[tuple[Config, str | None]], seed: int,
          at: datetime.datetime) -> None:
    """The configurations tried tonight, in conn's transaction (migrating an older history, as
    `record` does); a key already there is left as it was."""
    schema.migrate(conn)
    rows = {key(c): {"cell": clean(cell), "key": key(c), "seed": seed, "found": None if got is None else got[:FOUND],
                     "at": utc(at)} for c, got in tried}
    backends.insert_new(conn, schema.explored, list(rows.values()))
