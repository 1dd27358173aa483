"""A report's cells and cases judged against the history (marks.judge): for each, its series
(the same cell, GPU key and observed stack, record.stack_key) read from the database, oldest
first, tonight's run left out of it and put last as the report says it is."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convmatrix.history import schema
from convmatrix.history.marks import Marks, Run, judge
from convmatrix.history.record import Recordable, gpu_of, stack_key, utc
from convmatrix.results.verdicts import RED

CHUNK = 500  # cell names bound in one statement (SQLite's bound parameters are limited)
Series = tuple[str, str, str]  # cell, GPU key, stack


def past(conn: Connection, cells: Iterable[str], run: str) -> dict[Series, list[tuple[tuple[int, ...], Run, bool]]]:
    """Every series of these cells: its recorded runs before tonight's (run), oldest first, as
    (cell row ids, run, red). Two hosts' rows of one run are one entry, red when either is, with
    both rows' ids (a case red on either host was red in that run). One query per CHUNK cells,
    not one per cell: a fleet's report has a thousand."""
    c, r = schema.cells.c, schema.runs.c
    names = sorted(set(cells))
    found: dict[Series, dict[str, tuple[tuple[int, ...], Run, bool]]] = {}
    for start in range(0, len(names), CHUNK):
        rows = conn.execute(sa.select(c.id, c.cell, c.gpu_key, c.stack, r.run, c.at, c.red)
                            .join_from(schema.cells, schema.runs)
                            .where(c.cell.in_(names[start:start + CHUNK]), r.run != run)
                            .order_by(c.at, r.run, c.id))
        for ident, cell, gpu, stack, key, at, red in rows:
            merged = found.setdefault((cell, gpu, stack), {})
            before = merged.get(key)
            ids = (*before[0], ident) if before is not None else (ident,)
            merged[key] = (ids, Run(run=key, at=at), bool(red) or (before is not None and before[2]))
    return {series: list(runs.values()) for series, runs in found.items()}


def red_cases(conn: Connection, cells: Iterable[str]) -> dict[int, set[str]]:
    """Cell row id -> its red cases, for every recorded row of these cells: the red rows alone,
    through the partial index cases_red (its WHERE written as the index's, so both back-ends use it)."""
    c, k, n = schema.cells.c, schema.cases.c, schema.case_names.c
    names = sorted(set(cells))
    found: dict[int, set[str]] = {}
    for start in range(0, len(names), CHUNK):
        rows = conn.execute(sa.select(k.cell_id, n.name)
                            .select_from(schema.cases.join(schema.cells).join(schema.case_names))
                            .where(sa.text("cases.red"), c.cell.in_(names[start:start + CHUNK])))
        for ident, name in rows:
            found.setdefault(ident, set()).add(name)
    return found


def marks(conn: Connection, report: Recordable, *, run: str, at: datetime.datetime) -> Marks:
    """Each cell's and case's mark in report (tonight: run, at); none where there is nothing to say."""
    schema.check(conn)
    tonight = Run(run=run, at=utc(at))
    judged = Marks()
    cases_of: dict[str, list[tuple[str, bool]]] = {}
    for case in report.cases:
        cases_of.setdefault(f"{case.cell}@{case.gpu}", []).append((case.case, case.verdict in RED))
    names = [cell.cell for cell in report.cells]
    every = past(conn, names, run)
    reds = red_cases(conn, names)
    for cell in report.cells:
        where = f"{cell.cell}@{cell.gpu_key}"
        series = every.get((cell.cell, gpu_of(cell.gpu_key), stack_key(cell.observed)), [])
        mark = judge([*((r, red) for _, r, red in series), (tonight, cell.verdict in RED)])
        if mark is not None:
            judged.cells[where] = mark
        was_red = {name for ids, _, _ in series for ident in ids for name in reds.get(ident, ())}
        for name, red_now in cases_of.get(where, []):
            if not red_now and name not in was_red:
                continue  # never red: nothing to say
            states = [(r, any(name in reds.get(ident, ()) for ident in ids)) for ids, r, _ in series]
            mark = judge([*states, (tonight, red_now)])
            if mark is not None:
                judged.cases[(where, name)] = mark
    return judged
