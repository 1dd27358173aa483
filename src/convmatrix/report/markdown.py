"""The markdown report, made for a CI job summary (GitHub takes up to 1 MiB a step): the grid
first (verdicts as coloured marks), then the failing or changed cases with regressions first,
then each one's whole message folded in <details>, then the notes. Every string is escaped
(escape.markdown_cell / markdown_line / html_cell), so a table stays one table whatever a message
holds, and each section has a byte budget, so the whole stays under LIMIT whatever the run."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from convmatrix.escape import html_cell, markdown_cell, markdown_line
from convmatrix.matrix.cells import abbreviate
from convmatrix.report import bounds, nights
from convmatrix.report import grid as report_grid
from convmatrix.report import notes as report_notes
from convmatrix.report import verdicts as report_verdicts
from convmatrix.report.cases import MAX_LISTED, explained, first_difference, listed, more_line, provenance
from convmatrix.report.grid import Grid
from convmatrix.report.model import CaseRow, CellRow, Report
from convmatrix.results.outcomes import Verdict
from convmatrix.results.verdicts import ORDER

LIMIT = 1_000_000  # bytes; GitHub's job summary refuses a step's summary over 1 MiB
TABLE_BUDGET = 350_000
DETAILS_BUDGET = 300_000
NOTES_BUDGET = 150_000
ROW_MESSAGE = 160  # characters of a message in the case table
DETAIL_MESSAGE = 4_000  # characters of a message in its <details>
DETAILS = 50  # cases folded out at most (regressions first)
MARKS = {Verdict.CONTROL: "🔵", Verdict.OK: "🟢", Verdict.FIXED: "🟣", Verdict.REGRESSION: "🔴",
         Verdict.INVALID: "🟠", Verdict.NOT_RUN: "⛔", Verdict.UNSUPPORTED: "🚫",
         Verdict.NO_CONTROL: "⚪", Verdict.CHANGED: "🟡", Verdict.DECLARED_SKIP: "🟩",
         Verdict.FALLBACK: "🟤", Verdict.MEMORY: "🔶", Verdict.SLOWER: "🐢"}
QUIET = "▫️"  # an optional cell that did not run: it fails nothing


def render(report: Report) -> str:
    grid = report_grid.build(report)
    control = report.control or "(none: pass --control CELL)"
    out = [f"## convmatrix report: control {markdown_cell(control)}", "",
           f"verdicts: {markdown_cell(report_verdicts.tally(report.cells))}", ""]
    alerts = report_notes.alerts(report)
    out += [*(f"> **{markdown_cell(a)}**" for a in alerts), *([""] if alerts else [])]
    out += [*grid_table(grid), "", legend(), ""]
    out += history_lines(report)
    cases = listed(report.cases)
    out += [f"## Failing or changed cases ({len(cases)})", ""]
    out += case_table(cases) if cases else ["none"]
    out += ["", *details(cases)]
    # The markdown has no Cells to look at: an image as shipped that differs from its cell as run is a note.
    notes = [*(f"{c.where}: {c.shipped_line}" for c in report.cells if c.shipped_line), *report_notes.notes(report)]
    if notes:
        lines = budgeted((f"- {markdown_cell(n)}" for n in notes), NOTES_BUDGET,
                         lambda left: f"- … {left} more notes (see the html or json report)")
        out += ["## Notes", "", *lines]
    return within_limit("\n".join(out).rstrip() + "\n")


def history_lines(report: Report) -> list[str]:
    """--history: the marks against earlier runs (report/nights.py); the nightly's job summary."""
    if not report.history:
        return []
    out = ["## Against the history", "", markdown_cell(nights.summary(report)), ""]
    for title, lines, more in nights.sections(report):
        out += [f"**{markdown_cell(title)}**", "", *(f"- {markdown_cell(line)}" for line in lines),
                *([f"- … {more} more (see the json report)"] if more else []), ""]
    return out


def within_limit(text: str) -> str:
    """The sections have budgets; only a grid of thousands of cells can pass LIMIT: cut it there."""
    data = text.encode()
    if len(data) <= LIMIT:
        return text
    kept = data[: LIMIT - 200].decode(errors="ignore").rsplit("\n", 1)[0]
    return kept + "\n\n… cut here to fit a job summary (see the html or json report)\n"


