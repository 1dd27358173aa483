"""Report renderers: text and markdown (tabulate), html, junit, json; all from the typed report
model (report_model.Report). Every string of a report passes through its format's helper in
escape.py, so the output stays well-formed for its consumer whatever a message holds."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from xml.etree import ElementTree as ET

from tabulate import tabulate

from convmatrix.escape import html_cell, markdown_cell, one_line, xml_text
from convmatrix.outcomes import Delta, Outcome, Verdict
from convmatrix.report_json import to_json
from convmatrix.report_model import CellRow, Report

FORMATS = ("text", "markdown", "html", "json", "junit")
# "unsafehtml": tabulate leaves cells as they are; html_cell has escaped each one already.
TABLE_STYLE = {"text": "simple", "markdown": "github", "html": "unsafehtml"}
MESSAGE_WIDTH = 90
SLOWER = 1.5  # a cell this many times slower than the control (geometric mean) is called out
SHOUTED = (Verdict.REGRESSION, Verdict.INVALID)

CELL: dict[str, Callable[[str], str]] = {"text": one_line, "markdown": markdown_cell, "html": html_cell}
HEADINGS: dict[str, Callable[[str], str]] = {
    "text": one_line,
    "markdown": lambda t: f"## {markdown_cell(t)}",
    "html": lambda t: f"<h2>{html_cell(t)}</h2>",
}


def render(report: Report, fmt: str) -> str:
    renderers: dict[str, Callable[[Report], str]] = {
        "json": lambda r: json.dumps(to_json(r), indent=2) + "\n",
        "junit": junit,
    }
    if fmt in renderers:
        return renderers[fmt](report)
    return tables(report, fmt)


def columns(report: Report) -> list[tuple[str, str]]:
    """(gpu key, header) per GPU, the header naming the generation: 'Hopper h200-sm90'."""
    seen = {c.gpu.key: c.gpu.key if c.gpu.key == "cpu" else f"{c.gpu.generation} {c.gpu.key}" for c in report.cells}
    return sorted(seen.items())


def summary(cell: CellRow) -> str:
    """One matrix entry: the verdict, the pass count, and each failure family with its count."""
    counts = dict(cell.counts)
    passed = counts.pop(Outcome.PASS, 0)
    skipped = counts.pop(Outcome.SKIP, 0)
    parts = [cell.verdict.upper() if cell.verdict in SHOUTED else str(cell.verdict)]
    parts.append(f"{passed} pass" + (f", {skipped} skip" if skipped else ""))
    parts += [f"{family}×{n}" for family, n in counts.items()]
    if cell.signature:
        parts.append("SIGNATURE")
    elif cell.warning_signature:
        parts.append("(signature in warnings only)")
    if cell.stack_mismatch:
        parts.append("STACK MISMATCH")
    if (cell.slowdown or 0) >= SLOWER:
        parts.append(f"SLOWER ×{cell.slowdown:.1f}")
    return f"{parts[0]}: {', '.join(parts[1:])}"


def matrix_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    gpus = columns(report)
    keys = [k for k, _ in gpus]
    rows: dict[str, list[str]] = {}
    for cell in report.cells:
        row = rows.setdefault(cell.cell, [cell.cell, observed_stack(cell), *[""] * len(gpus)])
        row[2 + keys.index(cell.gpu.key)] = summary(cell)
    return ["stack", "observed torch / cuDNN", *[h for _, h in gpus]], list(rows.values())


def observed_stack(cell: CellRow) -> str:
    obs = cell.observed
    if not obs:
        return "(not observed)"
    return f"{obs.get('torch')} / {obs.get('cudnn') or obs.get('cudnn_error') or '-'}"


def failing_rows(report: Report) -> list[list[str]]:
    return [
        [case.cell, case.gpu, case.case, str(case.outcome), case.family or "", case.control_outcome or "",
         case.delta or "", one_line(case.message or "")[:MESSAGE_WIDTH]]
        for case in report.cases
        if case.outcome.failing or case.outcome == Outcome.MISSING or case.delta not in (None, Delta.SAME)
    ]


def notes(report: Report) -> list[str]:
    lines = list(report.notes)  # what the loader decided, say, one of two results for a cell@gpu dropped
    for key, health in report.health.items():
        if not health.healthy:
            lines.append(f"CONTROL UNHEALTHY on {key}: {health.reason}: no verdicts on this GPU")
    for cell in report.cells:
        lines += [f"{cell.where}: stack mismatch: {m}" for m in cell.mismatches]
        if cell.verdict != Verdict.CONTROL:
            lines += [f"{cell.where}: {p}" for p in cell.problems]
    warned: dict[str, list[str]] = {}
    for case in report.cases:
        if case.outcome == Outcome.PASS and case.warnings:
            warned.setdefault(case.where, []).append(case.case)
    for where, cases in sorted(warned.items()):
        lines.append(
            f"{where}: {len(cases)} passing case(s) warned of a cuDNN failure the run survived "
            f"(warning only, not a failure): {', '.join(cases[:5])}"
            + (f" and {len(cases) - 5} more" if len(cases) > 5 else "")
        )
    return lines + cause_notes(report) + case_notes(report) + drift_notes(report)


def case_notes(report: Report) -> list[str]:
    """Where to look for each failing case: its evidence file and its blocking re-run."""
    lines = []
    evidence: dict[str, list[str]] = {}
    for case in report.cases:
        if case.evidence:
            evidence.setdefault(case.where, []).append(case.evidence)
    for where, files in evidence.items():
        folder = os.path.dirname(files[0])
        lines.append(f"{where}: evidence for {len(files)} failing case(s), each its first occurrence in the log "
                     f"with 100 lines before: {folder}/<case>.txt")
    for case in report.cases:
        if case.blocking:
            first = (case.blocking.message or "").strip().splitlines()[:1]
            lines.append(f"{case.where} {case.case}: under CUDA_LAUNCH_BLOCKING=1: {case.blocking.outcome} "
                         f"{case.blocking.family or ''} {first[0] if first else ''}".rstrip())
    return lines


def cause_notes(report: Report) -> list[str]:
    """triage's first cause in each failing cell's log.txt."""
    lines = []
    for cell in report.cells:
        cause = cell.first_cause
        if cause:
            rank = f" (rank {cause.rank})" if cause.rank is not None else ""
            lines.append(f"{cell.where}: first failure in the log: {cause.family} at {cause.log}:{cause.line}{rank}")
    return lines


def drift_notes(report: Report) -> list[str]:
    """Stacks that got slower than the control, and outputs that changed beyond rounding."""
    lines = []
    for cell in report.cells:
        if (cell.slowdown or 0) >= SLOWER:
            lines.append(f"{cell.where}: convolutions ran ×{cell.slowdown:.2f} the control's time (geometric mean)")
        if cell.fingerprint_changed:
            lines.append(f"{cell.where}: {cell.fingerprint_changed} case(s) computed a different output "
                         f"fingerprint than the control (numeric drift within tolerance)")
    return lines


def tables(report: Report, fmt: str) -> str:
    style = TABLE_STYLE[fmt]
    heading = HEADINGS[fmt]
    cell = CELL[fmt]

    def table(headers: list[str], rows: list[list[str]]) -> str:
        return tabulate(
            [[cell(str(v)) for v in row] for row in rows],
            headers=[cell(h) for h in headers],
            tablefmt=style,
            disable_numparse=True,
        )

    control = report.control or "(none: pass --control CELL)"
    out = [heading(f"convmatrix report: control {control}"), ""]
    headers, rows = matrix_rows(report)
    out += [table(headers, rows), ""]
    failing = failing_rows(report)
    out.append(heading(f"Failing or changed cases ({len(failing)})"))
    out.append("")
    if failing:
        case_headers = ["cell", "gpu", "case", "outcome", "family", "control", "delta", "message"]
        out += [table(case_headers, failing), ""]
    else:
        out += ["none", ""]
    lines = notes(report)
    if lines:
        out += [heading("Notes"), ""]
        out += [f"- {cell(line)}" for line in lines]
    return "\n".join(out).rstrip() + "\n"


def junit(report: Report) -> str:
    """One testsuite per cell@gpu, one testcase per case: CI systems show failures natively.

    ElementTree escapes markup and quotes but writes control characters as they are, which is not
    well-formed XML (a CI system then drops the whole report): every string goes through xml_text
    (messages, keeping their lines) or one_line (names)."""
    root = ET.Element("testsuites", name="convmatrix")
    by_cell: dict[str, ET.Element] = {}
    for case in report.cases:
        name = one_line(case.where)
        suite = by_cell.get(name)
        if suite is None:
            suite = by_cell[name] = ET.SubElement(root, "testsuite", name=name)
        element = ET.SubElement(suite, "testcase", classname=name, name=one_line(case.case))
        if case.outcome == Outcome.SKIP:
            ET.SubElement(element, "skipped", message=xml_text(case.message or ""))
        elif case.outcome != Outcome.PASS:
            failure = ET.SubElement(
                element,
                "failure",
                type=one_line(case.family or case.outcome),
                message=one_line(f"{case.delta or ''} {case.family or case.outcome}".strip()),
            )
            failure.text = xml_text(case.message or "")
    for suite in by_cell.values():
        tests = list(suite)
        suite.set("tests", str(len(tests)))
        suite.set("failures", str(sum(1 for t in tests if t.find("failure") is not None)))
        suite.set("skipped", str(sum(1 for t in tests if t.find("skipped") is not None)))
    return ET.tostring(root, encoding="unicode") + "\n"


