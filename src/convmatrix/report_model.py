"""The report as data: the stable, versioned report JSON of docs/contracts.md, built from cell results."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from convmatrix import classify, compare, triage
from convmatrix.results import FAILING, Case, CellResult

REPORT_SCHEMA = 1
MISSING = "missing"  # the outcome and delta of a case the control ran and a candidate did not


def build(results: list[CellResult], control: str | None, notes: Sequence[str] = ()) -> dict[str, Any]:
    by_gpu = {r.gpu_key: r for r in results if r.cell == control}
    gpu_keys = sorted({r.gpu_key for r in results})
    # Without a control there is nothing to be healthy or not: every verdict is no-control.
    health = {key: compare.health(by_gpu.get(key)) for key in gpu_keys} if control else {}
    cells, cases = [], []
    for result in sorted(results, key=lambda r: (r.cell != control, r.cell, r.gpu_key)):
        cell_cases = case_rows(result, by_gpu.get(result.gpu_key), control)
        cases += cell_cases
        cells.append(cell_row(result, cell_cases, control, health.get(result.gpu_key)))
    return {
        "schema": REPORT_SCHEMA,
        "control": {
            "cell": control,
            "per_gpu": {k: {"healthy": h.healthy, "reason": h.reason} for k, h in health.items()},
        },
        "cells": cells,
        "cases": cases,
        "notes": list(notes),  # what the reader should know of the inputs (a duplicate dropped)
    }


def case_rows(result: CellResult, control: CellResult | None, control_id: str | None) -> list[dict[str, Any]]:
    rows = []
    for name, case in sorted(result.cases.items()):
        base = control.cases.get(name) if control is not None else None
        rows.append(
            {
                "cell": result.cell,
                "gpu": result.gpu_key,
                "case": name,
                "knobs": case.knobs,
                "outcome": case.outcome,
                "family": case.family,
                "message": case.message,
                "warnings": list(case.warnings),
                "control_outcome": base.outcome if base else None,
                "delta": None if result.cell == control_id or control is None else compare.delta(base, case),
                "evidence": case.evidence,
                "blocking": blocking_row(result.blocking.get(name)),
                "forward_ms": case.forward_ms,
                "slowdown": compare.slowdown(base, case),
                "fingerprint_changed": compare.fingerprint_changed(base, case),
            }
        )
    if control is not None and result.cell != control_id:
        rows += [missing_row(result, name, case) for name, case in sorted(control.cases.items())
                 if name not in result.cases]
    return rows


def missing_row(result: CellResult, name: str, control: Case) -> dict[str, Any]:
    """A case the control ran and this cell did not: never a pass by omission."""
    return {
        "cell": result.cell, "gpu": result.gpu_key, "case": name, "knobs": {}, "outcome": MISSING,
        "family": None, "message": "the control ran this case; this cell has no result for it",
        "warnings": [], "control_outcome": control.outcome, "delta": MISSING, "evidence": None,
        "blocking": None, "forward_ms": None, "slowdown": None, "fingerprint_changed": None,
    }


def blocking_row(case: Case | None) -> dict[str, Any] | None:
    """The CUDA_LAUNCH_BLOCKING=1 re-run of a case, where the harness made one."""
    if case is None:
        return None
    return {"outcome": case.outcome, "family": case.family, "message": case.message}


def cell_row(
    result: CellResult, cases: list[dict[str, Any]], control: str | None, health: compare.Health | None
) -> dict[str, Any]:
    counts = Counter(c["family"] or c["outcome"] for c in cases)
    deltas = [c["delta"] for c in cases if c["delta"]]
    return {
        "cell": result.cell,
        "gpu": {"key": result.gpu_key, **result.gpu},
        "lane": result.lane,
        "path": str(result.path),
        "stack": result.requested,
        "observed": observed(result.observed),
        "stack_mismatch": bool(result.stack_mismatch),
        "mismatches": result.stack_mismatch,
        "problems": result.problems,
        "counts": dict(sorted(counts.items())),
        "signature": any(c["family"] == classify.SIGNATURE for c in cases),
        "warning_signature": any(classify.SIGNATURE in c["warnings"] for c in cases),
        "first_cause": first_cause(result, cases),
        "regressions": deltas.count("regression"),
        "slowdown": compare.typical_slowdown([c["slowdown"] for c in cases]),
        "fingerprint_changed": sum(1 for c in cases if c["fingerprint_changed"]),
        "fixed": deltas.count("fixed"),
        "verdict": cell_verdict(result, deltas, control, health),
    }


def cell_verdict(
    result: CellResult, deltas: list[str], control: str | None, health: compare.Health | None
) -> str:
    if result.cell == control:
        return "control"
    if result.problems or not result.cases or result.stack_mismatch:
        # It did not complete, never ran cases, or ran another stack than requested: whatever it
        # recorded covers less than it claims, so it can be neither green nor compared.
        return "invalid"
    if control is None or health is None:
        return "no-control"
    if not health.healthy:
        # No verdicts from a sick (or absent) control: say which.
        return "no-control" if health.absent else "invalid"
    return compare.verdict(deltas)


def first_cause(result: CellResult, cases: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What triage makes of a failing cell's log.txt: the first failure, its line and rank."""
    log = result.path / "log.txt"
    if not any(c["outcome"] in FAILING for c in cases) or not log.is_file():
        return None
    found = triage.scan_path(str(log), context=0)
    if found["family"] is None:
        return None
    return {"log": str(log), **{k: found[k] for k in ("family", "line", "rank", "fatal")}}


def observed(env: dict[str, Any]) -> dict[str, Any]:
    keys = ("torch", "cuda", "cudnn", "cudnn_error", "python", "driver", "device", "hostname", "image_id")
    return {k: env.get(k) for k in keys if k in env}
