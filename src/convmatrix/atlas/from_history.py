"""`convmatrix export --history URL`: the runs recorded in a history database as a bundle
(docs/atlas.md, "From the history database").

The history holds each run as `report` judged it when `record` stored it: per cell the GPU key,
the stack as observed and the verdict; per case the verdict, outcome, family and cuDNN sub-code.
That is what such a bundle carries, each value fitted to the bundle's patterns as export fits a
run folder's (atlas/export.py). The history keeps no GPU record, no lane, no message, no
parameters and no sources, so a GPU is what its key says, the lane is read from the cell id
(a matrix's cell ids start with their lane) or the image, a failing case's reason is built from
its family and sub-code alone, and there is no repro, known issue or source: `dropped` says so.
The host column and the run's key are never read into the bundle (the key only into the digest)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convmatrix.atlas import bundle, export
from convmatrix.atlas.model import Bundle, Case, Cell, Run
from convmatrix.atlas.scrub import Secrets, secrets_here
from convmatrix.history import schema
from convmatrix.matrix.values import LANES
from convmatrix.results import families
from convmatrix.results.outcomes import Outcome

LAST = 30  # runs exported when --last is not given: a month of nightlies
FROM_HISTORY = ("repro fields, messages, known-issue ids and sources: the history keeps none of them "
                "(export the run folders for them)",
                "the history's host column and run keys (a run is an opaque digest)")


def bundle_of(conn: Connection, *, last: int, fleet: str | None, today: datetime.date) -> Bundle:
    """The newest `last` recorded runs (at most bundle.MAX_RUNS), oldest first."""
    schema.check(conn)
    r = schema.runs.c
    found = conn.execute(sa.select(r.id, r.run, r.at).order_by(r.at.desc(), r.run.desc())
                         .limit(min(last, bundle.MAX_RUNS))).all()
    drops = export.Drops()
    # The hosts these runs recorded: never put in the bundle, only kept out of what is (a case id
    # or a version label that names one).
    hosts = conn.execute(sa.select(schema.cells.c.host).distinct()
                         .where(schema.cells.c.run_id.in_([ident for ident, _, _ in found]))).scalars()
    secrets = secrets_here(hosts=[h for h in hosts if h])
    runs = tuple(_run(conn, ident, key, at, today, drops, secrets) for ident, key, at in reversed(found))
    made = export.assembled(runs, fleet=fleet, today=today, drops=drops)
    return Bundle(fleet=made.fleet, created=made.created, tool=made.tool, runs=made.runs,
                  dropped=(*FROM_HISTORY, *made.dropped)[:bundle.MAX_DROPPED])


def _run(conn: Connection, ident: int, key: str, at: datetime.datetime, today: datetime.date,
         drops: export.Drops, secrets: Secrets) -> Run:
    c, k, n = schema.cells.c, schema.cases.c, schema.case_names.c
    cells = conn.execute(sa.select(c.id, c.cell, c.gpu_key, c.torch, c.cuda, c.cudnn, c.driver, c.image, c.verdict,
                                   c.libraries)
                         .where(c.run_id == ident).order_by(c.cell, c.gpu_key, c.host).limit(bundle.MAX_CELLS)).all()
    cases: dict[int, list[Any]] = {}
    if cells:
        rows = conn.execute(sa.select(k.cell_id, n.name, k.verdict, k.outcome, k.family, k.subcode, k.backend,
                                      k.control_backend, k.memory_ratio, k.time_ratio, k.time_ratio_low)
                            .join_from(schema.cases, schema.case_names).join(schema.cells)
                            .where(c.run_id == ident).order_by(k.cell_id, n.name))
        for row in rows:
            cases.setdefault(row.cell_id, []).append(row)
    made = []
    for cell in cells:
        gpu = export.gpu_of(cell.gpu_key, None, secrets)
        if cell.gpu_key == "cpu" or gpu is None:
            drops.add("CPU-only cells" if cell.gpu_key == "cpu" else "cells whose GPU key names no compute capability")
            continue
        if cell.verdict not in bundle.VERDICTS:
            drops.add("cells with a verdict this convmatrix does not know")
            continue
        observed = {"torch": cell.torch, "cuda": cell.cuda, "cudnn": cell.cudnn, "driver": cell.driver,
                    "image_id": cell.image}
        stack = export.stack_of(observed, lane_of(cell.cell, cell.image), drops, secrets)
        made.append(Cell(stack=stack, gpu=gpu, verdict=cell.verdict, control=cell.verdict == "control",
                         cases=_cases(cases.get(cell.id, []), drops, secrets),
                         libraries=export.libraries_of(stored_json(cell.libraries), drops)))
    return Run(run=export.run_id(key, at), date=export.day_of(at, today), cells=tuple(made))


def stored_json(text: str | None) -> object:
    """A JSON column's value (cells.libraries), None where it is empty or not JSON."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def lane_of(cell: str, image: str | None) -> str:
    """The lane a cell ran on, which the history does not keep: its id's first word when that is a
    lane (the matrix names cells so: host, baremetal-torch2.5.1-..., container-...), else the
    container lane when an image was recorded, else the host's."""
    first = cell.split("-", 1)[0].split("+", 1)[0]
    return first if first in LANES else "container" if image else "host"


def _cases(rows: Sequence[Any], drops: export.Drops, secrets: Secrets) -> tuple[Case, ...]:
    made = []
    for row in rows[:bundle.MAX_CASES]:
        if not (row.verdict in bundle.VERDICTS and row.outcome in bundle.OUTCOMES):
            drops.add("cases whose verdict or outcome fits no pattern")
            continue
        if not export.case_id_kept(row.name, secrets, drops):
            continue
        failing = Outcome(row.outcome).failing
        family = row.family if row.family in families.FAMILIES else None
        subcode = row.subcode if type(row.subcode) is int and 0 <= row.subcode <= bundle.MAX_SUBCODE else None
        made.append(Case(case=row.name, verdict=row.verdict, outcome=row.outcome, family=family,
                         subcode=subcode if failing else None,
                         reason=reason(family or row.outcome, subcode) if failing else None,
                         cost=export.cost_of(row.verdict, (row.backend, row.control_backend),
                                             (row.memory_ratio, row.time_ratio, row.time_ratio_low), drops)))
    return tuple(made)


def reason(prefix: str, subcode: int | None) -> str:
    """The family, with cuDNN's status, sub-code and meaning where a sub-code was recorded."""
    status = families.status_name(subcode) if subcode is not None else None
    return export.structured(prefix, status, subcode) if status else prefix
