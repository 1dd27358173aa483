"""The two database back-ends behind one engine: SQLite under $CONVMATRIX_HOME (the default) and
PostgreSQL for a fleet whose runners record at once (--history URL, or $CONVMATRIX_HISTORY).

SQLAlchemy Core gives both one schema and one query language; what still differs is here: how a
URL is chosen and checked, how a write transaction begins on SQLite, and the insert that skips a
row already there (docs/architecture.md says why this library)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url

from convmatrix import home, tree
from convmatrix.errors import BadInput

VARIABLE = "CONVMATRIX_HISTORY"
FILE = "history.sqlite"
# How long a writer waits for another's transaction (a shard recording beside this one) before
# SQLite says "database is locked": a nightly's recording takes seconds.
BUSY_S = 120


def chosen(given: str | None) -> str:
    """--history, else $CONVMATRIX_HISTORY, else SQLite at <home>/history.sqlite (made on demand)."""
    if given:
        return given
    if os.environ.get(VARIABLE):
        return os.environ[VARIABLE]
    place = home.home()
    tree.Tree.open(place, create=True).close()  # the home's folder, made the one way (tree.py)
    return f"sqlite:///{place / FILE}"


def shown(url: str | URL) -> str:
    """A URL as it may be printed: no password (a fleet's URL comes from a secret)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return "<not a database URL>"


def parse(url: str) -> URL:
    """A sqlite:// or postgresql:// URL (psycopg 3 the driver of the latter); anything else is BadInput."""
    try:
        parsed = make_url(url)
    except exc.ArgumentError:
        raise BadInput(f"history {shown(url)}: not a database URL (sqlite:///PATH or postgresql://...)") from None
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite" and parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        if not parsed.database or parsed.database == ":memory:":
            raise BadInput(f"history {shown(url)}: an SQLite history needs a file (sqlite:///PATH)")
        return parsed
    raise BadInput(f"history {shown(url)}: not a database this convmatrix records into "
                   f"(sqlite:///PATH or postgresql://...)")


def engine(url: str, *, write: bool = True) -> Engine:
    """An engine for url. A reader's (write=False) SQLite history must exist (connecting would make
    an empty file) and is opened read-only, its transactions deferred: it takes no write lock, so
    it neither waits behind a recorder nor makes one wait."""
    parsed = parse(url)
    if parsed.get_backend_name() == "sqlite":
        if not write:
            path = Path(str(parsed.database))
            if not path.is_file():
                raise BadInput(f"history {shown(url)}: no such file: nothing was recorded there "
                               "(`convmatrix record RUN` makes it)")
            return sa.create_engine(f"sqlite:///file:{path.resolve()}?mode=ro&uri=true",
                                    connect_args={"timeout": BUSY_S}, poolclass=sa.pool.NullPool)
        made = sa.create_engine(parsed, connect_args={"timeout": BUSY_S}, poolclass=sa.pool.NullPool)
        _immediate(made)
        return made
    return sa.create_engine(parsed, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 30})


def _immediate(made: Engine) -> None:
    """SQLite transactions begin with BEGIN IMMEDIATE: the write lock is taken at the start, so two
    recorders queue on it (busy timeout) instead of both reading, then one failing to upgrade its
    lock. pysqlite's own BEGIN is turned off for that (SQLAlchemy's documented recipe:
    https://docs.sqlalchemy.org/en/20/dialects/sqlite.html#serializable-isolation-savepoints-transactional-ddl)."""

    @event.listens_for(made, "connect")
    def _connect(dbapi: Any, _record: Any) -> None:
        dbapi.isolation_level = None
        dbapi.execute("PRAGMA foreign_keys = ON")

    @event.listens_for(made, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


@contextmanager
def opened(url: str, *, write: bool = True) -> Iterator[Engine]:
    """An engine for url; a database that cannot be reached or read is one line, exit 2 (BadInput),
    and nothing in it is touched. write=False: a reader's (engine)."""
    made = engine(url, write=write)
    try:
        yield made
    except exc.SQLAlchemyError as error:
        raise BadInput(f"history {shown(url)}: {reason(error)}") from None
    finally:
        made.dispose()


def reason(error: BaseException) -> str:
    """The driver's own first line (e.g. "file is not a database", "connection refused")."""
    original = getattr(error, "orig", None) or error
    text = str(original).strip().splitlines()
    return text[0] if text else type(original).__name__


COPY_FROM = 2000  # rows from which PostgreSQL gets them by COPY (a fleet's 233,000 cases)


def insert_new(conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """rows inserted, each one whose unique key is already there skipped (ON CONFLICT DO NOTHING):
    two shards of one run, or one run recorded twice, add each row once. All rows have the same keys."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        if len(rows) >= COPY_FROM:
            copy_new(conn, table, rows)
            return
        conn.execute(postgresql.insert(table).on_conflict_do_nothing(), rows)
        return
    conn.execute(sqlite.insert(table).on_conflict_do_nothing(), rows)


def copy_new(conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """PostgreSQL: rows COPY'd into a temporary table, then inserted from it, ON CONFLICT DO
    NOTHING, in conn's transaction (the driver's own connection is conn's). A multi-row INSERT of
    233,000 case rows took 7 s here, COPY a fraction (bench/history.py)."""
    columns = list(rows[0])
    names = ", ".join(f'"{c}"' for c in columns)
    raw = conn.connection.driver_connection
    assert raw is not None
    with raw.cursor() as cursor:
        # The columns given, their types and nothing else (no key, no default, no NOT NULL).
        cursor.execute(f'CREATE TEMPORARY TABLE incoming ON COMMIT DROP AS SELECT {names} FROM "{table.name}" '
                       f"WITH NO DATA")
        with cursor.copy(f"COPY incoming ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([row[c] for c in columns])
        cursor.execute(f'INSERT INTO "{table.name}" ({names}) SELECT {names} FROM incoming ON CONFLICT DO NOTHING')
        cursor.execute("DROP TABLE incoming")


def sqlite_file(url: str) -> Path | None:
    parsed = parse(url)
    return Path(parsed.database) if parsed.get_backend_name() == "sqlite" and parsed.database else None
