"""Report renderers: text and markdown (tabulate), html, junit, json; all from the report model."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable
from typing import Any
from xml.etree import ElementTree as ET

from tabulate import tabulate

FORMATS = ("text", "markdown", "html", "json", "junit")
TABLE_STYLE = {"text": "simple", "markdown": "github", "html": "html"}
MESSAGE_WIDTH = 90
SLOWER = 1.5  # a cell this many times slower than the control (geometric mean) is called out
HEADINGS: dict[str, Callable[[str], str]] = {
    "text": lambda t: t,
    "markdown": lambda t: f"## {t}",
    "html": lambda t: f"<h2>{html.escape(t)}</h2>",
}


def render(report: dict[str, Any], fmt: str) -> str:
    renderers: dict[str, Callable[[dict[str, Any]], str]] = {
        "json": lambda r: json.dumps(r, indent=2) + "\n",
        "junit": junit,
    }
    if fmt in renderers:
        return renderers[fmt](report)
    return tables(report, fmt)


def columns(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(gpu key, header) per GPU, the header naming the generation: 'Hopper h200-sm90'."""
    seen: dict[str, str] = {}
    for cell in report["cells"]:
        gpu = cell["gpu"]
        seen[gpu["key"]] = gpu["key"] if gpu["key"] == "cpu" else f"{gpu['generation']} {gpu['key']}"
    return sorted(seen.items())


def summary(cell: dict[str, Any]) -> str:
    """One matrix entry: the verdict, the pass count, and each failure family with its count."""
    counts = dict(cell["counts"])
    passed = counts.pop("pass", 0)
    skipped = counts.pop("skip", 0)
    parts = [cell["verdict"].upper() if cell["verdict"] in ("regression", "invalid") else cell["verdict"]]
    parts.append(f"{passed} pass" + (f", {skipped} skip" if skipped else ""))
    parts += [f"{family}×{n}" for family, n in counts.items()]
    if cell["signature"]:
        parts.append("SIGNATURE")
    elif cell["warning_signature"]:
        parts.append("(signature in warnings only)")
    if cell["stack_mismatch"]:
        parts.append("STACK MISMATCH")
    if (cell.get("slowdown") or 0) >= SLOWER:
        parts.append(f"SLOWER ×{cell['slowdown']:.1f}")
    return f"{parts[0]}: {', '.join(parts[1:])}"


def matrix_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    gpus = columns(report)
    rows: dict[str, list[str]] = {}
    for cell in report["cells"]:
        obs = cell["observed"]
        row = rows.setdefault(cell["cell"], [cell["cell"], observed_stack(obs), *[""] * len(gpus)])
        index = [k for k, _ in gpus].index(cell["gpu"]["key"])
        row[2 + index] = summary(cell)
    return ["stack", "observed torch / cuDNN", *[h for _, h in gpus]], list(rows.values())


def observed_stack(obs: dict[str, Any]) -> str:
    if not obs:
        return "(not observed)"
    return f"{obs.get('torch')} / {obs.get('cudnn') or obs.get('cudnn_error') or '-'}"


def failing_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for case in report["cases"]:
        if case["outcome"] in ("pass", "skip") and case["delta"] in (None, "same"):
            continue
        message = " ".join((case["message"] or "").split())
        rows.append(
            [
                case["cell"],
                case["gpu"],
                case["case"],
                case["outcome"],
                case["family"] or "",
                case["control_outcome"] or "",
                case["delta"] or "",
                message[:MESSAGE_WIDTH],
            ]
        )
    return rows


def notes(report: dict[str, Any]) -> list[str]:
    lines = []
    control = report["control"]
    for key, h in control["per_gpu"].items():
        if not h["healthy"]:
            lines.append(f"CONTROL UNHEALTHY on {key}: {h['reason']}: no verdicts on this GPU")
    for cell in report["cells"]:
        lines += [f"{cell['cell']}@{cell['gpu']['key']}: stack mismatch: {m}" for m in cell["mismatches"]]
        if cell["verdict"] != "control":
            lines += [f"{cell['cell']}@{cell['gpu']['key']}: {p}" for p in cell["problems"]]
    warned = sorted({f"{c['cell']}@{c['gpu']}" for c in report["cases"] if c["outcome"] == "pass" and c["warnings"]})
    for where in warned:
        cases = [
            c["case"]
            for c in report["cases"]
            if f"{c['cell']}@{c['gpu']}" == where and c["outcome"] == "pass" and c["warnings"]
        ]
        lines.append(
            f"{where}: {len(cases)} passing case(s) warned of a cuDNN failure the run survived "
            f"(warning only, not a failure): {', '.join(cases[:5])}"
            + (f" and {len(cases) - 5} more" if len(cases) > 5 else "")
        )
    return lines + cause_notes(report) + case_notes(report) + drift_notes(report)


