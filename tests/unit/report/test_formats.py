"""The report formats a person reads (issue 11): the shared grid, the text grid within 120
columns and coloured only when asked, markdown that fits a GitHub job summary, and an html page
that is self-contained, escaped, bounded and locked down by its Content-Security-Policy."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import report_samples as reports
from convmatrix.cli import main as cli
from convmatrix.cli.report import color_wanted
from convmatrix.matrix.cells import abbreviate
from convmatrix.report import grid as report_grid
from convmatrix.report import html as render_html
from convmatrix.report import markdown as render_markdown
from convmatrix.report import render
from convmatrix.report import text as render_text
from convmatrix.results.outcomes import Delta, Outcome, Verdict
from testkit import REPO

TEN_MB = 10 * 2**20
HOSTILE = ("<script>alert(1)</script> <img src=x onerror=alert(1)> | a || b \\| `x` [l](javascript:x)\n"
           "# heading\n- item\n1. one\n---\n> quote\n|col|col|\n</details><details>")
ANSI = re.compile("\x1b\\[")


def grid_lines(text: str) -> list[str]:
    """The text report's grid and legend: everything before the first section after it."""
    lines = text.splitlines()
    end = next(i for i, line in enumerate(lines) if line in ("Cells to look at", "Failing or changed cases (0)")
               or line.startswith("Failing or changed cases"))
    return lines[:end]


# --- the grid ---------------------------------------------------------------------------------

def test_stacks_are_grouped_by_torch_and_cuda_with_cudnn_sub_rows() -> None:
    grid = report_grid.build(reports.matrix(7, 2))
    assert [g.title for g in grid.groups] == ["torch 2.4.1 · cu121", "torch 2.4.1 · cu124", "torch 2.4.1 · cu126"]
    assert [r.label for r in grid.groups[0].rows] == ["cuDNN bundled", "cuDNN 9.5.1.17", "cuDNN 9.10.2.21"]
    assert [c.header for c in grid.columns] == ["Ampere a100-sm80", "Hopper h200-sm90"]
    control = [r for r in grid.rows if r.control]
    assert [r.cell for r in control] == ["baremetal-torch2.4.1-cu121-cudnnbundled-py3.11"]
    assert all(grid.entry(r, c) is not None for r in grid.rows for c in grid.columns)


def test_a_varying_lane_or_knob_names_the_sub_row() -> None:
    report = reports.matrix(2, 1)
    other = reports.stacks(1)[0] | {"lane": "container"}
    cid = reports.cell_id(other)
    cases = tuple(replace(c, cell=cid, knobs={"device": "cuda", "cudnn_benchmark": True})
                  for c in report.cases if c.cell == report.control)
    cell = replace(report.cells[0], cell=cid, stack=other, verdict=Verdict.OK)
    grid = report_grid.build(replace(report, cells=(*report.cells, cell), cases=report.cases + cases))
    labels = {r.cell: r.label for r in grid.rows}
    # Issue 34 item 6: the fewest axes that tell the rows apart (the lane does; the knob need not).
    assert labels[cid] == "cuDNN bundled · container"
    assert report.control is not None
    assert labels[report.control] == "cuDNN bundled · baremetal"
    same_lane = replace(cell, stack=reports.stacks(1)[0])
    grid = report_grid.build(replace(report, cells=(*report.cells, same_lane), cases=report.cases + cases))
    labels = {r.cell: r.label for r in grid.rows}
    assert labels[cid] == "cuDNN bundled · cudnn_benchmark=True"
    assert labels[report.control] == "cuDNN bundled · cudnn_benchmark=False"


def test_a_stack_that_ran_no_case_makes_no_knob_vary() -> None:
    """Issue 34 item 6: at fleet scale, stacks whose install failed (no case, so no knob recorded)
    made every knob 'vary', and every row's label listed channels_last=False · cudnn_benchmark=…"""
    report = reports.matrix(3, 1)
    knobbed = tuple(replace(c, knobs={"device": "cuda", "channels_last": False}) for c in report.cases)
    failed = replace(report.cells[-1], cell="never-installed", stack=reports.stacks(3)[2] | {"cudnn": "9.28.0.42"})
    grid = report_grid.build(replace(report, cells=(*report.cells, failed), cases=knobbed))
    assert not any("channels_last" in r.label for r in grid.rows), [r.label for r in grid.rows]


