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


def past(conn: Connection, cell: str, gpu: str, stack: str, run: str) -> list[tuple[int, Run, bool]]:
    """The series' recorded runs before tonight's (run), oldest first: (cell row id, run, red). Two
    hosts' rows of one run are one entry, red when either is."""
    c, r = schema.cells.c, schema.runs.c
    rows = conn.execute(sa.select(c.id, r.run, c.at, c.red).join_from(schema.cells, schema.runs)
                        .where(c.cell == cell, c.gpu_key == gpu, c.stack == stack, r.run != run)
                        .order_by(c.at, r.run, c.id))
    merged: dict[str, tuple[int, Run, bool]] = {}
    for ident, key, at, red in rows:
        before = merged.get(key)
        merged[key] = (ident, Run(run=key, at=at), bool(red) or (before is not None and before[2]))
    return list(merged.values())


def red_cases(conn: Connection, ids: Iterable[int]) -> dict[str, set[int]]:
    """Case name -> the cell rows (of ids) where it was red."""
    found: dict[str, set[int]] = {}
    wanted = list(ids)
    c = schema.cases.c
    for start in range(0, len(wanted), 500):  # bound the bound parameters of one statement
        chunk = wanted[start:start + 500]
        for ident, name in conn.execute(sa.select(c.cell_id, c.name).where(c.cell_id.in_(chunk), c.red)):
            found.setdefault(name, set()).add(ident)
    return found


def marks(conn: Connection, report: Recordable, *, run: str, at: datetime.datetime) -> Marks:
    """Each cell's and case's mark in report (tonight: run, at); none where there is nothing to say."""
    schema.migrate(conn)
    tonight = Run(run=run, at=utc(at))
    judged = Marks()
    cases_of: dict[str, list[tuple[str, bool]]] = {}
    for case in report.cases:
        cases_of.setdefault(f"{case.cell}@{case.gpu}", []).append((case.case, case.verdict in RED))
    for cell in report.cells:
        where = f"{cell.cell}@{cell.gpu_key}"
        series = past(conn, cell.cell, gpu_of(cell.gpu_key), stack_key(cell.observed), run)
        mark = judge([*((r, red) for _, r, red in series), (tonight, cell.verdict in RED)])
        if mark is not None:
            judged.cells[where] = mark
        ids = [ident for ident, _, _ in series]
        was_red = red_cases(conn, ids) if ids else {}
        for name, red_now in cases_of.get(where, []):
            reds = was_red.get(name)
            if not red_now and not reds:
                continue  # never red: nothing to say
            states = [(r, ident in reds if reds else False) for ident, r, _ in series]
            mark = judge([*states, (tonight, red_now)])
            if mark is not None:
                judged.cases[(where, name)] = mark
    return judged