def case_notes(report: dict[str, Any]) -> list[str]:
    """Where to look for each failing case: its evidence file and its blocking re-run."""
    lines = []
    evidence: dict[str, list[str]] = {}
    for case in report["cases"]:
        if case.get("evidence"):
            evidence.setdefault(f"{case['cell']}@{case['gpu']}", []).append(case["evidence"])
    for where, files in evidence.items():
        folder = os.path.dirname(files[0])
        lines.append(f"{where}: evidence for {len(files)} failing case(s), each its first occurrence in the log "
                     f"with 100 lines before: {folder}/<case>.txt")
    for case in report["cases"]:
        where = f"{case['cell']}@{case['gpu']} {case['case']}"
        blocking = case.get("blocking")
        if blocking:
            first = (blocking["message"] or "").strip().splitlines()[:1]
            lines.append(f"{where}: under CUDA_LAUNCH_BLOCKING=1: {blocking['outcome']} "
                         f"{blocking['family'] or ''} {first[0] if first else ''}".rstrip())
    return lines


def cause_notes(report: dict[str, Any]) -> list[str]:
    """triage's first cause in each failing cell's log.txt."""
    lines = []
    for cell in report["cells"]:
        cause = cell.get("first_cause")
        if cause:
            rank = f" (rank {cause['rank']})" if cause["rank"] is not None else ""
            lines.append(f"{cell['cell']}@{cell['gpu']['key']}: first failure in the log: {cause['family']} "
                         f"at {cause['log']}:{cause['line']}{rank}")
    return lines


def drift_notes(report: dict[str, Any]) -> list[str]:
    """Stacks that got slower than the control, and outputs that changed beyond rounding."""
    lines = []
    for cell in report["cells"]:
        where = f"{cell['cell']}@{cell['gpu']['key']}"
        if (cell.get("slowdown") or 0) >= SLOWER:
            lines.append(f"{where}: convolutions ran ×{cell['slowdown']:.2f} the control's time (geometric mean)")
        if cell.get("fingerprint_changed"):
            lines.append(f"{where}: {cell['fingerprint_changed']} case(s) computed a different output "
                         f"fingerprint than the control (numeric drift within tolerance)")
    return lines


def tables(report: dict[str, Any], fmt: str) -> str:
    style = TABLE_STYLE[fmt]
    heading = HEADINGS[fmt]
    control = report["control"]["cell"] or "(none: pass --control CELL)"
    out = [heading(f"convmatrix report: control {control}"), ""]
    headers, rows = matrix_rows(report)
    out += [tabulate(rows, headers=headers, tablefmt=style, disable_numparse=True), ""]
    failing = failing_rows(report)
    out.append(heading(f"Failing or changed cases ({len(failing)})"))
    out.append("")
    if failing:
        case_headers = ["cell", "gpu", "case", "outcome", "family", "control", "delta", "message"]
        out += [tabulate(failing, headers=case_headers, tablefmt=style, disable_numparse=True), ""]
    else:
        out += ["none", ""]
    lines = notes(report)
    if lines:
        out += [heading("Notes"), ""]
        out += [f"- {html.escape(line)}" if fmt == "html" else f"- {line}" for line in lines]
    return "\n".join(out).rstrip() + "\n"


def junit(report: dict[str, Any]) -> str:
    """One testsuite per cell@gpu, one testcase per case: CI systems show failures natively."""
    root = ET.Element("testsuites", name="convmatrix")
    by_cell: dict[str, ET.Element] = {}
    for case in report["cases"]:
        name = f"{case['cell']}@{case['gpu']}"
        suite = by_cell.get(name)
        if suite is None:
            suite = by_cell[name] = ET.SubElement(root, "testsuite", name=name)
        element = ET.SubElement(suite, "testcase", classname=name, name=case["case"])
        if case["outcome"] == "skip":
            ET.SubElement(element, "skipped", message=case["message"] or "")
        elif case["outcome"] != "pass":
            failure = ET.SubElement(
                element,
                "failure",
                type=case["family"] or case["outcome"],
                message=f"{case['delta'] or ''} {case['family']}".strip(),
            )
            failure.text = case["message"] or ""
    for suite in by_cell.values():
        tests = list(suite)
        suite.set("tests", str(len(tests)))
        suite.set("failures", str(sum(1 for t in tests if t.find("failure") is not None)))
        suite.set("skipped", str(sum(1 for t in tests if t.find("skipped") is not None)))
    return ET.tostring(root, encoding="unicode") + "\n"
