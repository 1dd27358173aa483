"""The text report for a terminal or a CI log: the grid (stacks as rows, GPU generations as
columns, within 120 columns: more generations than fit are shown as further grids), its legend
once, the cells worth a look in words, the failing or changed cases, the notes. ANSI colour only
when the caller asks for it (cli.color_wanted: a terminal, no NO_COLOR, no CI)."""

from __future__ import annotations

import textwrap

from convmatrix.escape import one_line
from convmatrix.matrix.cells import abbreviate
from convmatrix.report import grid as report_grid
from convmatrix.report import nights
from convmatrix.report import notes as report_notes
from convmatrix.report import verdicts as report_verdicts
from convmatrix.report.cases import MAX_LISTED, explained, first_difference, listed, more_line, provenance
from convmatrix.report.grid import Column, Grid, Row
from convmatrix.report.model import CellRow, Report
from convmatrix.results.outcomes import Verdict

WIDTH = 120
HEADER_WIDTH = 30
GAP = "  "
MESSAGE_WIDTH = 90
WORDS = {Verdict.CONTROL: "CTRL", Verdict.OK: "ok", Verdict.FIXED: "fixed", Verdict.REGRESSION: "REGR",
         Verdict.INVALID: "INVALID", Verdict.NOT_RUN: "NOT RUN", Verdict.UNSUPPORTED: "unsupp",
         Verdict.NO_CONTROL: "no-ctl", Verdict.CHANGED: "changed", Verdict.DECLARED_SKIP: "declared",
         Verdict.FALLBACK: "fallbk", Verdict.MEMORY: "memory", Verdict.SLOWER: "slower"}
MEANINGS = {Verdict.CONTROL: "the control (its row marked *)", Verdict.OK: "ran as on the control",
            Verdict.FIXED: "a case failing on the control passes", Verdict.REGRESSION: "a case regressed",
            Verdict.INVALID: "incomplete or not comparable",
            Verdict.NOT_RUN: "planned, or owed a case the control ran, and did not run it (why: Cells to look at; "
                             "lower case: optional)",
            Verdict.UNSUPPORTED: "this runner's driver cannot run it (fails nothing)",
            Verdict.NO_CONTROL: "no control to compare with",
            Verdict.CHANGED: "passes what the control skipped (fails nothing)",
            Verdict.DECLARED_SKIP: "skipped what the control ran, as the matrix declares",
            Verdict.FALLBACK: "a case left the control's cuDNN/MIOpen/oneDNN for a native path "
                              "(fails nothing by default)",
            Verdict.MEMORY: "a case's peak memory above the control's (fails nothing by default)",
            Verdict.SLOWER: "a case slower than the control beyond the noise (fails nothing by default)"}
MARK_MEANINGS = {"S": "SIGNATURE: a case failed with CUDNN_STATUS_NOT_SUPPORTED",
                 "w": "the signature in warnings only", "M": "stack mismatch",
                 "B": "B2: 2 regressions since the baseline"}
COLOURS = {Verdict.CONTROL: "1;34", Verdict.OK: "32", Verdict.FIXED: "36", Verdict.REGRESSION: "1;31",
           Verdict.INVALID: "1;33", Verdict.NOT_RUN: "1;35", Verdict.UNSUPPORTED: "2;33",
           Verdict.NO_CONTROL: "2", Verdict.CHANGED: "33", Verdict.DECLARED_SKIP: "2;32",
           Verdict.FALLBACK: "1;36", Verdict.MEMORY: "36", Verdict.SLOWER: "36"}


