"""The html report: one self-contained file (inline CSS and a little JS, nothing fetched) with
the matrix grid coloured by verdict, a panel per cell@gpu with its cases (whole messages, the
triage first cause, the evidence inline), a filter, the baseline comparison and the notes.

Every string from a run is escaped into the markup here (escape.html_cell, escape.html_text);
the page also carries a Content-Security-Policy that lets only its own style and script (by
hash) run, so that markup which got through anyway would stay inert. Messages and evidence
are cut at documented sizes (report_bounds), with a note, so a 10 MB message never lands in
the page. Without JS the page still reads: every panel is shown, one after the other."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from importlib import resources

from convmatrix.escape import html_cell, html_text
from convmatrix.matrix.cells import abbreviate
from convmatrix.report import bounds, nights
from convmatrix.report import grid as report_grid
from convmatrix.report import notes as report_notes
from convmatrix.report.cases import MAX_LISTED, explained, first_difference, listed, more_line, noteworthy, parameters
from convmatrix.report.grid import Column, Grid
from convmatrix.report.model import CaseRow, CellRow, Report
from convmatrix.results.outcomes import Delta, Verdict
from convmatrix.results.verdicts import ORDER

MESSAGE_LIMIT = 16_384  # characters of a message shown; the whole one is in results.jsonl
EVIDENCE_LIMIT = 32_768  # characters of an evidence file shown (its end: the failure)
EVIDENCE_BUDGET = 8_000_000  # characters of evidence in the whole page; the rest is linked by path
MESSAGE_BUDGET = 8_000_000  # characters of messages in the whole page; past it each is cut shorter
SHORT_MESSAGE = 1_000
OBSERVED = (("torch", "torch"), ("CUDA", "cuda"), ("cuDNN", "cudnn"), ("cuDNN error", "cudnn_error"),
            ("driver", "driver"), ("image", "image_id"), ("python", "python"), ("device", "device"),
            ("host", "hostname"))

SHOWN_SIGNED = 6  # cells the overview names where the signature is; the grid marks every one
# Cases the page lists one by one, each with its details. Past it (a fleet: 51 stacks x 4 GPUs
# listed 47,000 rows, 16 MB) the page is compact: each cell names its noteworthy cases in one line
# per verdict and family, plain ones are counted, and each distinct failure is told once, with the
# cells it failed on (Failures by case). The json report keeps every case.
ROW_BUDGET = 3_000
SHOWN_FAILURES = 400  # distinct failures told in a compact page; the rest counted
SHOWN_WHERE = 4  # cells a distinct failure names (the rest counted)
FAILURE_MESSAGE = 400  # characters of a distinct failure's message shown


class Budget:
    """What is left of EVIDENCE_BUDGET while a page is made (one per render)."""

    def __init__(self, left: int) -> None:
        self.left = left

    def take(self, size: int) -> bool:
        if size > self.left:
            return False
        self.left -= size
        return True


def render(report: Report) -> str:
    grid = report_grid.build(report)
    ids = {(c.cell, c.gpu.key): f"c{i}" for i, c in enumerate(report.cells)}
    budget = Budget(EVIDENCE_BUDGET)
    words = Budget(MESSAGE_BUDGET)
    cases: dict[tuple[str, str], list[CaseRow]] = {}
    for case in report.cases:
        cases.setdefault((case.cell, case.gpu), []).append(case)
    compact = sum(min(len(rows), MAX_LISTED) for rows in cases.values()) > ROW_BUDGET
    body = [*heading(report), *overview(report), *look_section(report, ids), *grid_section(grid, ids, report),
            *history_section(report), *filter_box()]
    body += ["<section id=\"cells\">", "<h2>Cells</h2>"]
    if compact:
        body += [line for cell in report.cells
                 for line in compact_panel(cell, cases.get((cell.cell, cell.gpu.key), []), ids)]
    else:
        body += [line for cell in report.cells
                 for line in panel(cell, cases.get((cell.cell, cell.gpu.key), []), ids, budget, words)]
    body += ["</section>", *(failures_section(report) if compact else []), *baseline_section(report),
             *notes_section(report)]
    return page(f"convmatrix report: control {report.control or '(none)'}", body)


def page(title: str, body: list[str]) -> str:
    return document(title, body, css=asset("report.css"), js=asset("report.js"))


def document(title: str, body: Iterable[str], *, css: str, js: str | None = None) -> str:
    """A whole page whose Content-Security-Policy lets only this style sheet and this script (by
    hash; none without one) apply and loads nothing: a string that got into the markup stays
    inert. The report's page and the atlas's (atlas/site.py) are both this one."""
    scripts = f"script-src '{digest(js)}'" if js is not None else "script-src 'none'"
    policy = (f"default-src 'none'; style-src '{digest(css)}'; {scripts}; img-src data:; base-uri 'none'; "
              "form-action 'none'")
    head = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<meta name="color-scheme" content="light dark">', '<link rel="icon" href="data:,">',
            f"<title>{html_cell(title)}</title>", f"<style>{css}</style>", "</head>", "<body>"]
    tail = [f"<script>{js}</script>"] if js is not None else []
    return "\n".join([*head, *body, *tail, "</body>", "</html>"]) + "\n"


def asset(name: str) -> str:
    return (resources.files("convmatrix.report") / name).read_text(encoding="utf-8")


def digest(text: str) -> str:
    """A CSP source for an inline <style> or <script> holding exactly this text."""
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def heading(report: Report) -> list[str]:
    control = report.control or "(none: pass --control CELL)"
    return ["<header>", "<h1>convmatrix report</h1>",
            f'<p class="sub">control <code>{html_cell(control)}</code></p>', "</header>"]


def overview(report: Report) -> list[str]:
    """At a glance: how many cells got each verdict, and where the signature is."""
    counts = {v: sum(1 for c in report.cells if c.verdict == v) for v in (Verdict.CONTROL, *ORDER, Verdict.NO_CONTROL)}
    parts = [f'<span class="badge v-{v}">{n} {html_cell(report_grid.verdict_word(v))}</span>'
             for v, n in counts.items() if n]
    signed = [c.where for c in report.cells if c.signature]
    # A fleet's overview names a few and counts the rest: 188 ids pushed the grid off the screen.
    more = f" and {len(signed) - SHOWN_SIGNED} more (marked S in the grid)" if len(signed) > SHOWN_SIGNED else ""
    sig = (f'<p class="sig-cells"><span class="mark sig">SIGNATURE</span> in {len(signed)} cell(s): '
           + ", ".join(f"<code>{html_cell(w)}</code>" for w in signed[:SHOWN_SIGNED]) + f"{more}</p>") if signed else ""
    sick = [f'<p class="warn">{html_cell(line)}</p>' for line in report_notes.alerts(report)]
    return ['<section id="overview">', f'<p class="counts">{" ".join(parts)}</p>', sig, *sick, "</section>"]


def look_section(report: Report, ids: dict[tuple[str, str], str]) -> list[str]:
    """What the page opens with: every red cell and every finding, one line each (a stack's
    identical lines across GPUs as one, report_grid.look), with its GPUs, each a link to its cell,
    and its cause; red ones first."""
    lines = report_grid.look(report)
    if not lines:
        return []
    out = ['<section id="look">', f"<h2>Cells to look at ({len(lines)})</h2>", '<ul class="look">']
    for line in lines:
        first = line.rows[0]
        gpus = ", ".join(f'<a href="#{ids[(r.cell, r.gpu.key)]}">{html_cell(r.gpu.key)}</a>' for r in line.rows)
        word, _, rest = ("AS SHIPPED", "", line.words) if line.shipped else line.words.partition(": ")
        quiet = " quiet" if report_grid.quiet(first) else ""
        # The image as shipped: a finding, never red, whatever the cell's verdict (its own line says that).
        badge = "shipped" if line.shipped else f"v-{first.verdict}{quiet}"
        red = not line.shipped and any(report.red(r) for r in line.rows)
        out.append(f'<li class="{"red" if red else "finding"}" '
                   f'title="{html_cell(line.where)}: {html_cell(line.words)}">'
                   f'<span class="badge {badge}">{html_cell(word)}</span> '
                   f'<code title="{html_cell(line.cell)}">{html_cell(abbreviate(line.cell))}</code> on {gpus}'
                   f'{": " if rest else ""}{html_cell(rest)}</li>')
    return [*out, "</ul>", "</section>"]


def grid_section(grid: Grid, ids: dict[tuple[str, str], str], report: Report) -> list[str]:
    """The grid; the rows and columns that hold no red cell nor finding are marked plain, so that
    the reds-only toggle (a checkbox before the table: CSS alone, it works without JS) hides them."""
    found = {where for where, cell in grid.entries.items() if report_grid.finding(cell) or report.red(cell)}
    plain_rows = {row.cell for row in grid.rows if not any(where[0] == row.cell for where in found)}
    plain_cols = {c.key for c in grid.columns if not any(where[1] == c.key for where in found)}

    def col(column: Column) -> str:
        return " plain-col" if column.key in plain_cols else ""

    heads = "".join(f'<th scope="col" class="gpu{col(c)}"><span class="gen">'
                    f'{html_cell(c.generation if c.key != "cpu" else "")}'
                    f'</span> <span class="key">{html_cell(c.key)}</span></th>' for c in grid.columns)
    toggle = ([f'<input type="checkbox" id="reds-only" class="toggle"> <label for="reds-only">only the rows and '
               f"columns with a red cell or a finding ({len(grid.rows) - len(plain_rows)} of {len(grid.rows)} "
               f"stacks, {len(grid.columns) - len(plain_cols)} of {len(grid.columns)} GPUs)</label>"]
              if found else [])
    out = ['<section id="grid">', "<h2>Matrix</h2>", *toggle, '<table class="grid">',
           f'<thead><tr><th scope="col">stack</th>{heads}</tr></thead>', "<tbody>"]
    for group in grid.groups:
        plain = " plain" if all(row.cell in plain_rows for row in group.rows) else ""
        out.append(f'<tr class="group{plain}"><th colspan="{len(grid.columns) + 1}">{html_cell(group.title)}</th></tr>')
        for row in group.rows:
            cells = "".join(grid_cell(grid.entry(row, c), ids, col(c)) for c in grid.columns)
            short = f' <span class="short">{html_cell(row.short)}</span>' if row.short != row.label else ""
            plain = " plain" if row.cell in plain_rows else ""
            out.append(f'<tr class="stack{" control-row" if row.control else ""}{plain}"><th scope="row" '
                       f'title="{html_cell(row.cell)}"><span class="label">{html_cell(row.label)}</span>'
                       f"{short}</th>{cells}</tr>")
    return [*out, "</tbody>", "</table>", *legend(), "</section>"]


def grid_cell(cell: CellRow | None, ids: dict[tuple[str, str], str], plain: str = "") -> str:
    if cell is None:
        return f'<td class="empty{plain}"></td>'
    panel_id = ids[(cell.cell, cell.gpu.key)]
    tally = report_grid.tally(cell)
    counts = f"{tally.passed}/{tally.total} pass" + (f" · {tally.failed} fail" if tally.failed else "")
    counts += f" · {tally.missing} missing" if tally.missing else ""
    counts = "no result" if cell.not_run is not None else counts
    counts = f"did not run: {cell.infra_cause.cause}" if cell.did_not_run and cell.infra_cause else counts
    quiet = " quiet" if report_grid.quiet(cell) else ""
    marks = "".join(f'<span class="mark {mark_class(m.code)}">{html_cell(m.words)}</span>'
                    for m in report_grid.marks(cell))
    return (f'<td class="v v-{cell.verdict}{quiet}{plain}" data-panel="{panel_id}">'
            f'<a class="cellref" href="#{panel_id}" '
            f'title="{html_cell(cell.where)}: {html_cell(report_grid.summary(cell))}">'
            f'<span class="verdict">{html_cell(report_grid.cell_word(cell))}</span> '
            f'<span class="counts">{html_cell(counts)}</span>{marks}{history_mark(cell)}</a></td>')


def history_mark(cell: CellRow) -> str:
    """With --history: the cell's mark in the grid, first-red apart from recurring (a new red is
    what a nightly's reader looks for first), and its last runs as a strip, oldest first."""
    mark = cell.history
    if mark is None:
        return ""
    strip = "".join(f'<i class="{"r" if run == "x" else "g"}"></i>' for run in mark.recent)
    return (f'<span class="hist h-{html_cell(str(mark.state))}">{html_cell(str(mark.state))}</span>'
            f'<span class="strip" title="the last {len(mark.recent)} runs, oldest first">{strip}</span>')


