"""The report model as the versioned report JSON of docs/contracts.md: the one place it becomes
dicts. Enums are written as their values; a field is added here and in the docs together."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict
from json import encoder as json_encoder
from typing import Any

from convmatrix.report import notes as report_notes
from convmatrix.report import verdicts as report_verdicts
from convmatrix.report.model import REPORT_SCHEMA, CaseRow, CellRow, Report, Rerun
from convmatrix.results.outcomes import Delta, Outcome, Verdict
from convmatrix.results.verdicts import Cost


def _no_default(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def row_encoder() -> Callable[[Any], str]:
    """json.dumps with its defaults, one value at a time. dumps() makes a new C encoder for every
    call, half the cost of a small row, so one is made here and kept; without cycle checks, as a
    row holds none. Only where it writes exactly what dumps() does (the C module is optional
    and its constructor is not public API): else dumps() itself."""
    make = getattr(json_encoder, "c_make_encoder", None)  # None without the C module
    if make is None:
        return json.dumps
    try:
        encode = make(None, _no_default, json_encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True)

        def one(value: Any) -> str:
            return "".join(encode(value, 0))

        probe = {"a": [1, 2.5, None, True, "\u00e9\n"], "b": {"c": float("inf")}}
        if one(probe) == json.dumps(probe):
            return one
    except (TypeError, ValueError):
        pass
    return json.dumps


_encode = row_encoder()


def fields(report: Report) -> list[tuple[str, Any]]:
    """The top-level fields in order; cells and cases as iterators of their rows' JSON text, made
    one at a time."""
    settings = report_notes.settings(report)  # once: the alerts hold it too (a pass over every case)
    return [
        ("schema", REPORT_SCHEMA),
        ("control", {
            "cell": report.control,
            "per_gpu": {key: {"healthy": h.healthy, "reason": h.reason} for key, h in report.health.items()},
            "alerts": report_notes.alerts(report, settings),
        }),
        ("policy", report.policy),
        # The judged night's fact: no GPU took part (every cell that ran, ran on the CPU).
        ("no_gpu", bool(report.judged and report.judged.no_gpu)),
        # The judged night's fact: only the library audit case ran (`run --audit-only`).
        ("audit_only", bool(report.judged and report.judged.audit_only)),
        ("verdicts", report_verdicts.tally(report.cells)),
        ("settings", settings),
        ("cells", (_encode(cell_json(cell, report.baseline, report.red(cell), report.history))
                   for cell in report.cells)),
        ("cases", case_lines(report)),
        ("notes", list(report.notes)),
    ]


def dumps(report: Report) -> str:
    return "".join(chunks(report))


def chunks(report: Report, rows_per_chunk: int = 2000) -> Iterator[str]:
    """The report JSON as text, in pieces to write as they come: each top-level field on a line
    of its own, and so each cell and each case. As readable and diffable as `indent=2`, whose
    pure-Python encoder took eight seconds over a fleet's 200,000 cases; a row at a time (by
    json's C encoder, or case_line) they take a fraction of one. In pieces, so that a fleet's
    report (70 MB) is never held whole, let alone copied on its way to disk."""
    yield "{"
    for index, (key, value) in enumerate(fields(report)):
        yield f"{',' if index else ''}\n  {json.dumps(key)}: "
        if not isinstance(value, Iterator):
            yield json.dumps(value)
            continue
        first = True
        while batch := list(itertools.islice(value, rows_per_chunk)):
            yield ("[\n    " if first else ",\n    ") + ",\n    ".join(batch)
            first = False
        yield "[]" if first else "\n  ]"
    yield "\n}\n"


def cell_json(cell: CellRow, baseline: bool, red: bool = False, history: bool = False) -> dict[str, Any]:
    """A cell row as the contract's object; red: whether it makes the report red (Report.red)."""
    data = {
        "cell": cell.cell,
        "gpu": asdict(cell.gpu),
        "host": cell.host,
        "lane": cell.lane,
        "path": cell.path,
        "stack": dict(cell.stack),
        "observed": dict(cell.observed),
        "stack_mismatch": cell.stack_mismatch,
        "mismatches": list(cell.mismatches),
        "problems": list(cell.problems),
        "counts": dict(cell.counts),
        "signature": cell.signature,
        "unjudged": str(cell.unjudged) if cell.unjudged else None,
        "warning_signature": cell.warning_signature,
        "first_cause": asdict(cell.first_cause) if cell.first_cause else None,
        "regressions": cell.regressions,
        "slowdown": cell.slowdown,
        "fingerprint_changed": cell.fingerprint_changed,
        "fixed": cell.fixed,
        "verdict": str(cell.verdict),
        "verdicts": dict(cell.verdicts),
        "fails": red,
        "not_run": cell.not_run,
        "unsupported": cell.unsupported,
        "optional": cell.optional,
        "cause": cell.infra_cause.record() if cell.infra_cause else None,
        "owed": cell.owed,
        "attempts": [{"attempt": a.attempt, "path": a.path, "cause": a.cause.record(), "counts": dict(a.counts)}
                     for a in cell.attempts],
        "libraries": [row.record() for row in cell.libraries],
        "libraries_line": cell.libraries_line,
        "shipped_line": cell.shipped_line,
    }
    if baseline:
        data["baseline_regressions"] = cell.baseline_regressions
    if history:
        data["history"] = cell.history.json() if cell.history else None
    return data