def render(report: Report, *, color: bool = False) -> str:
    grid = report_grid.build(report)
    control = report.control or "(none: pass --control CELL)"
    short = abbreviate(control) if report.control else control
    title = f"convmatrix report: control {short}" + (f" ({control})" if short != control else "")
    out = [one_line(title), one_line(f"verdicts: {report_verdicts.tally(report.cells)}"), ""]
    alerts = report_notes.alerts(report)
    out += [*(paint(f"! {one_line(a)}", "1;31", color) for a in alerts), *([""] if alerts else [])]
    out += grid_lines(grid, color) + legend(grid) + [""]
    out += look_at(report)
    out += history_lines(report)
    out += case_table(report)
    notes = report_notes.notes(report)
    if notes:
        out += ["Notes", ""] + [f"- {one_line(line)}" for line in notes]
    return "\n".join(out).rstrip() + "\n"


def history_lines(report: Report) -> list[str]:
    """--history: the marks against earlier runs (report/nights.py), one block per state."""
    if not report.history:
        return []
    out = [one_line(nights.summary(report)), ""]
    for title, lines, more in nights.sections(report):
        out += [f"{title}:", *(f"  {one_line(line)}" for line in lines), *([f"  ... {more} more"] if more else []), ""]
    return out


def entry(cell: CellRow) -> str:
    """A grid cell: verdict, passed of all cases, the marks' codes (REGR 73/99 S T1.6)."""
    if cell.not_run is not None and not cell.did_not_run:
        return "not run" if cell.optional else WORDS[cell.verdict]
    if cell.did_not_run and cell.infra_cause is not None:
        return f"{'not run' if report_grid.quiet(cell) else WORDS[cell.verdict]} {cell.infra_cause.short}"
    if cell.refused:
        return WORDS[cell.verdict]
    tally = report_grid.tally(cell)
    codes = " ".join(m.code for m in report_grid.marks(cell))
    return f"{WORDS[cell.verdict]} {tally.passed}/{tally.total}" + (f" {codes}" if codes else "")


def fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def middle_cut(text: str, width: int) -> str:
    """The text's start and end around one "…", when longer than width."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def paint(text: str, code: str, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color else text


def grid_lines(grid: Grid, color: bool) -> list[str]:
    texts = {key: entry(cell) for key, cell in grid.entries.items()}
    widths = {c.key: max([len(texts[k]) for k in texts if k[1] == c.key]
                         + [len(h) for h in headers(c)]) for c in grid.columns}
    # A label is cut only past what fits beside one GPU column (a 300-character id), and then in
    # its middle: a cut of its end took the part that told two rows apart. grid.telling keeps
    # labels short, and the GPU columns go on in another grid where a long one leaves no room.
    room = WIDTH - len(GAP) - max(widths.values(), default=0) - 2
    labels = {row.cell: middle_cut(one_line(row.label), room) for row in grid.rows}
    label_width = max([len(v) for v in labels.values()] + [len("stack")]) + 2
    out: list[str] = []
    for chunk in chunks(grid.columns, widths, label_width):
        if out:
            out.append("")
        out += grid_chunk(grid, chunk, widths, label_width, labels, texts, color)
    return out


def headers(column: Column) -> tuple[str, str]:
    generation = "" if column.key == "cpu" else column.generation
    return fit(one_line(generation), HEADER_WIDTH), fit(one_line(column.key), HEADER_WIDTH)


def chunks(columns: tuple[Column, ...], widths: dict[str, int], label_width: int) -> list[list[Column]]:
    """Columns in runs that fit WIDTH beside the labels: each run is a grid of its own."""
    runs: list[list[Column]] = [[]]
    used = label_width
    for column in columns:
        need = len(GAP) + widths[column.key]
        if runs[-1] and used + need > WIDTH:
            runs.append([])
            used = label_width
        runs[-1].append(column)
        used += need
    return runs


def grid_chunk(grid: Grid, columns: list[Column], widths: dict[str, int], label_width: int,
               labels: dict[str, str], texts: dict[tuple[str, str], str], color: bool) -> list[str]:
    def line(label: str, cells: list[str]) -> str:
        return (label.ljust(label_width) + "".join(GAP + c for c in cells)).rstrip()

    top = [headers(c)[0].ljust(widths[c.key]) for c in columns]
    out = [line("", top)] if any(t.strip() for t in top) else []
    out.append(line("stack", [headers(c)[1].ljust(widths[c.key]) for c in columns]))
    out.append(line("-" * label_width, ["-" * widths[c.key] for c in columns]))
    for group in grid.groups:
        out.append(paint(fit(one_line(group.title), WIDTH), "1", color))
        out += [row_line(grid, row, columns, widths, label_width, labels[row.cell], texts, color)
                for row in group.rows]
    return out


def row_line(grid: Grid, row: Row, columns: list[Column], widths: dict[str, int], label_width: int,
             label: str, texts: dict[tuple[str, str], str], color: bool) -> str:
    parts = [("* " if row.control else "  ") + label.ljust(label_width - 2)]
    for column in columns:
        cell = grid.entry(row, column)
        text = texts[(row.cell, column.key)] if cell else ""
        # Painted, then padded: escape sequences never count as width, nor colour the gap.
        padding = " " * (widths[column.key] - len(text))
        colour = "2" if cell and report_grid.quiet(cell) else COLOURS[cell.verdict] if cell else ""
        parts.append((paint(text, colour, color) if cell else text) + padding)
    return (parts[0] + "".join(GAP + p for p in parts[1:])).rstrip()


def legend(grid: Grid) -> list[str]:
    verdicts = [v for v in Verdict if any(c.verdict == v for c in grid.entries.values())]
    codes = sorted({m.code[0] for c in grid.entries.values() for m in report_grid.marks(c)}, key="SwMB".index)
    parts = [f"{WORDS[v]} {MEANINGS[v]}" for v in verdicts] + ["n/m: n of m cases passed"]
    parts += [MARK_MEANINGS[c] if c == "B" else f"{c} {MARK_MEANINGS[c]}" for c in codes]
    return textwrap.wrap("legend: " + "; ".join(parts), WIDTH, break_on_hyphens=False)


def look_at(report: Report) -> list[str]:
    """The cells that are not plainly fine, each in words: its verdict, counts and families; a
    stack that said the same on several GPUs (did not run for one reason, failed to build, failed
    the same cases) is one line naming its GPUs (report_grid.look): four INVALID lines for a stack
    that did not build made a fleet's list four times as long as what there was to read."""
    lines = report_grid.look(report)
    if not lines:
        return []
    return ["Cells to look at", "", *(f"- {one_line(line.where)}: {one_line(line.words)}" for line in lines), ""]


def case_table(report: Report) -> list[str]:
    cases = listed(report.cases)
    out = [f"Failing or changed cases ({len(cases)})", ""]
    if not cases:
        return [*out, "none", ""]
    rows = [[abbreviate(c.cell), c.gpu, c.case, report_grid.verdict_word(c.verdict), str(c.outcome), c.family or "",
             c.control_outcome or "",
             c.delta or "", one_line(c.message or "")[:MESSAGE_WIDTH]] for c in cases[:MAX_LISTED]]
    from tabulate import tabulate  # here: it imports importlib.metadata, a tenth of the CLI's start-up

    table = tabulate([[one_line(str(v)) for v in row] for row in rows],
                     headers=["cell", "gpu", "case", "verdict", "outcome", "family", "control", "delta", "message"],
                     tablefmt="simple", disable_numparse=True)
    out.append(table)
    if len(cases) > MAX_LISTED:
        out.append(more_line(len(cases) - MAX_LISTED))
    for c in cases[:MAX_LISTED]:
        for said in (first_difference(c), explained(c)):
            if said:
                out.append(f"{one_line(c.case)}@{one_line(c.gpu)}: {one_line(said)}")
        if c.sources and c.outcome.failing:
            out.append(f"{one_line(c.case)}: {one_line(provenance(c))}")
        out += [f"{one_line(c.case)}@{one_line(c.gpu)}: {one_line(k)}" for k in c.known]
    return [*out, ""]