def mark_class(code: str) -> str:
    return {"S": "sig", "w": "wsig", "M": "mismatch", "B": "baseline"}[code[0]]


def legend() -> list[str]:
    swatches = "".join(f'<li><span class="swatch v-{v}"></span>{html_cell(report_grid.verdict_word(v))}</li>'
                       for v in (Verdict.CONTROL, *ORDER, Verdict.NO_CONTROL))
    return [f'<ul class="legend">{swatches}<li><span class="mark sig">SIGNATURE</span> a case failed with '
            "CUDNN_STATUS_NOT_SUPPORTED</li></ul>",
            '<p class="hint">Click a cell for its cases, messages and evidence.</p>']


def filter_box() -> list[str]:
    return ['<p class="filter"><label for="filter">Filter cases</label> '
            '<input id="filter" type="search" placeholder="case id or family" autocomplete="off"></p>']


def panel(cell: CellRow, cases: list[CaseRow], ids: dict[tuple[str, str], str], budget: Budget,
          words: Budget) -> list[str]:
    ordered = listed(cases) + [c for c in cases if not noteworthy(c)]
    first = next((c for c in ordered if noteworthy(c)), None)
    out = panel_head(cell, ids)
    kept = ordered[:MAX_LISTED]
    out.append(f'<p class="shown-count"><span class="shown">{len(kept)}</span> of {len(kept)} cases shown</p>')
    out.append('<ul class="cases">')
    out += [line for case in kept for line in case_item(cell, case, case is first, budget, words)]
    out.append("</ul>")
    if len(ordered) > len(kept):
        out.append(f'<p class="more">{html_cell(more_line(len(ordered) - len(kept), "cases of this cell"))}</p>')
    return [*out, "</section>"]