def case_json(case: CaseRow, baseline: bool, history: bool = False) -> dict[str, Any]:
    """A case row as the contract's object (case_line writes the same as JSON text)."""
    # Outcomes and deltas are str enums: json writes them as their values, no str() needed.
    data = {
        "cell": case.cell,
        "gpu": case.gpu,
        "case": case.case,
        "knobs": dict(case.knobs),
        "outcome": case.outcome,
        "family": case.family,
        "message": case.message,
        "warnings": list(case.warnings),
        "control_outcome": case.control_outcome,
        "delta": case.delta,
        "evidence": case.evidence,
        "blocking": rerun_json(case.blocking) if case.blocking else None,
        "forward_ms": case.forward_ms,
        "slowdown": case.slowdown,
        "fingerprint_changed": case.fingerprint_changed,
        "sources": list(case.sources),
        "explained": asdict(case.explained) if case.explained else None,
        "first_diff": asdict(case.first_diff) if case.first_diff else None,
        "known": list(case.known),
        "params": dict(case.params),
        "verdict": case.verdict,
        "declared": case.declared,
        "cost": cost_json(case.cost),
    }
    if baseline:
        data.update(baseline_outcome=case.baseline_outcome, baseline_delta=case.baseline_delta)
    if history:
        data["history"] = case.history.json() if case.history else None
    return data


def cost_json(cost: Cost | None) -> dict[str, Any] | None:
    """A case's cost against the control's (results.verdicts.Cost): null where it was not compared."""
    if cost is None:
        return None
    return {"backend": cost.backend, "control_backend": cost.control_backend, "fallback": cost.fallback,
            "memory_ratio": cost.memory_ratio, "time_ratio": cost.time_ratio, "time_ratio_low": cost.time_low,
            "timing_unsure": cost.unsure}


def rerun_json(rerun: Rerun) -> dict[str, Any]:
    return {**asdict(rerun), "outcome": str(rerun.outcome)}


def case_lines(report: Report) -> Iterator[str]:
    """Each case row's line, in order. A cell's rows come together: its cell and GPU are written
    once for them all (where_text), not again for each of its 200 rows."""
    baseline, history = report.baseline, report.history
    cell = gpu = where = None
    for case in report.cases:
        if case.cell is not cell or case.gpu is not gpu:
            cell, gpu = case.cell, case.gpu
            where = where_text(cell, gpu)
        yield case_line(case, baseline, history, where)


def where_text(cell: str, gpu: str) -> str:
    """A case line's start: its cell and GPU."""
    return f'{{"cell": {_string(cell)}, "gpu": {_string(gpu)}, '


