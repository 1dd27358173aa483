"""Recording a judged night into the history: one transaction per run, idempotent, safe beside
other recorders (docs/contracts.md: The history database).

The night is stored as results/night.py judged it: each cell's and case's verdict, whether it
was judged at all (its unjudged reason), and red as the night says (judged, and failing under the
regression policy). This module judges nothing."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convmatrix.errors import BadInput
from convmatrix.history import backends, schema
from convmatrix.results import libraries
from convmatrix.results.first_diff import Difference, normalise
from convmatrix.results.night import JudgedCell, Night
from convmatrix.results.verdicts import Cost

STACK_KEYS = ("torch", "cuda", "cudnn")


@dataclass(frozen=True, kw_only=True)
class Recorded:
    run: str
    added: int  # cells added by this recording
    present: int  # cells the history already held for this run (recorded before: nothing added)


def gpu_of(place: str) -> str:
    """The GPU key of a report's place (`<gpu-key>@<host>` in a report of several hosts), as stored."""
    return clean(place.partition("@")[0])


def stack_key(observed: Mapping[str, Any]) -> str:
    """The stack a series is judged on: torch, CUDA and the cuDNN the process loaded, as observed
    ("" for a cell that never ran: its own series)."""
    if not any(observed.get(k) for k in STACK_KEYS):
        return ""
    return ";".join(f"{k}={_text(observed.get(k)) or ''}" for k in STACK_KEYS)


def cost_columns(cost: Cost | None) -> dict[str, object]:
    """A case's cost against the control (results.verdicts.Cost) as the cases table keeps it."""
    if cost is None:
        return {"backend": None, "control_backend": None, "memory_ratio": None, "time_ratio": None,
                "time_ratio_low": None}
    return {"backend": _text(cost.backend), "control_backend": _text(cost.control_backend),
            "memory_ratio": cost.memory_ratio, "time_ratio": cost.time_ratio, "time_ratio_low": cost.time_low}


def library_columns(cell: JudgedCell) -> dict[str, object]:
    """A cell's library audit as the cells table keeps it: its stack line and, as JSON, what the
    atlas keeps of its table (results/libraries.kept: stems, versions, origins; no path)."""
    audited = cell.result.cases.get(libraries.CASE)
    rows = audited.libraries if audited is not None else ()
    found = libraries.kept(rows)
    return {"libraries_line": _text(libraries.stack_line(rows), 500),
            "libraries": json.dumps(found, sort_keys=True, separators=(",", ":")) if found else None}


def diff_hash(found: Difference | None) -> str | None:
    """The first differing log line, normalised (results.first_diff.normalise), as a short hash:
    the same failure on two nights hashes alike whatever its addresses and numbers."""
    if found is None:
        return None
    return hashlib.sha256(normalise(found.text).encode()).hexdigest()[:16]


def utc(moment: datetime.datetime) -> datetime.datetime:
    """A moment as the history stores it: UTC without a zone (SQLite's DATETIME keeps no zone, so
    both back-ends store the same thing)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.UTC).replace(tzinfo=None)
    return moment


# What no database stores alike: a lone surrogate (valid JSON, \udfff, is no UTF-8: SQLite and
# psycopg refuse to encode it), NUL (no PostgreSQL text holds it; SQLite does), and the other
# control characters (C0, DEL, C1), which a history line would print raw.
UNSTORABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def clean(text: str) -> str:
    """A string as the history stores it, the same on both back-ends: each character above written
    as a \\uXXXX escape, the rest as it is. Every string that reaches the history goes through
    here (the series key is made of cleaned values), so a cell's env.json can hold anything."""
    return text if UNSTORABLE.search(text) is None else UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _text(value: object, limit: int = 100) -> str | None:
    return None if value is None or value == "" else clean(str(value))[:limit]


