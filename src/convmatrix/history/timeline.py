"""`convmatrix history [CELL [CASE]]`: the recorded runs of a cell (or of every cell), newest
last, each with its verdict; of one case, that case's verdict per run."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convmatrix.history import schema

LIMIT = 400  # runs shown by default: a year of nightlies and some


@dataclass(frozen=True, kw_only=True)
class Entry:
    run: str
    date: str  # ISO date-time of the run
    cell: str
    gpu_key: str
    host: str
    stack: str
    verdict: str  # the cell's, or with a case, the case's ("absent": the run did not have it)
    red: bool
    family: str | None = None
    subcode: int | None = None
    duration_s: float | None = None
    cells: int = 1  # without CELL: the run's cells; verdict then the worst red count
    unjudged: str | None = None  # why the night could not judge it (results/night.Unjudged)
    version: int = 2  # the schema it was recorded under (1: before the judged night; red as judged then)

    def json(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items()}


def runs(conn: Connection, limit: int = LIMIT) -> list[Entry]:
    """Without CELL: each recorded run with how many of its cells were red."""
    schema.check(conn)
    c, r = schema.cells.c, schema.runs.c
    red = sa.func.sum(sa.case((c.red, 1), else_=0))
    rows = conn.execute(sa.select(r.run, r.at, sa.func.count(c.id), red).join_from(schema.runs, schema.cells)
                        .group_by(r.id, r.run, r.at).order_by(r.at.desc(), r.run.desc()).limit(limit)).all()
    return [Entry(run=run, date=at.isoformat(), cell="", gpu_key="", host="", stack="",
                  verdict=f"{int(reds or 0)} red", red=bool(reds), cells=count)
            for run, at, count, reds in reversed(rows)]


def cell_ids(conn: Connection) -> list[str]:
    """Every cell id the history holds (a fleet's few thousand at most)."""
    schema.check(conn)
    return list(conn.execute(sa.select(schema.cells.c.cell).distinct()).scalars())


def of_cell(conn: Connection, cell: str, case: str | None = None, limit: int = LIMIT) -> list[Entry]:
    """The cell's runs (every GPU key and host), oldest first; with case, that case's verdicts."""
    schema.check(conn)
    c, r, k = schema.cells.c, schema.runs.c, schema.cases.c
    if case is None:
        query = (sa.select(r.run, c.at, c.cell, c.gpu_key, c.host, c.stack, c.verdict, c.red, r.version, c.unjudged)
                 .join_from(schema.cells, schema.runs).where(c.cell == cell))
    else:
        n = schema.case_names.c
        number = sa.select(n.id).where(n.name == case).scalar_subquery()
        query = (sa.select(r.run, c.at, c.cell, c.gpu_key, c.host, c.stack, k.verdict, k.red, r.version,
                           sa.func.coalesce(k.unjudged, c.unjudged), k.family, k.subcode, k.duration_s)
                 .select_from(schema.cells.join(schema.runs).outerjoin(
                     schema.cases, sa.and_(k.cell_id == c.id, k.case_id == number)))
                 .where(c.cell == cell))
    rows = conn.execute(query.order_by(c.at.desc(), r.run.desc(), c.gpu_key, c.host).limit(limit)).all()
    found = []
    for row in reversed(rows):
        run, at, name, gpu, host, stack, verdict, red, version, unjudged = row[:10]
        extra = dict(zip(("family", "subcode", "duration_s"), row[10:], strict=False))
        found.append(Entry(run=run, date=at.isoformat(), cell=name, gpu_key=gpu, host=host, stack=stack,
                           verdict=verdict or "absent", red=bool(red), unjudged=unjudged, version=version, **extra))
    return found


@dataclass(frozen=True, kw_only=True)
class Square:
    """A cell's verdict on one night, for the history page (report/history_page.py)."""

    run: str
    cell: str
    gpu_key: str
    host: str
    verdict: str
    red: bool
    unjudged: str | None


@dataclass(frozen=True, kw_only=True)
class Sheet:
    """The newest nights (oldest first) and every cell's verdict on each: the history page's grid."""

    nights: tuple[tuple[str, str], ...]  # (run, ISO date-time)
    squares: tuple[Square, ...]
    red_before: frozenset[tuple[str, str, str]] = frozenset()  # (cell, GPU key, host) red before the first night


def sheet(conn: Connection, limit: int = LIMIT) -> Sheet:
    """The newest `limit` runs and each of their cells, in two queries (a year of a fleet's
    nightlies: some tens of thousands of rows)."""
    schema.check(conn)
    c, r = schema.cells.c, schema.runs.c
    newest = sa.select(r.id).order_by(r.at.desc(), r.run.desc()).limit(limit).subquery()
    nights = conn.execute(sa.select(r.id, r.run, r.at).where(r.id.in_(sa.select(newest.c.id)))
                          .order_by(r.at, r.run)).all()
    runs_by_id = {number: run for number, run, _ in nights}
    rows = conn.execute(sa.select(c.run_id, c.cell, c.gpu_key, c.host, c.verdict, c.red, c.unjudged)
                        .where(c.run_id.in_(sa.select(newest.c.id)))).all()
    before: set[tuple[str, str, str]] = set()
    if nights:  # a series red before the page's first night: its first red there is not first-red
        before = {(cell, gpu, host) for cell, gpu, host in conn.execute(
            sa.select(c.cell, c.gpu_key, c.host).where(c.red, c.at < nights[0][2]).distinct())}
    return Sheet(nights=tuple((run, at.isoformat()) for _, run, at in nights), red_before=frozenset(before),
                 squares=tuple(Square(run=runs_by_id[number], cell=cell, gpu_key=gpu, host=host, verdict=verdict,
                                      red=bool(red), unjudged=unjudged)
                               for number, cell, gpu, host, verdict, red, unjudged in rows))