@pytest.mark.parametrize(("cell_id", "short"), [
    ("baremetal-torch2.5.1-cu124-cudnnbundled-py3.11", "bm-2.5.1-cu124-bundled-py3.11"),
    ("container-torch2.8.0-cu128-cudnn9.10.2.21-py3.12-python-3.12-slim", "ct-2.8.0-cu128-9.10.2.21-py3.12-python-3.12-slim"),
    ("host", "host"),
    ("candidate", "candidate"),
])
def test_ids_are_abbreviated_one_way(cell_id: str, short: str) -> None:
    assert abbreviate(cell_id) == short


def test_every_format_names_a_stack_by_the_same_abbreviation() -> None:
    report = reports.matrix(4, 1)
    short = abbreviate(report.cells[1].cell)
    assert short == "bm-2.4.1-cu121-9.5.1.17-py3.11"
    for fmt in ("text", "markdown", "html"):
        assert short in render.render(report, fmt), fmt


# --- text -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("stacks", "gpus"), [(50, 1), (25, 2), (17, 3), (10, 5), (5, 10)])
def test_the_text_grid_of_a_50_cell_matrix_fits_120_columns(stacks: int, gpus: int) -> None:
    report = reports.matrix(stacks, gpus)
    text = render.render(report, "text")
    lines = grid_lines(text)
    assert max(len(line) for line in lines) <= render_text.WIDTH
    for cell in report.cells:  # every cell is in the grid, in its column
        assert render_text.entry(cell) in text
    assert sum(1 for line in lines if line.startswith("legend: ")) == 1
    assert sum(line.count(" ".join(c.header.split(" ")[1:]) or c.key) for c in report_grid.build(report).columns
               for line in lines) >= gpus


def test_a_row_label_is_not_cut_for_the_gpu_columns() -> None:
    """Issue 34 item 6: with many GPU columns labels were cut at 34 characters, taking the part
    that told rows apart (`… · channels_l…`); the columns now go on in another grid instead."""
    report = reports.matrix(3, 1)
    label = "cuDNN 9.5.1.17 · baremetal · python 3.11 · pad=8"
    lines = render_text.grid_lines(relabelled(report_grid.build(report), label), color=False)
    assert any(label in line for line in lines)
    assert max(len(line) for line in lines) <= render_text.WIDTH
    crowded = render_text.grid_lines(relabelled(report_grid.build(reports.matrix(3, 10)), label), color=False)
    assert any(label in line for line in crowded) and max(len(line) for line in crowded) <= render_text.WIDTH


def relabelled(grid: report_grid.Grid, label: str) -> report_grid.Grid:
    groups = tuple(replace(g, rows=tuple(replace(r, label=label) for r in g.rows)) for g in grid.groups)
    return replace(grid, groups=groups)


def test_a_long_gpu_name_and_a_hostile_id_keep_the_grid_within_120_columns() -> None:
    report = reports.matrix(3, 10)
    bad = replace(report.cells[1], cell="x" * 300 + "\x1b[2J<b>", stack={})
    text = render.render(replace(report, cells=(*report.cells, bad)), "text")
    assert max(len(line) for line in grid_lines(text)) <= render_text.WIDTH
    assert "\x1b" not in text
    assert any("x…x" in line and "<b>" in line for line in grid_lines(text))  # cut in the middle: both ends kept


def test_text_is_coloured_only_when_asked() -> None:
    report = reports.matrix(3, 1)
    plain = render.render(report, "text")
    coloured = render.render(report, "text", color=True)
    assert not ANSI.search(plain)
    assert "\x1b[1;31mREGR" in coloured and "\x1b[1;34mCTRL" in coloured
    assert ANSI.sub("", re.sub("\x1b\\[[0-9;]*m", "", coloured)) == plain