def record(conn: Connection, night: Night) -> Recorded:
    """The night's cells and cases, in conn's transaction (the caller's `begin()`: all or nothing).
    A cell already recorded for this run (the same run, GPU key and host) is left as it was; a run
    key recorded before with another time is BadInput (two nights under one key, or shards that do
    not share the night's time: results/night.shared_time)."""
    if night.audit_only:
        # One case of each cell ran (`run --audit-only`): no night of the cells (cli/report.identified says so first).
        raise BadInput(f"run {night.run}: an audit-only run is kept out of the history")
    schema.migrate(conn)
    run = clean(night.run)
    now = utc(datetime.datetime.now(datetime.UTC))
    backends.insert_new(conn, schema.runs, [{"run": run, "at": utc(night.at), "recorded": now,
                                             "version": schema.VERSION}])
    run_id, at = conn.execute(sa.select(schema.runs.c.id, schema.runs.c.at).where(schema.runs.c.run == run)).one()
    if not same_time(at, utc(night.at)):
        raise BadInput(f"run {run} is recorded at {at.isoformat()} and this one is at {utc(night.at).isoformat()}: "
                       "one key, one time (give the shards one --at, or this run another --run-id)")
    present = existing(conn, run_id)
    rows, mine = [], []
    for cell in night.cells:
        where = (clean(cell.cell), gpu_of(cell.place), clean(cell.result.host or ""))
        if where in present:
            continue
        seen = cell.result.observed
        rows.append({"run_id": run_id, "at": at, "cell": where[0], "gpu_key": where[1], "host": where[2],
                     "stack": stack_key(seen), "torch": _text(seen.get("torch")), "cuda": _text(seen.get("cuda")),
                     "cudnn": _text(seen.get("cudnn")), "driver": _text(seen.get("driver")),
                     "image": _text(seen.get("image_id"), 200), "suite_version": _text(seen.get("suite_version")),
                     "verdict": str(cell.verdict), "red": cell.red,
                     "unjudged": str(cell.unjudged) if cell.unjudged else None, **library_columns(cell)})
        mine.append((cell, where))
    backends.insert_new(conn, schema.cells, rows)
    ids = existing(conn, run_id)
    numbers = case_numbers(conn, {clean(case.case) for cell, _ in mine for case in cell.cases})
    cases = []
    for cell, where in mine:
        explained = cell.result.explained
        for case in cell.cases:
            why = explained.get(case.case)
            cases.append({"cell_id": ids[where], "case_id": numbers[clean(case.case)], "verdict": str(case.verdict),
                          "red": case.red, "outcome": str(case.outcome), "family": _text(case.family),
                          "subcode": why.subcode if why else None, "first_diff": diff_hash(case.first_diff),
                          "duration_s": case.record.duration_s if case.record else None,
                          "unjudged": str(case.unjudged) if case.unjudged else None,
                          **cost_columns(case.cost)})
    backends.insert_new(conn, schema.cases, cases)
    return Recorded(run=run, added=len(rows), present=len(present))


def same_time(stored: datetime.datetime, given: datetime.datetime) -> bool:
    """The stored time and this run's, to the millisecond a plan's stamp has (a database may keep
    fewer digits than Python)."""
    return abs((utc(stored) - given).total_seconds()) < 0.001


CHUNK = 500  # names bound in one statement (SQLite's bound parameters are limited)


def case_numbers(conn: Connection, names: set[str]) -> dict[str, int]:
    """Each case id's number (case_names), new ones added (two recorders adding one: once)."""
    ordered = sorted(names)
    backends.insert_new(conn, schema.case_names, [{"name": name} for name in ordered])
    n = schema.case_names.c
    found: dict[str, int] = {}
    for start in range(0, len(ordered), CHUNK):
        found.update((name, ident) for ident, name in conn.execute(
            sa.select(n.id, n.name).where(n.name.in_(ordered[start:start + CHUNK]))))
    return found


def existing(conn: Connection, run_id: int) -> dict[tuple[str, str, str], int]:
    c = schema.cells.c
    found = conn.execute(sa.select(c.cell, c.gpu_key, c.host, c.id).where(c.run_id == run_id))
    return {(cell, gpu, host): ident for cell, gpu, host, ident in found}
