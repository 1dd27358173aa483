"""Recording a judged run into the history: one transaction per run, idempotent, safe beside
other recorders (docs/contracts.md: The history database).

The run is recorded as the report judged it: anything shaped like a report (report.model.Report
is one) with each cell's and case's verdict from the one order (results/verdicts.py). The cli
builds the report; this module needs nothing of report/."""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convmatrix.history import backends, schema
from convmatrix.results.first_diff import Difference, normalise
from convmatrix.results.outcomes import Outcome, Verdict
from convmatrix.results.read import Explanation
from convmatrix.results.verdicts import RED

STACK_KEYS = ("torch", "cuda", "cudnn")


class RecordedCell(Protocol):
    @property
    def cell(self) -> str: ...

    @property
    def gpu_key(self) -> str: ...

    @property
    def host(self) -> str | None: ...

    @property
    def observed(self) -> Mapping[str, Any]: ...

    @property
    def verdict(self) -> Verdict: ...


class RecordedCase(Protocol):
    @property
    def cell(self) -> str: ...

    @property
    def gpu(self) -> str: ...

    @property
    def case(self) -> str: ...

    @property
    def verdict(self) -> Verdict: ...

    @property
    def outcome(self) -> Outcome: ...

    @property
    def family(self) -> str | None: ...

    @property
    def explained(self) -> Explanation | None: ...

    @property
    def first_diff(self) -> Difference | None: ...

    @property
    def duration_s(self) -> float | None: ...


class Recordable(Protocol):
    @property
    def cells(self) -> Sequence[RecordedCell]: ...

    @property
    def cases(self) -> Sequence[RecordedCase]: ...


@dataclass(frozen=True, kw_only=True)
class Recorded:
    run: str
    added: int  # cells added by this recording
    present: int  # cells the history already held for this run (recorded before: nothing added)


def gpu_of(place: str) -> str:
    """The GPU key of a report's place (`<gpu-key>@<host>` in a report of several hosts)."""
    return place.partition("@")[0]


def stack_key(observed: Mapping[str, Any]) -> str:
    """The stack a series is judged on: torch, CUDA and the cuDNN the process loaded, as observed
    ("" for a cell that never ran: its own series)."""
    if not any(observed.get(k) for k in STACK_KEYS):
        return ""
    return ";".join(f"{k}={_text(observed.get(k)) or ''}" for k in STACK_KEYS)


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


def _text(value: object, limit: int = 100) -> str | None:
    return None if value is None or value == "" else str(value)[:limit]


def record(conn: Connection, report: Recordable, *, run: str, at: datetime.datetime) -> Recorded:
    """The run's cells and cases, in conn's transaction (the caller's `begin()`: all or nothing).
    A cell already recorded for this run (the same run, GPU key and host) is left as it was."""
    schema.migrate(conn)
    now = utc(datetime.datetime.now(datetime.UTC))
    backends.insert_new(conn, schema.runs, [{"run": run, "at": utc(at), "recorded": now}])
    run_id, at = conn.execute(sa.select(schema.runs.c.id, schema.runs.c.at).where(schema.runs.c.run == run)).one()
    key = [(c.cell, gpu_of(c.gpu_key), c.host or "") for c in report.cells]
    present = existing(conn, run_id)
    rows = []
    for cell, (name, gpu, host) in zip(report.cells, key, strict=True):
        if (name, gpu, host) in present:
            continue
        seen = cell.observed
        rows.append({"run_id": run_id, "at": at, "cell": name, "gpu_key": gpu, "host": host,
                     "stack": stack_key(seen), "torch": _text(seen.get("torch")), "cuda": _text(seen.get("cuda")),
                     "cudnn": _text(seen.get("cudnn")), "driver": _text(seen.get("driver")),
                     "image": _text(seen.get("image_id"), 200), "suite_version": _text(seen.get("suite_version")),
                     "verdict": str(cell.verdict), "red": cell.verdict in RED})
    backends.insert_new(conn, schema.cells, rows)
    ids = existing(conn, run_id)
    hosts = {(c.cell, c.gpu_key): h for c, (_, _, h) in zip(report.cells, key, strict=True)}
    fresh = {(r["cell"], r["gpu_key"], r["host"]) for r in rows}
    mine = [(case, (case.cell, gpu_of(case.gpu), hosts.get((case.cell, case.gpu), ""))) for case in report.cases]
    mine = [(case, where) for case, where in mine if where in fresh]
    numbers = case_numbers(conn, {case.case for case, _ in mine})
    cases = []
    for case, where in mine:
        explained = case.explained
        cases.append({"cell_id": ids[where], "case_id": numbers[case.case], "verdict": str(case.verdict),
                      "red": case.verdict in RED, "outcome": str(case.outcome), "family": case.family,
                      "subcode": explained.subcode if explained else None,
                      "first_diff": diff_hash(case.first_diff), "duration_s": case.duration_s})
    backends.insert_new(conn, schema.cases, cases)
    return Recorded(run=run, added=len(rows), present=len(present))


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
