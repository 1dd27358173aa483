"""Report renderers, one entry (render) for every format, all from the typed report model
(report_model.Report): text (render_text), markdown (render_markdown), html (render_html), json
(report_json), junit (here). Every string of a report passes through its format's helper in
escape.py, so the output stays well-formed for its consumer whatever a message holds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from xml.etree import ElementTree as ET

from convmatrix.escape import one_line, xml_text
from convmatrix.report import json as report_json
from convmatrix.report.model import CellRow, Report
from convmatrix.results.outcomes import Outcome, Verdict

FORMATS = ("text", "markdown", "html", "json", "junit")


def render(report: Report, fmt: str, *, color: bool = False) -> str:
    """The report in one format; color (ANSI) applies to text only, and only when asked for."""
    renderers: dict[str, Callable[[Report], str]] = {
        "text": lambda r: text(r, color=color),
        "markdown": markdown,
        "html": html,
        "json": report_json.dumps,
        "junit": junit,
    }
    return renderers[fmt](report)


# The text, markdown and html renderers are imported when their format is asked for: a fleet's
# json report need not wait for their imports (html's alone take 30 ms).
def text(report: Report, *, color: bool) -> str:
    from convmatrix.report import text as render_text  # lazy, for start-up time (above)

    return render_text.render(report, color=color)


def markdown(report: Report) -> str:
    from convmatrix.report import markdown as render_markdown  # lazy, for start-up time (above)

    return render_markdown.render(report)


def html(report: Report) -> str:
    from convmatrix.report import html as render_html  # lazy, for start-up time (above)

    return render_html.render(report)


def stream(report: Report, fmt: str, *, color: bool = False) -> Iterator[str]:
    """The report in pieces, to write as they are made: json, whose fleet reports run to tens of
    megabytes, in a piece per batch of rows; the other formats whole."""
    if fmt == "json":
        yield from report_json.chunks(report)
    else:
        yield render(report, fmt, color=color)


def verdict_case(cell: CellRow, report: Report) -> tuple[str, str] | None:
    """(failure or skipped, why) for a cell whose verdict is not plainly ok; None when it is."""
    reasons = "; ".join([*(f"stack mismatch: {m}" for m in cell.mismatches), *cell.problems]) or "incomplete"
    if cell.verdict == Verdict.NOT_RUN:
        why = cell.not_run or "no result"
        return ("skipped", f"not run (optional): {why}") if cell.optional else ("failure", f"NOT RUN: {why}")
    if cell.verdict == Verdict.INVALID:
        health = report.health.get(cell.gpu.key)
        sick = f"; the control on {cell.gpu.key}: {health.reason}" if health and not health.healthy else ""
        return "failure", f"INVALID: {reasons}{sick}"
    if cell.verdict == Verdict.REGRESSION:
        return "failure", f"REGRESSION: {cell.regressions} case(s) regressed against the control"
    if cell.verdict == Verdict.CONTROL:
        health = report.health.get(cell.gpu.key)
        if health is not None and not health.healthy:
            return "failure", f"CONTROL UNHEALTHY: {health.reason}: no verdicts on {cell.gpu.key}"
    if cell.verdict == Verdict.NO_CONTROL:
        return "skipped", "no control to compare with"
    if cell.verdict == Verdict.UNSUPPORTED:
        return "skipped", f"UNSUPPORTED on this runner ({cell.unsupported}): fails nothing"
    return None


def junit(report: Report) -> str:
    """One testsuite per cell@gpu, one testcase per case: CI systems show failures natively.

    ElementTree escapes markup and quotes but writes control characters as they are, which is not
    well-formed XML (a CI system then drops the whole report): every string goes through xml_text
    (messages, keeping their lines) or one_line (names)."""
    root = ET.Element("testsuites", name="convmatrix")
    by_cell: dict[str, ET.Element] = {}
    unsupported = {(c.cell, c.gpu.key) for c in report.cells if c.verdict == Verdict.UNSUPPORTED}
    for case in report.cases:
        name = one_line(case.where)
        suite = by_cell.get(name)
        if suite is None:
            suite = by_cell[name] = ET.SubElement(root, "testsuite", name=name)
        element = ET.SubElement(suite, "testcase", classname=name, name=one_line(case.case))
        if (case.cell, case.gpu) in unsupported and case.outcome != Outcome.PASS:
            # The runner cannot run this stack: its cases say so, they do not fail the build.
            ET.SubElement(element, "skipped", message=one_line(f"unsupported here: {case.family or case.outcome}"))
        elif case.outcome == Outcome.SKIP:
            ET.SubElement(element, "skipped", message=xml_text(case.message or ""))
        elif case.outcome != Outcome.PASS:
            failure = ET.SubElement(
                element,
                "failure",
                type=one_line(case.family or case.outcome),
                message=one_line(f"{case.delta or ''} {case.family or case.outcome}".strip()),
            )
            failure.text = xml_text(case.message or "")
    for cell in report.cells:
        said = verdict_case(cell, report)
        if said is None:
            continue
        # The cell's verdict as a testcase of its own: a CI system then counts a cell that is not
        # ok (INVALID, NOT RUN, a sick control) as failing even when none of its cases failed,
        # as the text report does.
        kind, message = said
        name = one_line(cell.where)
        suite = by_cell.get(name) or ET.SubElement(root, "testsuite", name=name)
        by_cell[name] = suite
        element = ET.SubElement(suite, "testcase", classname=name, name="(verdict)")
        attributes = {"message": one_line(message), **({"type": str(cell.verdict)} if kind == "failure" else {})}
        ET.SubElement(element, kind, attributes).text = xml_text(message)
    for suite in by_cell.values():
        tests = list(suite)
        suite.set("tests", str(len(tests)))
        suite.set("failures", str(sum(1 for t in tests if t.find("failure") is not None)))
        suite.set("skipped", str(sum(1 for t in tests if t.find("skipped") is not None)))
    return ET.tostring(root, encoding="unicode") + "\n"


