"""The history database's one schema, for SQLite and PostgreSQL alike, and its migration.

Version 1 (docs/contracts.md: The history database):
    schema_version  the one row saying which version the tables are
    runs            a recorded run: its key (the run directory's name, or --run-id) and when it ran
    cells           a cell of a run as observed (torch, CUDA, the loaded cuDNN, driver, image, suite
                    version, host, GPU key) with its verdict; one per run, cell, GPU key and host
    case_names      each case id once
    cases           each case of a cell: verdict, outcome, family, cuDNN sub-code, the hash of the
                    first log line the control lacks, its duration

Version 2 (the judged night, results/night.py): `runs.version` (the schema a run was recorded
under: 1 for the nights recorded before version 2, whose `red` stays as it was judged then), and
`unjudged` on cells and cases: why the night could not judge the row (control, no-control,
control-unhealthy, excused, infrastructure, not-compared), NULL when it was judged. Since version
2, `red` is true only for a judged row that fails under the regression policy. This batch's later
additions extend this same step before a release carries it: the fallback verdicts' backends and
ratios on cases (backend, control_backend, memory_ratio, time_ratio, time_ratio_low), and the
library audit's on cells (issue 47): `libraries_line`, the cell's stack line when what it loaded
differs from what it installed (`cuDNN 9.4.0 (wheel) · libcudnn_cnn 9.2.1 from LD_LIBRARY_PATH`),
and `libraries`, JSON of what the atlas keeps of its table (results/libraries.kept: whether
something was swapped in, each cuDNN file's stem, version and origin); both NULL without an audit;
and the `explored` table (issue 51): what `convmatrix explore` tried, per cell and configuration.

A newer tool migrates an older database in place, one step per version (MIGRATIONS), inside the
transaction that checks the version: two recorders starting at once migrate it once."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convmatrix.errors import BadInput

VERSION = 2


def _judged(conn: Connection) -> None:
    """1 -> 2: the run's recording version (1 for what is there) and the unjudged reasons (NULL:
    the old rows say nothing of it; their red stays as recorded)."""
    conn.execute(sa.text("ALTER TABLE runs ADD COLUMN version INTEGER NOT NULL DEFAULT 1"))
    conn.execute(sa.text("ALTER TABLE cells ADD COLUMN unjudged VARCHAR(20)"))
    # The library audit's (issue 47): the cell's stack line and what the atlas keeps of its table.
    conn.execute(sa.text("ALTER TABLE cells ADD COLUMN libraries_line VARCHAR(500)"))
    conn.execute(sa.text("ALTER TABLE cells ADD COLUMN libraries TEXT"))
    conn.execute(sa.text("ALTER TABLE cases ADD COLUMN unjudged VARCHAR(20)"))
    # A case that passed on both sides at a cost (fallback, memory, slower): the backends and ratios.
    for column, kind in (("backend", "VARCHAR(64)"), ("control_backend", "VARCHAR(64)"), ("memory_ratio", "FLOAT"),
                         ("time_ratio", "FLOAT"), ("time_ratio_low", "FLOAT")):
        conn.execute(sa.text(f"ALTER TABLE cases ADD COLUMN {column} {kind}"))
    explored.create(conn)


# version -> the step that takes a database of that version to the next; a change of the tables
# adds a step here and bumps VERSION (tests/unit/history/test_schema.py runs each through migrate()).
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _judged}

metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version", metadata,
    sa.Column("id", sa.Integer, primary_key=True),  # always 1: one row
    sa.Column("version", sa.Integer, nullable=False),
)

runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run", sa.String(200), nullable=False, unique=True),
    sa.Column("at", sa.DateTime(), nullable=False),  # when it ran (its first cell's end)
    sa.Column("recorded", sa.DateTime(), nullable=False),
    sa.Column("version", sa.Integer, nullable=False, server_default="1"),  # the schema it was recorded under
)

cells = sa.Table(
    "cells", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("at", sa.DateTime(), nullable=False),  # the run's (ordering a series)
    # As long as a result directory's name allows (tree.NAME_MAX bytes); a case id is at most 160
    # characters (suites/records.py CASE_ID), a host 63 (rundir.HOST).
    sa.Column("cell", sa.String(255), nullable=False),
    sa.Column("gpu_key", sa.String(255), nullable=False),
    sa.Column("host", sa.String(100), nullable=False),  # "" when not recorded
    # The series a mark is judged in: cell id, GPU key and the stack as observed (stack_key).
    sa.Column("stack", sa.String(400), nullable=False),  # three values of at most 100 characters, named
    sa.Column("torch", sa.String(100)),
    sa.Column("cuda", sa.String(100)),
    sa.Column("cudnn", sa.String(100)),  # the cuDNN the process loaded
    sa.Column("driver", sa.String(100)),
    sa.Column("image", sa.String(200)),  # the container image's id (digest), None outside the container lane
    sa.Column("suite_version", sa.String(100)),
    sa.Column("verdict", sa.String(20), nullable=False),
    sa.Column("red", sa.Boolean, nullable=False),
    sa.Column("unjudged", sa.String(20)),  # why the night could not judge it (results/night.Unjudged); NULL: judged
    # The library audit's (results/libraries.py): its stack line (NULL: what loaded is what was
    # installed, or no audit) and, as JSON, what the atlas keeps of its table (libraries.kept).
    sa.Column("libraries_line", sa.String(500)),
    sa.Column("libraries", sa.Text),
    sa.UniqueConstraint("run_id", "cell", "gpu_key", "host", name="cells_one_per_run"),
    sa.Index("cells_series", "cell", "gpu_key", "stack", "at"),
)

# Each case id once (49 characters on average in the shipped suite): a case row holds its number,
# which halved the database (bench/history.py).
case_names = sa.Table(
    "case_names", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(300), nullable=False, unique=True),
)

cases = sa.Table(
    "cases", metadata,
    sa.Column("cell_id", sa.Integer, sa.ForeignKey("cells.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("case_id", sa.Integer, sa.ForeignKey("case_names.id"), primary_key=True),
    sa.Column("verdict", sa.String(20), nullable=False),
    sa.Column("red", sa.Boolean, nullable=False),
    sa.Column("outcome", sa.String(10), nullable=False),
    sa.Column("family", sa.String(100)),
    sa.Column("subcode", sa.Integer),  # cuDNN's status sub-code (--explain), e.g. 3002
    sa.Column("first_diff", sa.String(16)),  # sha256 prefix of the first differing log line, normalised
    sa.Column("duration_s", sa.Float),
    sa.Column("unjudged", sa.String(20)),  # as cells.unjudged
    # Passed on both sides at a cost (results.verdicts.Cost): the backends it and the control ran, and
    # its peak memory's and time's ratios to the control's (time_ratio_low: the bound slower judges by).
    sa.Column("backend", sa.String(64)),
    sa.Column("control_backend", sa.String(64)),
    sa.Column("memory_ratio", sa.Float),
    sa.Column("time_ratio", sa.Float),
    sa.Column("time_ratio_low", sa.Float),
    # The red rows alone, by cell row: what the marks read (a few per cell among hundreds of greens).
    sa.Index("cases_red", "cell_id", postgresql_where=sa.text("red"), sqlite_where=sa.text("red")),
    # SQLite: the rows kept in their key's b-tree, not beside it (a rowid table would store each
    # case name twice, in the table and in its key's index: a third of the file).
    sqlite_with_rowid=False,
)


# What `convmatrix explore` tried (explore/, docs/explore.md): each configuration once per cell
# (its key, explore/space.key), with what it found there; a nightly's explore never draws it again.
explored = sa.Table(
    "explored", metadata,
    sa.Column("cell", sa.String(255), primary_key=True),
    sa.Column("key", sa.String(16), primary_key=True),
    sa.Column("seed", sa.BigInteger, nullable=False),
    sa.Column("found", sa.String(100)),  # a failure family or a cost verdict; NULL: nothing
    sa.Column("at", sa.DateTime(), nullable=False),
)


def check(conn: Connection) -> None:
    """For the readers (report --history, history): the database holds this version's tables, else
    BadInput. A reader never makes or migrates them: a mistyped URL read as a new, empty history
    marked every red cell first-red; only `record` makes and migrates."""
    if not sa.inspect(conn).has_table("schema_version"):
        raise BadInput("no convmatrix history here: nothing was recorded (`convmatrix record RUN` makes it)")
    found = conn.execute(sa.select(schema_version.c.version).where(schema_version.c.id == 1)).scalar()
    if found is None:
        raise BadInput("the history's schema_version table has no row: not a convmatrix history")
    if found != VERSION:
        newer = "upgrade convmatrix" if found > VERSION else "`convmatrix record` migrates it"
        raise BadInput(f"the history is at schema version {found}, this convmatrix reads {VERSION}: {newer}")


def migrate(conn: Connection) -> None:
    """Tables made on a database without them, older versions stepped up to VERSION; a newer
    version than this tool knows is BadInput (never written to)."""
    if conn.dialect.name == "postgresql":
        # Two first recorders at once: one makes the tables, the other waits here, then finds them.
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(7301036)"))
    inspector = sa.inspect(conn)
    if not inspector.has_table("schema_version"):
        others = inspector.get_table_names()
        if others:
            # Another program's database (a mistyped URL, a shared one): never add tables beside its own.
            raise BadInput(f"the database already holds {len(others)} other table(s) ({', '.join(sorted(others)[:3])}"
                           f"{', ...' if len(others) > 3 else ''}) and no convmatrix history: give convmatrix a "
                           "database (or PostgreSQL schema) of its own")
        metadata.create_all(conn)
        conn.execute(schema_version.insert().values(id=1, version=VERSION))
        return
    found = conn.execute(sa.select(schema_version.c.version).where(schema_version.c.id == 1)).scalar()
    if found is None:
        raise BadInput("the history's schema_version table has no row: not a convmatrix history")
    if found > VERSION:
        raise BadInput(f"the history is at schema version {found}; this convmatrix knows up to {VERSION}: "
                       f"upgrade convmatrix")
    while found < VERSION:
        step = MIGRATIONS.get(found)
        if step is None:
            raise BadInput(f"the history is at schema version {found}, which this convmatrix cannot migrate")
        step(conn)
        found += 1
        conn.execute(schema_version.update().where(schema_version.c.id == 1).values(version=found))