def panel_head(cell: CellRow, ids: dict[tuple[str, str], str]) -> list[str]:
    out = [f'<section class="panel" id="{ids[(cell.cell, cell.gpu.key)]}" data-where="{html_cell(cell.where)}">',
           f'<h3><span class="badge v-{cell.verdict}{" quiet" if report_grid.quiet(cell) else ""}">'
           f'{html_cell(report_grid.cell_word(cell))}</span> '
           f"<code>{html_cell(cell.where)}</code></h3>",
           f'<p class="summary">{html_cell(report_grid.summary(cell))}</p>', *observed(cell), *problems(cell)]
    if cell.first_cause:
        out.append(f'<p class="cause">{html_cell(first_cause(cell))}</p>')
    return out


def compact_panel(cell: CellRow, cases: list[CaseRow], ids: dict[tuple[str, str], str]) -> list[str]:
    """A cell of a fleet's page: its noteworthy cases named, one line per verdict and family (the
    filter still finds them by id and family); what they said is under Failures by case."""
    noted = listed(cases)  # sorted once: the named, the plain and the rest are counted from it
    named = noted[:MAX_LISTED]
    groups: dict[tuple[str, str], list[str]] = {}
    for case in named:
        groups.setdefault((str(case.verdict), case.family or ""), []).append(case.case)
    plain = len(cases) - len(noted)
    out = panel_head(cell, ids)
    out.append(f'<p class="shown-count"><span class="shown">{len(named)}</span> noteworthy case(s) named; '
               f"{plain} plain one(s) counted, not listed (a fleet's page: the json report lists every case)</p>")
    for (verdict, family), names in groups.items():
        word = report_grid.verdict_word(Verdict(verdict))
        fam = f' <span class="fam">{html_cell(family)}</span>' if family else ""
        out.append(f'<p class="ids" data-family="{html_cell(family)}"><span class="cv v-{verdict}">{html_cell(word)}'
                   f"</span>{fam} ({len(names)}): " + " ".join(f"<code>{html_cell(n)}</code>" for n in names) + "</p>")
    left = len(noted) - len(named)
    if left > 0:
        out.append(f'<p class="more">{html_cell(more_line(left, "cases of this cell"))}</p>')
    return [*out, "</section>"]