@pytest.mark.parametrize(("choice", "tty", "env", "wanted"), [
    ("auto", True, {}, True),
    ("auto", True, {"NO_COLOR": "1"}, False),
    ("auto", True, {"CI": "true"}, False),
    ("auto", False, {}, False),
    ("always", False, {"CI": "true"}, True),
    ("never", True, {}, False),
])
def test_color_auto_means_a_terminal_outside_ci(choice: str, tty: bool, env: dict[str, str], wanted: bool) -> None:
    assert color_wanted(choice, tty, env) is wanted


def test_the_report_command_colours_on_request_only(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from testkit import record, write_result

    monkeypatch.delenv("CI", raising=False)
    write_result(tmp_path, "ctl", [record("a"), record("b")], cell={"control": True})
    write_result(tmp_path, "cand", [record("a"), record("b", "failed", "CUDNN_STATUS_NOT_SUPPORTED")], cell={})
    assert cli.main(["report", str(tmp_path), "--color", "always"]) == 1
    assert "\x1b[1;31mREGR" in capsys.readouterr().out
    cli.main(["report", str(tmp_path)])  # captured output is no terminal
    assert not ANSI.search(capsys.readouterr().out)


# --- markdown ---------------------------------------------------------------------------------

def cells(line: str) -> int:
    """How many cells GitHub sees in a table row: pipes not escaped by a backslash."""
    return len(re.findall(r"(?<!\\)(?:\\\\)*\|", line)) - 1


def tables(text: str) -> list[list[str]]:
    found: list[list[str]] = []
    previous = ""
    for line in text.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                found.append([])
            found[-1].append(line)
        previous = line
    return found


def test_markdown_of_50_cells_by_99_cases_with_10_mb_messages_fits_a_job_summary() -> None:
    report = reports.matrix(50, 1, message="CUDNN_STATUS_NOT_SUPPORTED " + "x" * TEN_MB, failures=99)
    text = render.render(report, "markdown")
    assert len(text.encode()) < 2**20
    assert len(text.encode()) <= render_markdown.LIMIT
    grid, case_table = tables(text)
    assert grid[0].startswith("| stack |") and text.index(grid[0]) < text.index(case_table[0])
    assert "… " in text and "more cases (the json report lists them all)" in text
    assert text.count("<details>") == text.count("</details>") == render_markdown.DETAILS


def test_markdown_puts_the_grid_first_then_regressions_then_folded_messages() -> None:
    report = reports.matrix(4, 2)
    report = replace(report, cases=tuple(
        replace(c, delta=Delta.FIXED, outcome=Outcome.PASS, control_outcome=Outcome.FAIL, verdict=Verdict.FIXED)
        if c.case.endswith("019")
        else c for c in report.cases))
    text = render.render(report, "markdown")
    lines = text.splitlines()
    assert lines[0].startswith("## convmatrix report: control")
    grid, case_table = tables(text)
    assert "🔴 REGRESSION: 79 pass, cudnn_not_supported×20, SIGNATURE" in "\n".join(grid)
    deltas = [row.split(" | ")[7] for row in case_table[2:]]
    assert deltas[0] == "regression" and deltas.index("fixed") > deltas.count("regression") - 1
    assert text.index("<details><summary>") > text.index(case_table[-1])


def test_markdown_stays_valid_whatever_a_message_holds() -> None:
    report = reports.matrix(3, 1, message=HOSTILE)
    text = render.render(report, "markdown")
    grid, case_table = tables(text)
    for table in (grid, case_table):
        assert len({cells(row) for row in table}) == 1, table
    outside = re.sub(r"</?(?:details|summary)>", "", text)
    assert not re.search(r"<[A-Za-z/!?]", outside)  # no markup but the report's own folds
    assert text.count("<details>") == text.count("</details>")
    body = text.split("<details><summary>")[1].split("</details>")[0].split("\n\n")[1]
    for line in body.splitlines():  # the message's lines start no heading, list, quote, rule or table
        assert not re.match(r"(?:#|- |\d+\.|---|>|\|)", line), line


# --- html -------------------------------------------------------------------------------------

class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.data: dict[str, list[str]] = {}
        self.current = ""

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags.append((tag, dict(attrs)))
        self.current = tag

    def handle_endtag(self, tag: str) -> None:
        self.current = ""

    def handle_data(self, data: str) -> None:
        self.data.setdefault(self.current, []).append(data)


def parsed(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


def sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_html_is_self_contained_and_allows_only_its_own_style_and_script() -> None:
    text = render.render(reports.matrix(3, 2, message=HOSTILE), "html")
    page = parsed(text)
    policy = next(a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert policy is not None and "default-src 'none'" in policy
    (style,), (script,) = page.data["style"], page.data["script"]
    assert f"style-src {sha(style)};" in policy and f"script-src {sha(script)};" in policy
    assert "unsafe-inline" not in policy
    for _, attrs in page.tags:
        for name in ("src", "href", "action"):
            value = attrs.get(name) or ""
            assert not value or value.startswith(("#", "data:")), (name, value)
    assert [t for t, _ in page.tags].count("script") == 1 and "img" not in [t for t, _ in page.tags]
    assert any("<script>alert(1)</script> <img src=x onerror=alert(1)>" in d for d in page.data["pre"])
    assert "@media (prefers-color-scheme: dark)" in style and "@media print" in style


def test_html_grid_cells_carry_verdict_counts_and_the_signature() -> None:
    report = reports.matrix(3, 2)
    page = parsed(render.render(report, "html"))
    cells = [a for t, a in page.tags if t == "td" and "v" in (a.get("class") or "").split()]
    assert sorted(a["class"] or "" for a in cells) == sorted(f"v v-{c.verdict}" for c in report.cells)
    panels = {a["id"] for t, a in page.tags if t == "section" and a.get("class") == "panel"}
    assert {a["data-panel"] for a in cells} == panels and len(panels) == len(report.cells)
    control_rows = [a for t, a in page.tags if t == "tr" and "control-row" in (a.get("class") or "")]
    assert len(control_rows) == 1
    text = render.render(report, "html")
    assert text.count(">SIGNATURE</span>") >= sum(1 for c in report.cells if c.signature)


def test_a_10_mb_message_is_cut_with_a_note_not_embedded() -> None:
    report = reports.matrix(2, 1, message="CUDNN_STATUS_NOT_SUPPORTED " + "y" * TEN_MB, failures=3)
    text = render.render(report, "html")
    assert len(text) < 3 * render_html.MESSAGE_LIMIT + 200_000
    assert f"the first {render_html.MESSAGE_LIMIT:,} shown; the whole text is in run/" in text
    assert "y" * render_html.MESSAGE_LIMIT not in text.replace("CUDNN_STATUS_NOT_SUPPORTED ", "")


def test_past_the_page_budget_messages_are_cut_shorter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render_html, "MESSAGE_BUDGET", 3 * render_html.MESSAGE_LIMIT)
    report = reports.matrix(2, 1, message="CUDNN_STATUS_NOT_SUPPORTED " + "y" * TEN_MB, failures=5)
    text = render.render(report, "html")
    assert text.count(f"the first {render_html.MESSAGE_LIMIT:,} shown") == 3
    assert text.count(f"the first {render_html.SHORT_MESSAGE:,} shown") == 2


def test_evidence_is_embedded_bounded_and_the_failure_kept(tmp_path: Path) -> None:
    report = reports.matrix(2, 1, failures=2)
    small, large = tmp_path / "small.txt", tmp_path / "large.txt"
    small.write_text("# case: failed\n    1  lead-up <b>bold</b>\n    2> CUDNN_STATUS_NOT_SUPPORTED\n")
    large.write_text("noise line\n" * 500_000 + "    9> THE FAILURE\n")
    failing = [c for c in report.cases if c.outcome == Outcome.FAIL]
    evidence = {failing[0].case: str(small), failing[1].case: str(large)}
    report = replace(report, cases=tuple(replace(c, evidence=evidence.get(c.case)) if c.outcome == Outcome.FAIL
                                         else c for c in report.cases))
    text = render.render(report, "html")
    assert "lead-up &lt;b&gt;bold&lt;/b&gt;" in text and "THE FAILURE" in text
    assert f"the last {render_html.EVIDENCE_LIMIT:,} characters shown" in text
    assert len(text) < 200_000
    gone = replace(report, cases=tuple(replace(c, evidence=str(tmp_path / "gone.txt")) if c.evidence else c
                                       for c in report.cases))
    assert "evidence file not readable" in render.render(gone, "html")


def test_evidence_past_the_page_budget_is_named_not_embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render_html, "EVIDENCE_BUDGET", 100)
    report = reports.matrix(2, 1, failures=3)
    path = tmp_path / "e.txt"
    path.write_text("z" * 60)
    report = replace(report, cases=tuple(replace(c, evidence=str(path)) if c.outcome == Outcome.FAIL else c
                                         for c in report.cases))
    text = render.render(report, "html")
    assert text.count("z" * 60) == 1 and text.count("evidence not embedded") == 2


def test_html_shows_the_baseline_and_no_cell_level_slower_mark() -> None:
    """Issue 48: the per-case `slower` replaces the cell-level SLOWER mark (the cell keeps its
    `slowdown` summary in the JSON)."""
    report = reports.matrix(3, 1)
    slow = replace(report.cells[2], slowdown=2.5)
    moved = tuple(replace(c, baseline_outcome=Outcome.PASS, baseline_delta=Delta.REGRESSION)
                  if c.outcome == Outcome.FAIL else replace(c, baseline_outcome=c.outcome, baseline_delta=Delta.SAME)
                  for c in report.cases)
    report = replace(report, cells=(*report.cells[:2], slow), cases=moved, baseline=True)
    text = render.render(report, "html")
    assert "Since the baseline (20)" in text
    assert "SLOWER" not in text and "mark slow" not in text
    for fmt in ("text", "markdown"):
        assert "SLOWER" not in render.render(report, fmt) and "T2.5" not in render.render(report, fmt)
    assert "Since the baseline" not in render.render(replace(report, baseline=False), "html")


def test_the_nox_report_step_writes_html_beside_the_markdown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("noxfile_under_test", REPO / "noxfile.py")
    assert spec is not None and spec.loader is not None
    noxfile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(noxfile)
    monkeypatch.setattr(noxfile, "harness", lambda session: "convmatrix")
    calls: list[tuple[str, ...]] = []

    class Session:
        def run(self, *args: str, **kwargs: Any) -> None:
            calls.append(args)

        def error(self, message: str) -> None:
            raise AssertionError(message)

    noxfile.write_report(Session(), [str(tmp_path)])
    written = {args[args.index("-o") + 1]: args[args.index("--format") + 1] for args in calls if "-o" in args}
    assert written[str(Path(tmp_path) / "report.html")] == "html"
    assert written[str(Path(tmp_path) / "report.md")] == "markdown"


# Issue 32, item 6: a cell of thousands of failing cases (results.jsonl holds up to 20,000 lines)
# listed whole made a page of hundreds of MB; each format lists report.cases.MAX_LISTED and counts the rest.
def test_each_format_lists_a_bounded_number_of_cases_and_says_how_many_more() -> None:
    from convmatrix.report.cases import MAX_LISTED, listed

    report = reports.matrix(2, 1, n_cases=MAX_LISTED + 700, failures=MAX_LISTED + 500)
    (bad,) = [c for c in report.cells if c.verdict == Verdict.REGRESSION]
    failing = len(listed(c for c in report.cases if c.cell == bad.cell))
    assert failing == MAX_LISTED + 500
    html = render.render(report, "html")
    panel = html[html.index(f'data-where="{bad.where}"'):]
    panel = panel[:panel.index("</section>")]
    assert panel.count('<li class="case') == MAX_LISTED
    assert f"… and {MAX_LISTED + 700 - MAX_LISTED:,} more cases of this cell (the json report lists them all)" in panel
    text = render.render(report, "text")
    assert f"… and {failing - MAX_LISTED:,} more cases (the json report lists them all)" in text
    markdown = render.render(report, "markdown")
    assert f"… and {failing - MAX_LISTED:,} more cases (the json report lists them all)" in markdown
    assert markdown.count(f"| {abbreviate(bad.cell)} |") == MAX_LISTED
    assert len(render.render(report, "json").split('"case": ')) > failing  # the json lists every one
