"""A judged night's cells and cases against the history (marks.judge): for each, its series (the
same cell, GPU key and observed stack, record.stack_key) read from the database, oldest first: the
runs recorded with an EARLIER time than tonight's (a run at the same time is neither's past; one
recorded later is not tonight's past either, so an old night re-rendered after newer ones gives
its own marks again), tonight last as the night judged it.

Only judged rows make a series: an unjudged one (its control sick, an excused or infrastructure
cell: results/night.Unjudged) says nothing of red or green, and is left out of it, tonight's too.

Red is the regression policy's (the stored `red`) unless a --fail-on list names others (`fallback,
first-red`): then a row is red when it was red under any of them, read from the verdicts the night
stored (results/night.case_fails decides which verdicts those are, as it did tonight)."""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convmatrix.history import schema
from convmatrix.history.marks import Marks, Run, judge
from convmatrix.history.record import clean, gpu_of, stack_key, utc
from convmatrix.results.night import Night, case_fails, red
from convmatrix.results.outcomes import Verdict

CHUNK = 500  # cell names bound in one statement (SQLite's bound parameters are limited)
Series = tuple[str, str, str]  # cell, GPU key, stack
Past = dict[Series, list[tuple[tuple[int, ...], Run, bool]]]


def failing(policy: str) -> tuple[bool, list[str]]:
    """Under this policy: whether the stored `red` counts (the regression policy's: a night recorded
    under schema 1 keeps it as judged then), and the case verdicts that are red too (a fallback
    under `fallback`; INVALID and not-run under every policy)."""
    return ("regression" in policy.split(","),
            sorted(str(v) for v in Verdict if v not in (Verdict.CONTROL, Verdict.NO_CONTROL) and case_fails(v, policy)))


def red_row(policy: str) -> sa.ColumnElement[bool]:
    """The WHERE that makes a case row red under policy (the partial index's own for regression)."""
    stored, verdicts = failing(policy)
    k = schema.cases.c
    if policy == "regression":
        return sa.text("cases.red")  # type: ignore[return-value]
    return sa.or_(*([sa.text("cases.red")] if stored else []), k.verdict.in_(verdicts))


def past(conn: Connection, cells: list[str], before: datetime.datetime, policy: str = "regression") -> Past:
    """Every series of these cells: its judged runs recorded before `before`, oldest first, as
    (cell row ids, run, red). Two hosts' rows of one run are one entry, red when either is, with
    both rows' ids (a case red on either host was red in that run). One query per CHUNK cells,
    not one per cell: a fleet's report has a thousand. Under another policy than regression, a
    row is also red when its own verdict or one of its cases' is red under it."""
    c, r, k = schema.cells.c, schema.runs.c, schema.cases.c
    stored, verdicts = failing(policy)
    cell_red: sa.ColumnElement[Any] = c.red
    if policy != "regression":
        held = sa.exists().where(k.cell_id == c.id, k.verdict.in_(verdicts))
        cell_red = sa.or_(*([c.red] if stored else []), c.verdict.in_(verdicts), held)
    names = sorted(set(cells))
    found: dict[Series, dict[str, tuple[tuple[int, ...], Run, bool]]] = {}
    for start in range(0, len(names), CHUNK):
        rows = conn.execute(sa.select(c.id, c.cell, c.gpu_key, c.stack, r.run, c.at, cell_red)
                            .join_from(schema.cells, schema.runs)
                            .where(c.cell.in_(names[start:start + CHUNK]), c.at < utc(before), c.unjudged.is_(None))
                            .order_by(c.at, r.run, c.id))
        for ident, cell, gpu, stack, key, at, was in rows:
            merged = found.setdefault((cell, gpu, stack), {})
            earlier = merged.get(key)
            ids = (*earlier[0], ident) if earlier is not None else (ident,)
            merged[key] = (ids, Run(run=key, at=at), bool(was) or (earlier is not None and earlier[2]))
    return {series: list(runs.values()) for series, runs in found.items()}


def red_cases(conn: Connection, cells: list[str], before: datetime.datetime,
              policy: str = "regression") -> tuple[dict[int, set[str]], dict[int, set[str]]]:
    """Cell row id -> its red cases, and -> its unjudged cases, for the rows of these cells before
    `before`: the red rows through the partial index cases_red (its WHERE written as the index's,
    so both back-ends use it; under another policy, also the rows whose verdict is red under it);
    the unjudged ones are few (a cell INVALID beside a sick control)."""
    c, k, n = schema.cells.c, schema.cases.c, schema.case_names.c
    names = sorted(set(cells))
    red: dict[int, set[str]] = {}
    unjudged: dict[int, set[str]] = {}
    for start in range(0, len(names), CHUNK):
        chosen = c.cell.in_(names[start:start + CHUNK])
        joined = schema.cases.join(schema.cells).join(schema.case_names)
        for ident, name in conn.execute(sa.select(k.cell_id, n.name).select_from(joined)
                                        .where(red_row(policy), chosen, c.at < utc(before))):
            red.setdefault(ident, set()).add(name)
        for ident, name in conn.execute(sa.select(k.cell_id, n.name).select_from(joined)
                                        .where(k.unjudged.is_not(None), c.unjudged.is_(None), chosen,
                                               c.at < utc(before))):
            unjudged.setdefault(ident, set()).add(name)
    return red, unjudged


def recorded_at(conn: Connection, run: str) -> datetime.datetime | None:
    """When the history holds this run key, the time it was recorded with (a re-render keeps it)."""
    return conn.execute(sa.select(schema.runs.c.at).where(schema.runs.c.run == run)).scalar()


def marks(conn: Connection, night: Night, policy: str = "regression") -> Marks:
    """Each judged cell's and case's mark tonight (night.run, night.at, or the time the history
    holds for that key); none where there is nothing to say. policy: the --fail-on policies that
    make a row red (first-red then applies to their findings: `fallback,first-red` marks a
    fallback first-red on its first night)."""
    schema.check(conn)
    at = recorded_at(conn, clean(night.run)) or utc(night.at)
    tonight = Run(run=night.run, at=at)
    judged = Marks()
    names = [clean(cell.cell) for cell in night.cells]
    every = past(conn, names, at, policy)
    reds, unjudged = red_cases(conn, names, at, policy)
    for cell in night.cells:
        if cell.unjudged is not None:
            continue  # no verdict of its own tonight: nothing to say of red or green
        series = every.get((clean(cell.cell), gpu_of(cell.place), stack_key(cell.result.observed)), [])
        mark = judge([*((r, was) for _, r, was in series), (tonight, cell.unjudged is None and red(cell, policy))])
        if mark is not None:
            judged.cells[cell.where] = mark
        was_red = {name for ids, _, _ in series for ident in ids for name in reds.get(ident, ())}
        for case in cell.cases:
            name = clean(case.case)
            red_now = case.unjudged is None and case_fails(case.verdict, policy)
            if case.unjudged is not None or (not red_now and name not in was_red):
                continue  # not judged tonight, or never red: nothing to say
            states = [(r, any(name in reds.get(ident, ()) for ident in ids)) for ids, r, _ in series
                      if not all(name in unjudged.get(ident, ()) for ident in ids)]
            mark = judge([*states, (tonight, red_now)])
            if mark is not None:
                judged.cases[(cell.where, case.case)] = mark
    return judged