def failures_section(report: Report) -> list[str]:
    """Each distinct failure of a fleet's page once: the case, its family, the first line of its
    message, and the cells it failed on that way (a few named, the rest counted)."""
    seen: dict[tuple[str, str, str], list[CaseRow]] = {}
    for case in report.cases:
        if case.outcome.failing:
            head = (case.message or "").strip().splitlines()[:1]
            seen.setdefault((case.case, case.family or "", head[0] if head else ""), []).append(case)
    ordered = sorted(seen.items(), key=lambda item: (-len(item[1]), item[0]))
    out = ['<section id="failures">', "<h2>Failures by case</h2>", '<ul class="failures">']
    for (name, family, _), rows in ordered[:SHOWN_FAILURES]:
        first = rows[0]
        where = ", ".join(f"<code>{html_cell(r.cell + '@' + r.gpu)}</code>" for r in rows[:SHOWN_WHERE])
        more = f" and {len(rows) - SHOWN_WHERE} more" if len(rows) > SHOWN_WHERE else ""
        message = bounds.head(first.message or "", FAILURE_MESSAGE, "results.jsonl").text
        out.append(f'<li><code class="id">{html_cell(name)}</code> <span class="fam">{html_cell(family)}</span> '
                   f"in {len(rows)} cell(s): {where}{more}"
                   f'<pre class="message">{html_text(message)}</pre>'
                   + "".join(f'<p class="known">{html_cell(k)}</p>' for k in first.known) + "</li>")
    out.append("</ul>")
    if len(ordered) > SHOWN_FAILURES:
        out.append(f'<p class="more">{html_cell(more_line(len(ordered) - SHOWN_FAILURES, "distinct failures"))}</p>')
    return [*out, "</section>"]


