"""Report renderers, one entry (render) for every format, all from the typed report model
(report_model.Report): text (render_text), markdown (render_markdown), html (render_html), json
(report_json), junit (here). Every string of a report passes through its format's helper in
escape.py, so the output stays well-formed for its consumer whatever a message holds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from xml.etree import ElementTree as ET

from convmatrix.escape import one_line, xml_text
from convmatrix.report import grid as report_grid
from convmatrix.report import json as report_json
from convmatrix.report.model import CaseRow, CellRow, Report
from convmatrix.results.families import SIGNATURE
from convmatrix.results.night import case_fails, case_red
from convmatrix.results.outcomes import Outcome, Verdict
from convmatrix.results.verdicts import COSTS, OUTSIDE

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
    """(failure or skipped, why) for a cell whose verdict is not plainly ok; None when it is. A
    failure exactly when the cell makes the report red (Report.red, the exit code's question), or
    its control is unhealthy (exit 3)."""
    kind = "failure" if report.red(cell) else "skipped"
    reasons = "; ".join([*(f"stack mismatch: {m}" for m in cell.mismatches), *cell.problems]) or "incomplete"
    owed = cell.verdicts.get(Verdict.NOT_RUN, 0)
    if cell.did_not_run and cell.verdict != Verdict.CONTROL:
        return kind, f"{report_grid.cell_word(cell)}: {report_grid.did_not_run(cell)}"
    if cell.verdict == Verdict.NOT_RUN and cell.not_run is not None:
        why = cell.not_run or "no result"
        return kind, (f"not run (optional): {why}" if cell.excused else f"NOT RUN: {why}")
    if cell.verdict == Verdict.NOT_RUN:
        return kind, f"NOT RUN: {owed} case(s) the control ran did not run here (skipped or no result)"
    if cell.verdict == Verdict.INVALID:
        health = report.health.get(cell.gpu.key)
        sick = f"; the control on {cell.gpu.key}: {health.reason}" if health and not health.healthy else ""
        return kind, f"INVALID: {reasons}{sick}"
    if cell.verdict == Verdict.REGRESSION:
        also = f"; {owed} case(s) the control ran did not run here" if owed else ""
        return kind, f"REGRESSION: {cell.regressions} case(s) regressed against the control{also}"
    if cell.verdict == Verdict.CONTROL:
        health = report.health.get(cell.gpu.key)
        if health is not None and not health.healthy:
            return "failure", f"CONTROL UNHEALTHY: {health.reason}: no verdicts on {cell.gpu.key}"
        return None
    if cell.verdict in COSTS or (kind == "failure" and cell.found & set(COSTS) and not cell.signature):
        said = ", ".join(f"{cell.verdicts[str(v)]} {v}" for v in COSTS if cell.verdicts.get(str(v)))
        fails = "" if kind == "failure" else ": fails nothing (--fail-on " + "|".join(map(str, COSTS)) + " would)"
        return kind, f"{report_grid.verdict_word(cell.verdict).upper()}: case(s) passed at a cost against the " \
                     f"control ({said}){fails}"
    if kind == "failure":  # the signature policy: a signature failure the control shares
        return kind, f"SIGNATURE: a case failed with {SIGNATURE} (--fail-on signature)"
    if cell.verdict == Verdict.NO_CONTROL:
        return kind, "no control to compare with"
    if cell.verdict == Verdict.UNSUPPORTED:
        return kind, f"UNSUPPORTED on this runner ({cell.unsupported}): fails nothing"
    if cell.verdict == Verdict.CHANGED:
        return kind, f"CHANGED: {cell.verdicts.get(Verdict.CHANGED, 0)} case(s) pass that the control skipped: " \
                     "fails nothing"
    if cell.verdict == Verdict.DECLARED_SKIP:
        return kind, "DECLARED SKIP: every case the control ran and this cell skipped is declared in the matrix"
    return None


def case_element(suite: ET.Element, case: CaseRow, red: bool, outside: bool, policy: str = "regression") -> None:
    """A case's testcase: in a candidate (a cell in the order of verdicts), a failure only in a
    cell that makes the report red (and then every case that failed or owed a run), else a skip
    saying why it fails nothing, so that a CI system counts what the exit code counts. Outside the
    order (the control, a cell with no control) a failing case is a failure as it stands: nothing
    was compared, and the control's own failures are the alerts every format leads with."""
    name = one_line(case.where)
    element = ET.SubElement(suite, "testcase", classname=name, name=one_line(case.case))
    if case.history is not None:  # --history: its mark against earlier runs
        ET.SubElement(ET.SubElement(element, "properties"), "property", name="history", value=case.history.word)
    if case.outcome == Outcome.PASS and case.verdict not in COSTS:
        return
    if red and case.verdict in COSTS and case_fails(case.verdict, policy):
        # Passed at a cost the policy names (--fail-on fallback): a failure saying what it cost.
        failure = ET.SubElement(element, "failure", type=str(case.verdict), message=one_line(case.message or ""))
        failure.text = xml_text(case.message or "")
        return
    if case.outcome == Outcome.PASS:
        said = f"{case.verdict}: {case.message or ''} (fails nothing here)"
        ET.SubElement(element, "skipped", message=one_line(said))
        return
    if (red and (case.outcome.failing or case_red(case.verdict))) or (outside and case.outcome.failing):
        failure = ET.SubElement(element, "failure", type=one_line(case.family or case.verdict),
                                message=one_line(f"{case.verdict} {case.family or case.outcome}".strip()))
        failure.text = xml_text(case.message or "")
    elif case.outcome == Outcome.SKIP and case.verdict in (Verdict.OK, Verdict.DECLARED_SKIP, Verdict.CONTROL,
                                                           Verdict.NO_CONTROL):
        why = f"declared: {case.declared}; " if case.declared else ""
        ET.SubElement(element, "skipped", message=xml_text(why + (case.message or "")))
    else:
        # Fails nothing here: unsupported by the runner, fails as on the control, no control, or
        # a cell whose policy (--fail-on signature) does not count it.
        ET.SubElement(element, "skipped", message=one_line(
            f"{case.verdict}: {case.family or case.outcome} (fails nothing here)"))


def attempts_element(suite: ET.Element, cell: CellRow) -> None:
    """A retried cell's earlier attempts beside its last: a testcase `(attempts)` holding each as
    a <flakyFailure> (Maven Surefire's element for a run a rerun replaced, which consumers that do
    not know it pass over: maven.apache.org/surefire/maven-surefire-plugin/examples/rerun-failing-tests.html),
    and every attempt in words in its <system-out>. It fails nothing itself: the cell's own
    testcases and verdict say how the last attempt went."""
    name = one_line(cell.where)
    element = ET.SubElement(suite, "testcase", classname=name, name="(attempts)")
    total = len(cell.attempts) + 1
    for attempt in cell.attempts:
        flaky = ET.SubElement(element, "flakyFailure", type=one_line(attempt.cause.cause),
                              message=one_line(attempt.words(total)))
        flaky.text = xml_text(attempt.cause.words())
    last = f"attempt {total} of {total} (last, judged): {cell.verdict}"
    ET.SubElement(element, "system-out").text = xml_text(
        "\n".join([*(a.words(total) for a in cell.attempts), last]))


def junit(report: Report) -> str:
    """One testsuite per cell@gpu, one testcase per case: CI systems show failures natively.

    ElementTree escapes markup and quotes but writes control characters as they are, which is not
    well-formed XML (a CI system then drops the whole report): every string goes through xml_text
    (messages, keeping their lines) or one_line (names)."""
    root = ET.Element("testsuites", name="convmatrix")
    by_cell: dict[str, ET.Element] = {}
    red = {(c.cell, c.gpu.key) for c in report.cells if report.red(c)}
    outside = {(c.cell, c.gpu.key) for c in report.cells if c.verdict in OUTSIDE}
    for case in report.cases:
        name = one_line(case.where)
        suite = by_cell.get(name)
        if suite is None:
            suite = by_cell[name] = ET.SubElement(root, "testsuite", name=name)
        case_element(suite, case, (case.cell, case.gpu) in red, (case.cell, case.gpu) in outside, report.policy)
    for cell in report.cells:
        said = verdict_case(cell, report)
        if said is None:
            continue
        # The cell's verdict as a testcase of its own: a CI system then counts a cell that is not
        # ok (INVALID, NOT RUN, a sick control) as failing even when none of its cases failed,
        # as the text report does.
        kind, message = said
        name = one_line(cell.where)
        # `is None`, not `or`: an Element with no children is false, so an empty suite was made twice.
        suite = by_cell.get(name)
        if suite is None:
            suite = by_cell[name] = ET.SubElement(root, "testsuite", name=name)
        element = ET.SubElement(suite, "testcase", classname=name, name="(verdict)")
        attributes = {"message": one_line(message), **({"type": str(cell.verdict)} if kind == "failure" else {})}
        ET.SubElement(element, kind, attributes).text = xml_text(message)
    if report.notes:
        # What the reader should know of the inputs (a skipped .partial rerun, a duplicate dropped):
        # a suite of its own with no testcase, the notes in its <system-out>, as CI systems show it.
        notes = by_cell["(notes)"] = ET.SubElement(root, "testsuite", name="(notes)")
        ET.SubElement(notes, "system-out").text = xml_text("\n".join(report.notes))
    for cell in report.cells:
        if cell.attempts:
            name = one_line(cell.where)
            suite = by_cell.get(name)
            if suite is None:
                suite = by_cell[name] = ET.SubElement(root, "testsuite", name=name)
            attempts_element(suite, cell)
    for suite in by_cell.values():
        tests = [t for t in suite if t.tag == "testcase"]
        suite.set("tests", str(len(tests)))
        suite.set("failures", str(sum(1 for t in tests if t.find("failure") is not None)))
        suite.set("skipped", str(sum(1 for t in tests if t.find("skipped") is not None)))
    return ET.tostring(root, encoding="unicode") + "\n"