def grid_table(grid: Grid) -> list[str]:
    headers = ["stack", *(markdown_cell(c.header) for c in grid.columns)]
    out = [row(headers), row(["---"] * len(headers))]
    for group in grid.groups:
        out.append(row([f"**{markdown_cell(group.title)}**", *[""] * len(grid.columns)]))
        for stack in group.rows:
            label = markdown_cell(stack.label)
            label += f" ({markdown_cell(stack.short)})" if stack.short != stack.label else ""
            label = f"▶ **{label}**" if stack.control else label
            entries = [grid.entry(stack, c) for c in grid.columns]
            out.append(row([label, *(f"{mark(e)} {markdown_cell(report_grid.summary(e))}" if e else ""
                                     for e in entries)]))
    return out


def mark(cell: CellRow) -> str:
    return QUIET if report_grid.quiet(cell) else MARKS[cell.verdict]


def legend() -> str:
    verdicts = " · ".join(f"{MARKS[v]} {report_grid.verdict_word(v)}" for v in (Verdict.CONTROL, *ORDER,
                                                                                Verdict.NO_CONTROL))
    return (f"{verdicts} · {QUIET} not run (optional) — ▶ the control. "
            "SIGNATURE: a case failed with CUDNN\\_STATUS\\_NOT\\_SUPPORTED.")


def row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def case_table(cases: list[CaseRow]) -> list[str]:
    headers = ["cell", "gpu", "case", "verdict", "outcome", "family", "control", "delta", "message"]
    shown = cases[:MAX_LISTED]
    left_out = len(cases) - len(shown)
    lines = (row(markdown_cell(v) for v in case_cells(c)) for c in shown)
    rows = budgeted(lines, TABLE_BUDGET, lambda left: f"\n{more_line(left + left_out)}")
    if left_out and len(rows) == len(shown):
        rows.append(f"\n{more_line(left_out)}")
    return [row(headers), row(["---"] * len(headers)), *rows]


def case_cells(case: CaseRow) -> list[str]:
    message = bounds.head(case.message or "", ROW_MESSAGE)
    return [abbreviate(case.cell), case.gpu, case.case, report_grid.verdict_word(case.verdict), str(case.outcome),
            case.family or "",
            case.control_outcome or "", case.delta or "", message.text + ("…" if message.cut else "")]


def details(cases: list[CaseRow]) -> list[str]:
    """Each listed case's whole message (bounded), folded: regressions first."""
    with_message = [c for c in cases if c.message]
    blocks = ("\n".join(detail(c)) for c in with_message[:DETAILS])
    out = budgeted(blocks, DETAILS_BUDGET, lambda left: f"… {left} more messages (see the html or json report)")
    if len(with_message) > DETAILS:
        out.append(f"… {len(with_message) - DETAILS} more messages (see the html or json report)")
    return ([f"### Messages ({min(len(with_message), DETAILS)} of {len(with_message)})", "", *out, ""]
            if out else [])


def detail(case: CaseRow) -> list[str]:
    message = bounds.head(case.message or "", DETAIL_MESSAGE)
    title = f"{abbreviate(case.cell)}@{case.gpu} {case.case}: {case.outcome} {case.family or ''}"
    lines = [markdown_line(line) for line in message.text.splitlines() if line.strip()]
    if message.note:
        lines.append(f"*{markdown_cell(message.note)}*")
    for said in (first_difference(case), explained(case)):
        if said:
            lines.append(markdown_line(said))
    if case.sources and case.outcome.failing:
        lines.append(markdown_line(provenance(case)))
    lines += [markdown_line(k) for k in case.known]
    # Backslash at a line's end: a hard break, so the message keeps its lines in one paragraph.
    return [f"<details><summary>{html_cell(title)} ({html_cell(report_grid.verdict_word(case.verdict))})</summary>", "",
            " \\\n".join(lines), "", "</details>", ""]


def budgeted(items: Iterable[str], budget: int, more: Callable[[int], str]) -> list[str]:
    """items while their UTF-8 size fits the budget; then one line saying how many were left out."""
    out: list[str] = []
    pending = list(items)
    used = 0
    for index, item in enumerate(pending):
        size = len(item.encode()) + 1
        if used + size > budget:
            out.append(more(len(pending) - index))
            break
        out.append(item)
        used += size
    return out