def observed(cell: CellRow) -> list[str]:
    seen = [(name, cell.observed.get(key)) for name, key in OBSERVED if cell.observed.get(key) is not None]
    rows = "".join(f"<dt>{name}</dt><dd>{html_cell(str(value))}</dd>" for name, value in seen)
    asked = ", ".join(f"{k}={v}" for k, v in cell.stack.items() if v)
    out = [f'<dl class="observed">{rows}<dt>lane</dt><dd>{html_cell(cell.lane)}</dd></dl>']
    if asked:
        out.append(f'<p class="requested">requested: {html_cell(asked)}</p>')
    return [*out, f'<p class="path">results: <code>{html_cell(cell.path)}</code></p>']


def problems(cell: CellRow) -> list[str]:
    items = [f"stack mismatch: {m}" for m in cell.mismatches] + list(cell.problems)
    return ['<ul class="problems">', *(f"<li>{html_cell(i)}</li>" for i in items), "</ul>"] if items else []


def first_cause(cell: CellRow) -> str:
    cause = cell.first_cause
    assert cause is not None
    rank = f" (rank {cause.rank})" if cause.rank is not None else ""
    return f"first failure in the log: {cause.family} at {cause.log}:{cause.line}{rank}"


def case_item(cell: CellRow, case: CaseRow, opened: bool, budget: Budget, words: Budget) -> list[str]:
    attrs = (f'class="case d-{case.delta or "none"}{" noteworthy" if noteworthy(case) else ""}" '
             f'data-case="{html_cell(case.case)}" data-family="{html_cell(case.family or "")}"')
    line = case_line(case)
    if not noteworthy(case):
        return [f"<li {attrs}>{line}</li>"]
    return [f"<li {attrs}><details{' open' if opened else ''}><summary>{line}</summary>", '<div class="body">',
            *case_body(cell, case, opened, budget, words), "</div></details></li>"]


def case_line(case: CaseRow) -> str:
    parts = [f'<span class="o o-{case.outcome}">{html_cell(case.outcome)}</span>',
             f'<code class="id">{html_cell(case.case)}</code>',
             f'<span class="cv v-{case.verdict}">{html_cell(report_grid.verdict_word(case.verdict))}</span>']
    if case.family:
        parts.append(f'<span class="fam">{html_cell(case.family)}</span>')
    if case.control_outcome or case.delta:
        parts.append(f'<span class="vs">control: {html_cell(case.control_outcome or "-")} → '
                     f'<span class="delta d-{case.delta or "none"}">{html_cell(case.delta or "-")}</span></span>')
    if case.baseline_delta not in (None, Delta.SAME):
        parts.append(f'<span class="vs">baseline: {html_cell(case.baseline_outcome or "-")} → '
                     f"{html_cell(case.baseline_delta or '-')}</span>")
    return " ".join(parts)


