"""Report renderers: text and markdown (tabulate), html, junit, json; all from the report model.

Every string of the report (a failure message above all, but also case and cell ids, GPU keys,
paths) is text from a run and may hold anything: terminal escape sequences, NUL, markup, `|`,
newlines. Each format passes every string through its own helper (`CELL`, `xml_text`) so that
the output stays well-formed for its consumer: `visible` is the shared base (escape sequences
removed, other control characters shown as `\\xNN`), `one_line` keeps a table row on one line,
`markdown_cell` and `html_cell` escape what their format would interpret.
"""

from __future__ import annotations

import html
import json
import os
import re
import unicodedata
from collections.abc import Callable
from typing import Any
from xml.etree import ElementTree as ET

from tabulate import tabulate

FORMATS = ("text", "markdown", "html", "json", "junit")
# "unsafehtml": tabulate leaves cells as they are; html_cell has escaped each one already.
TABLE_STYLE = {"text": "simple", "markdown": "github", "html": "unsafehtml"}
MESSAGE_WIDTH = 90
SLOWER = 1.5  # a cell this many times slower than the control (geometric mean) is called out

# Terminal escape sequences: CSI (ESC [ or the 8-bit CSI) up to its final byte; OSC, DCS, SOS, PM
# and APC strings (ESC ] P X ^ _ or their 8-bit forms) up to their terminator (BEL or ST); any other
# ESC with its intermediate and final bytes (ESC c resets a terminal). An unterminated string loses
# its introducer, and a lone ESC is shown.
_ESCAPE_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]"
)
_NOT_PRINTABLE_ASCII = re.compile(r"[^\t\n\r\x20-\x7e]")
# Control (C0, DEL, C1), format (bidi overrides, zero-width, BOM) and surrogate code points, and the
# two noncharacters XML 1.0 forbids: shown, never passed on. Tab, newline and CR are whitespace.
_HIDDEN_CATEGORIES = ("Cc", "Cf", "Cs")
_MARKDOWN_SPECIAL = re.compile(r"[\\`*\[\]|]")


def _show(match: re.Match[str]) -> str:
    char = match[0]
    if unicodedata.category(char) not in _HIDDEN_CATEGORIES and char not in "\ufffe\uffff":
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """text without terminal escape sequences, every other control, format or surrogate code point
    written out as an escape (`\\x00`, `\\u202e`); tab, newline and CR stay. The result is valid
    in XML 1.0 and inert on a terminal; applying it again changes nothing."""
    if not _NOT_PRINTABLE_ASCII.search(text):
        return text  # printable ASCII (the common case): nothing to remove or show
    return _NOT_PRINTABLE_ASCII.sub(_show, _ESCAPE_SEQUENCE.sub("", text))


def one_line(text: str) -> str:
    """visible(text) with every run of whitespace (newlines included) one space: a table cell."""
    return " ".join(visible(text).split())


def markdown_cell(text: str) -> str:
    """One line of GitHub markdown that renders as the text itself: no raw HTML, entity, link, code
    span or emphasis forms, and no `|` ends a table cell."""
    return _MARKDOWN_SPECIAL.sub(r"\\\g<0>", html.escape(one_line(text), quote=False))


def html_cell(text: str) -> str:
    return html.escape(one_line(text))


CELL: dict[str, Callable[[str], str]] = {"text": one_line, "markdown": markdown_cell, "html": html_cell}
HEADINGS: dict[str, Callable[[str], str]] = {
    "text": one_line,
    "markdown": lambda t: f"## {markdown_cell(t)}",
    "html": lambda t: f"<h2>{html_cell(t)}</h2>",
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
        message = one_line(case["message"] or "")
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
    # Report-wide notes, where the report has them (say, two results for one cell@gpu, one dropped).
    lines = [str(note) for note in report.get("notes", [])]
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
    cell = CELL[fmt]

    def table(headers: list[str], rows: list[list[str]]) -> str:
        return tabulate(
            [[cell(str(v)) for v in row] for row in rows],
            headers=[cell(h) for h in headers],
            tablefmt=style,
            disable_numparse=True,
        )

    control = report["control"]["cell"] or "(none: pass --control CELL)"
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


def junit(report: dict[str, Any]) -> str:
    """One testsuite per cell@gpu, one testcase per case: CI systems show failures natively.

    ElementTree escapes markup and quotes but writes control characters as they are, which is not
    well-formed XML (a CI system then drops the whole report): every string goes through xml_text
    (messages, keeping their lines) or one_line (names)."""
    root = ET.Element("testsuites", name="convmatrix")
    by_cell: dict[str, ET.Element] = {}
    for case in report["cases"]:
        name = one_line(f"{case['cell']}@{case['gpu']}")
        suite = by_cell.get(name)
        if suite is None:
            suite = by_cell[name] = ET.SubElement(root, "testsuite", name=name)
        element = ET.SubElement(suite, "testcase", classname=name, name=one_line(case["case"]))
        if case["outcome"] == "skip":
            ET.SubElement(element, "skipped", message=xml_text(case["message"] or ""))
        elif case["outcome"] != "pass":
            failure = ET.SubElement(
                element,
                "failure",
                type=one_line(case["family"] or case["outcome"]),
                message=one_line(f"{case['delta'] or ''} {case['family'] or case['outcome']}".strip()),
            )
            failure.text = xml_text(case["message"] or "")
    for suite in by_cell.values():
        tests = list(suite)
        suite.set("tests", str(len(tests)))
        suite.set("failures", str(sum(1 for t in tests if t.find("failure") is not None)))
        suite.set("skipped", str(sum(1 for t in tests if t.find("skipped") is not None)))
    return ET.tostring(root, encoding="unicode") + "\n"


def xml_text(text: str) -> str:
    """text as XML 1.0 allows it in an attribute or element (ElementTree escapes the markup), its
    line ends newlines (a lone CR would let a line overwrite another where a CI system shows it)."""
    return visible(text).replace("\r\n", "\n").replace("\r", "\n")
