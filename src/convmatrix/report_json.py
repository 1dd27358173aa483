"""The report model as the versioned report JSON of docs/contracts.md: the one place it becomes
dicts. Enums are written as their values; a field is added here and in the docs together."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from convmatrix.report_model import REPORT_SCHEMA, CaseRow, CellRow, Report


def fields(report: Report) -> list[tuple[str, Any]]:
    """The top-level fields in order; cells and cases as iterators, made one at a time."""
    return [
        ("schema", REPORT_SCHEMA),
        ("control", {
            "cell": report.control,
            "per_gpu": {key: {"healthy": h.healthy, "reason": h.reason} for key, h in report.health.items()},
        }),
        ("cells", (cell_json(cell, report.baseline) for cell in report.cells)),
        ("cases", (case_json(case, report.baseline) for case in report.cases)),
        ("notes", list(report.notes)),
    ]


def dumps(report: Report) -> str:
    """The report JSON as text: each top-level field on a line of its own, and so each cell and
    each case. As readable and diffable as `indent=2`, but written by json's C encoder (which
    indent turns off) one row at a time: a fleet's 200,000 cases take about a second, not the
    eight of indent's pure-Python encoder, and no second copy of the report as dicts."""
    parts = []
    for key, value in fields(report):
        if isinstance(value, Iterator):
            rows = ",\n    ".join(map(json.dumps, value))
            parts.append(f"  {json.dumps(key)}: [\n    {rows}\n  ]" if rows else f"  {json.dumps(key)}: []")
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def cell_json(cell: CellRow, baseline: bool) -> dict[str, Any]:
    data = {
        "cell": cell.cell,
        "gpu": asdict(cell.gpu),
        "lane": cell.lane,
        "path": cell.path,
        "stack": dict(cell.stack),
        "observed": dict(cell.observed),
        "stack_mismatch": cell.stack_mismatch,
        "mismatches": list(cell.mismatches),
        "problems": list(cell.problems),
        "counts": dict(cell.counts),
        "signature": cell.signature,
        "warning_signature": cell.warning_signature,
        "first_cause": asdict(cell.first_cause) if cell.first_cause else None,
        "regressions": cell.regressions,
        "slowdown": cell.slowdown,
        "fingerprint_changed": cell.fingerprint_changed,
        "fixed": cell.fixed,
        "verdict": str(cell.verdict),
    }
    if baseline:
        data["baseline_regressions"] = cell.baseline_regressions
    return data


def case_json(case: CaseRow, baseline: bool) -> dict[str, Any]:
    data = {
        "cell": case.cell,
        "gpu": case.gpu,
        "case": case.case,
        "knobs": dict(case.knobs),
        "outcome": str(case.outcome),
        "family": case.family,
        "message": case.message,
        "warnings": list(case.warnings),
        "control_outcome": _value(case.control_outcome),
        "delta": _value(case.delta),
        "evidence": case.evidence,
        "blocking": {**asdict(case.blocking), "outcome": str(case.blocking.outcome)} if case.blocking else None,
        "forward_ms": case.forward_ms,
        "slowdown": case.slowdown,
        "fingerprint_changed": case.fingerprint_changed,
    }
    if baseline:
        data.update(baseline_outcome=_value(case.baseline_outcome), baseline_delta=_value(case.baseline_delta))
    return data


def _value(member: object) -> str | None:
    return None if member is None else str(member)