def case_line(case: CaseRow, baseline: bool, history: bool = False, where: str | None = None) -> str:
    """_encode(case_json(case, baseline, history)), the same text, written without the dict:
    each value by the cheapest exact means, the keys written once in one f-string (compiled to
    a single join; a %-format of a 23-field template took as long as every value in it, issue
    49), which together more than halve the cost of a fleet's 200,000 rows. test_render holds
    the two equal, field by field, for every kind of value each field can hold. where: its
    where_text, made once for its cell's rows (case_lines)."""
    family, message, evidence, declared = case.family, case.message, case.evidence, case.declared
    forward_ms, slowdown, cost = case.forward_ms, case.slowdown, case.cost
    knobs = _encode(dict(case.knobs)) if case.knobs else _EMPTY_OBJECT
    warnings = _encode(list(case.warnings)) if case.warnings else _EMPTY_ARRAY
    blocking = _encode(rerun_json(case.blocking)) if case.blocking else _NULL
    sources = _encode(list(case.sources)) if case.sources else _EMPTY_ARRAY
    explained = _encode(asdict(case.explained)) if case.explained else _NULL
    first_diff = _encode(asdict(case.first_diff)) if case.first_diff else _NULL
    known = _encode(list(case.known)) if case.known else _EMPTY_ARRAY
    params = _encode(dict(case.params)) if case.params else _EMPTY_OBJECT
    line = (
        f'{where_text(case.cell, case.gpu) if where is None else where}"case": {_string(case.case)}, '
        f'"knobs": {knobs}, "outcome": {_CONSTANT[case.outcome]}, '
        f'"family": {_NULL if family is None else _string(family)}, '
        f'"message": {_NULL if message is None else _string(message)}, "warnings": {warnings}, '
        f'"control_outcome": {_CONSTANT[case.control_outcome]}, "delta": {_CONSTANT[case.delta]}, '
        f'"evidence": {_NULL if evidence is None else _string(evidence)}, "blocking": {blocking}, '
        f'"forward_ms": {_NULL if forward_ms is None else _number(forward_ms)}, '
        f'"slowdown": {_NULL if slowdown is None else _number(slowdown)}, '
        f'"fingerprint_changed": {_CONSTANT[case.fingerprint_changed]}, "sources": {sources}, '
        f'"explained": {explained}, "first_diff": {first_diff}, "known": {known}, "params": {params}, '
        f'"verdict": {_CONSTANT[case.verdict]}, "declared": {_NULL if declared is None else _string(declared)}, '
        f'"cost": {_NULL if cost is None else cost_text(cost)}'
    )
    if baseline:
        line += (f', "baseline_outcome": {_CONSTANT[case.baseline_outcome]}, '
                 f'"baseline_delta": {_CONSTANT[case.baseline_delta]}')
    if history:
        line += f', "history": {_encode(case.history.json()) if case.history else _NULL}'
    return line + "}"


def cost_text(cost: Cost) -> str:
    """_encode(cost_json(cost)), the same text, written as case_line writes a row: nearly every
    case of a fleet passed on both sides and carries a cost, and a dict per row handed to the
    encoder took half of case_line's time (bench/run.py's report_merge_s, issue 49). test_render
    holds the two equal."""
    backend, control_backend, unsure = cost.backend, cost.control_backend, cost.unsure
    memory_ratio, time_ratio, time_low = cost.memory_ratio, cost.time_ratio, cost.time_low
    return (
        f'{{"backend": {_NULL if backend is None else _string(backend)}, '
        f'"control_backend": {_NULL if control_backend is None else _string(control_backend)}, '
        f'"fallback": {_CONSTANT[cost.fallback]}, '
        f'"memory_ratio": {_NULL if memory_ratio is None else _number(memory_ratio)}, '
        f'"time_ratio": {_NULL if time_ratio is None else _number(time_ratio)}, '
        f'"time_ratio_low": {_NULL if time_low is None else _number(time_low)}, '
        f'"timing_unsure": {_NULL if unsure is None else _string(unsure)}}}'
    )


_NULL, _EMPTY_OBJECT, _EMPTY_ARRAY = "null", "{}", "[]"
_string = json_encoder.encode_basestring_ascii  # a JSON string as json.dumps writes it (ensure_ascii)
# The values a row holds from a small set, written once: null, the flags and every enum member.
_CONSTANT: dict[object, str] = {None: "null", True: "true", False: "false",
                                **{member: _string(member) for kind in (Outcome, Delta, Verdict) for member in kind}}


def _number(value: float | None) -> str:
    # repr is what json writes for a finite float; nan, infinity and anything else go to json itself
    if value is None:
        return "null"
    return repr(value) if type(value) is float and math.isfinite(value) else _encode(value)