def case_body(cell: CellRow, case: CaseRow, opened: bool, budget: Budget, words: Budget) -> list[str]:
    # Thousands of huge messages would still make a page too big to open: past the page's
    # budget each is cut shorter (the note says how much there was).
    size = min(len(case.message or ""), MESSAGE_LIMIT)
    limit = MESSAGE_LIMIT if words.take(size) else SHORT_MESSAGE
    message = bounds.head(case.message or "", limit, f"{cell.path}/results.jsonl")
    out = [f'<pre class="message">{html_text(message.text)}</pre>']
    if message.note:
        out.append(f'<p class="cut">{html_cell(message.note)}</p>')
    if case.blocking:
        first = (case.blocking.message or "").strip().splitlines()[:1]
        out.append(f'<p class="blocking">under CUDA_LAUNCH_BLOCKING=1: {html_cell(case.blocking.outcome)} '
                   f"{html_cell(case.blocking.family or '')} {html_cell(first[0] if first else '')}</p>")
    if cell.first_cause and case.outcome.failing:
        out.append(f'<p class="cause">{html_cell(first_cause(cell))}</p>')
    shown = parameters(case)
    if shown:
        out.append(f'<p class="params">{html_cell(shown)}</p>')
    differs = first_difference(case)
    if differs:
        out.append(f'<p class="first-diff">{html_cell(differs)}</p>')
    said = explained(case)
    if said:
        out.append(f'<p class="explained">{html_cell(said)}</p>')
    if case.sources and case.outcome.failing:
        links = " ".join(f'<a href="{html_cell(url)}" rel="noreferrer">{html_cell(url)}</a>' for url in case.sources)
        out.append(f'<p class="provenance">case from: {links}</p>')  # text.provenance
    out += [f'<p class="known">{html_cell(k)}</p>' for k in case.known]
    if case.evidence:
        out += evidence(case.evidence, opened, budget)
    return out


def evidence(path: str, opened: bool, budget: Budget) -> list[str]:
    found = bounds.read_tail(path, EVIDENCE_LIMIT)
    summary = ("<summary>evidence: first occurrence in the log, 100 lines before it "
               f"(<code>{html_cell(path)}</code>)</summary>")
    if found is None:
        return [f'<p class="evidence missing">evidence file not readable: <code>{html_cell(path)}</code></p>']
    if not budget.take(len(found.text)):
        return [f'<p class="evidence missing">evidence not embedded (the page holds at most {EVIDENCE_BUDGET:,} '
                f"characters of it): <code>{html_cell(path)}</code></p>"]
    note = [f'<p class="cut">{html_cell(found.note)}</p>'] if found.note else []
    return [f'<details class="evidence"{" open" if opened else ""}>{summary}', *note,
            f"<pre>{html_text(found.text)}</pre></details>"]


def baseline_section(report: Report) -> list[str]:
    if not report.baseline:
        return []
    moved = [c for c in report.cases if c.baseline_delta not in (None, Delta.SAME)]
    rows = "".join(f"<tr><td><code>{html_cell(c.where)}</code></td><td><code>{html_cell(c.case)}</code></td>"
                   f"<td>{html_cell(c.baseline_outcome or '-')}</td><td>{html_cell(c.outcome)}</td>"
                   f'<td class="delta d-{c.baseline_delta}">{html_cell(c.baseline_delta or "")}</td></tr>'
                   for c in moved)
    table = (f'<table class="baseline"><thead><tr><th>cell</th><th>case</th><th>baseline</th><th>now</th>'
             f"<th>delta</th></tr></thead><tbody>{rows}</tbody></table>") if moved else "<p>none</p>"
    return ['<section id="baseline">', f"<h2>Since the baseline ({len(moved)})</h2>", table, "</section>"]


def history_section(report: Report) -> list[str]:
    """--history: first-red apart from recurring, recovered and flaky (report/nights.py)."""
    if not report.history:
        return []
    body = ['<section id="history">', "<h2>Against the history</h2>", f"<p>{html_cell(nights.summary(report))}</p>"]
    for title, lines, more in nights.sections(report):
        body += [f"<h3>{html_cell(title)}</h3>", "<ul>", *items(lines),
                 *([f"<li>… {more} more (see the json report)</li>"] if more else []), "</ul>"]
    return [*body, "</section>"]


def notes_section(report: Report) -> list[str]:
    notes = report_notes.notes(report)
    if not notes:
        return []
    # Each note's text starts a line of its own: the page source reads as the text report does.
    return ['<section id="notes">', "<h2>Notes</h2>", '<ul class="notes">',
            *items(notes), "</ul>", "</section>"]


def items(lines: Iterable[str]) -> list[str]:
    return [part for line in lines for part in ("<li>", f"- {html_cell(line)}</li>")]
