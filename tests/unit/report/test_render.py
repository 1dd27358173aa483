"""Every output format stays well-formed for its consumer, whatever a message, a case id or a
cell id holds: junit parses as XML, text writes no terminal control sequence, markdown keeps one
table with raw HTML escaped, html escapes every string."""

from __future__ import annotations

import datetime
import itertools
import json
import re
import shutil
import unicodedata
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from convmatrix import escape, results
from convmatrix.history import marks
from convmatrix.report import cases as report_cases
from convmatrix.report import json as report_json
from convmatrix.report import model as report_model
from convmatrix.report import render
from convmatrix.report.model import CaseRow, CellRow, GpuInfo, Report, Rerun
from convmatrix.report.verdicts import Health
from convmatrix.results import rundir
from convmatrix.results.outcomes import Delta, Outcome, Verdict
from convmatrix.results.read import FirstCause
from convmatrix.results.verdicts import Cost
from convmatrix.run import explain
from testkit import REPO, env_json, record, write_result

HOSTILE = (
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED \x1b[31mred\x1b[0m \x1b]0;owned title\x07"
    " \x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\ \x1bc \x00nul \x08bs \x0b\x0c \x7f \x9b2J \x85"
    " ]]> <script>alert(\"x\")</script> 'single' & amp; &lt; | a || b \\| c [x](javascript:alert(1))"
    " `code <b>` *em*\r\nsecond line\ttab \ud800 \udfff \ufffe \uffff \u202eevil\u202c \x1b"
)
HOSTILE_ID = "case\x1b[2J|<i>\x00\n\"q\""


def case_row(cell: str, gpu: str, case: str, outcome: str, family: str | None, message: str | None,
             **extra: Any) -> CaseRow:
    fields: dict[str, Any] = {
        "cell": cell, "gpu": gpu, "case": case, "knobs": {}, "outcome": Outcome(outcome), "family": family,
        "message": message, "warnings": (), "control_outcome": Outcome.PASS, "delta": Delta.REGRESSION,
        "fingerprint_changed": False,
        "verdict": Verdict.REGRESSION if Outcome(outcome).failing else Verdict.OK,
    }
    fields.update(extra)
    return CaseRow(**fields)


def cell_row(cell: str, gpu: str, verdict: str, counts: dict[str, int], **extra: Any) -> CellRow:
    fields: dict[str, Any] = {
        "cell": cell, "gpu": GpuInfo(key=gpu, name="NVIDIA H200", capability="9.0", generation="Hopper"),
        "lane": "baremetal", "path": f"run/{cell}@{gpu}", "stack": {},
        "observed": {"torch": "2.5.1+cu124", "cudnn": 90100}, "mismatches": (), "problems": (),
        "counts": counts, "signature": False, "warning_signature": False, "first_cause": None, "regressions": 0,
        "slowdown": None, "fingerprint_changed": 0, "fixed": 0, "verdict": Verdict(verdict),
    }
    fields.update(extra)
    return CellRow(**fields)


def hostile_report() -> Report:
    """A report with a hostile string in every free-text field."""
    bad_cell = f"cand\x1b[1m|<b>{HOSTILE_ID}"
    bad_gpu = "h200\x1b]0;x\x07|<g>"
    control = "control<\x1b[0m|>"
    return Report(
        control=control,
        health={bad_gpu: Health(healthy=False, reason=HOSTILE)},
        cells=(
            cell_row(control, bad_gpu, "control", {"pass": 2}),
            cell_row(
                bad_cell, bad_gpu, "regression", {"pass": 1, "cudnn_not_supported": 1},
                observed={"torch": "2.5.1\x1b[31m|<t>", "cudnn": None, "cudnn_error": HOSTILE},
                mismatches=(HOSTILE,), problems=(HOSTILE,), signature=True,
                first_cause=FirstCause(log=f"run/{bad_cell}/log.txt", family="cudnn_not_supported", line=3,
                                       rank=None, fatal=True),
                slowdown=2.0, fingerprint_changed=1,
            ),
        ),
        cases=(
            case_row(control, bad_gpu, HOSTILE_ID, "pass", None, None, delta=None),
            case_row(control, bad_gpu, "skipped", "skip", None, HOSTILE, delta=None),
            case_row(bad_cell, bad_gpu, HOSTILE_ID, "fail", "cudnn_not_supported", HOSTILE,
                     evidence=f"run/{bad_cell}/evidence/{HOSTILE_ID}.txt",
                     blocking=Rerun(outcome=Outcome.FAIL, family="cudnn_not_supported", message=HOSTILE)),
            case_row(bad_cell, bad_gpu, "warned", "pass", None, None, warnings=(HOSTILE,), delta=Delta.SAME),
            case_row(bad_cell, bad_gpu, "crashed|<x>", "crash", None, HOSTILE),
        ),
        notes=(f"{bad_cell}@{bad_gpu}: two results; kept one: {HOSTILE}",),
    )


def built_report(tmp_path: Path) -> Report:
    """The same kind of hostile text, through the real path: results.jsonl -> report_model.build."""
    recs = [record("conv2d-a"), record("conv2d-b"), record("conv2d-c", status="skipped", message=HOSTILE)]
    write_result(tmp_path, "control", recs, env=env_json("control"))
    bad = [record("conv2d-a"), record("conv2d-b", status="failed", message=HOSTILE),
           record("conv2d-c", status="failed", message="\x00\x1b[31m]]><x/>")]
    write_result(tmp_path, "candidate", bad, env=env_json("candidate"))
    loaded = results.load([str(tmp_path)])
    return report_model.build(loaded.results, "control")


def reports(tmp_path: Path) -> list[Report]:
    return [hostile_report(), built_report(tmp_path)]


# XML 1.0 Char, and the C1 block that XML discourages and a terminal obeys.
_NOT_XML = re.compile("[^\t\n\r\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_TERMINAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff\u202a-\u202e\u2066-\u2069]")


def all_strings(element: ET.Element) -> list[str]:
    out = []
    for node in element.iter():
        out += list(node.attrib.values())
        out += [node.text or "", node.tail or ""]
    return out


def test_junit_from_hostile_messages_parses(tmp_path: Path) -> None:
    for report in reports(tmp_path):
        text = render.render(report, "junit")
        assert not _NOT_XML.search(text), ascii(_NOT_XML.findall(text))
        root = ET.fromstring(text)  # expat rejects what is not well-formed XML 1.0
        for value in all_strings(root):
            assert not _TERMINAL.search(value), ascii(value)
        failures = root.findall(".//failure")
        assert failures
        for failure in failures:
            assert failure.get("type") and failure.text is not None
            assert "None" not in (failure.get("message") or "")


def test_junit_keeps_the_message_readable(tmp_path: Path) -> None:
    root = ET.fromstring(render.render(hostile_report(), "junit"))
    failure = next(f for t in root.iter("testcase") if t.get("name") != "(verdict)" for f in t.findall("failure"))
    text = failure.text or ""
    # Markup-looking text round-trips as text; colour codes go; other controls become visible.
    assert '<script>alert("x")</script>' in text and "]]>" in text and "'single'" in text
    assert "CUDNN_STATUS_NOT_SUPPORTED red second line" not in text  # newlines kept in text
    assert "CUDNN_STATUS_NOT_SUPPORTED red " in text and "\nsecond line\ttab" in text
    assert "\\x00nul" in text and "\\ud800" in text and "\\ufffe" in text and "\\u202eevil" in text
    assert "owned title" not in text and "\\x1b" in text  # the OSC title is gone; the lone ESC is shown
    names = {t.get("name") for t in root.iter("testcase")}
    assert 'case\\x1b[2J|<i>\\x00\n"q"' not in names
    assert 'case|<i>\\x00 "q"' in names or 'case|<i>\\x00\n"q"' in names
    assert root.find("testsuite") is not None
    skipped = root.findall(".//skipped")
    assert skipped and '<script>alert("x")</script>' in (skipped[0].get("message") or "")


def test_junit_benign_message_unchanged() -> None:
    report = hostile_report()
    message = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
    report = replace(report, cells=(cell_row("cand", "cpu", "regression", {"cudnn_not_supported": 1}),),
                     cases=(case_row("cand", "cpu", "conv1d-fp16", "fail", "cudnn_not_supported", message),))
    root = ET.fromstring(render.render(report, "junit"))
    failure = root.find(".//failure")
    assert failure is not None and failure.text == message
    assert failure.get("message") == "regression cudnn_not_supported"


def test_text_writes_no_terminal_control(tmp_path: Path) -> None:
    for report in reports(tmp_path):
        text = render.render(report, "text")
        assert not _TERMINAL.search(text.replace("\n", "")), ascii(_TERMINAL.findall(text))
        assert "\r" not in text and "\t" not in text
    text = render.render(hostile_report(), "text")
    # Escape sequences go (colour, title, hyperlink, reset); other controls are shown, not obeyed.
    assert "CUDNN_STATUS_NOT_SUPPORTED red link \\x00nul \\x08bs \\x0b\\x0c \\x7f \\x85 ]]>" in text
    assert "second line tab \\ud800 \\udfff \\ufffe \\uffff \\u202eevil\\u202c \\x1b" in text
    lines = text.splitlines()
    table = lines[lines.index("Failing or changed cases (2)") + 2:]
    # header, rule, one line per case, then a blank line: a message never spans two lines
    assert table[4] == "" and table[5] == "Notes" and table[6] == ""
    assert all(line.startswith("- ") for line in table[7:])


def _cells(line: str) -> list[str]:
    """A GFM table row's cells: split on pipes that no backslash escapes."""
    parts, current, i = [], "", 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            current += line[i:i + 2]
            i += 2
            continue
        if line[i] == "|":
            parts.append(current)
            current = ""
        else:
            current += line[i]
        i += 1
    parts.append(current)
    return parts[1:-1]


def _tables(markdown: str) -> list[list[str]]:
    tables: list[list[str]] = []
    previous = ""
    for line in markdown.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                tables.append([])
            tables[-1].append(line)
        previous = line
    return tables


def test_markdown_stays_one_table_per_section(tmp_path: Path) -> None:
    for report in reports(tmp_path):
        text = render.render(report, "markdown")
        tables = _tables(text)
        assert len(tables) == 2
        for table in tables:
            width = len(_cells(table[0]))
            assert all(len(_cells(row)) == width for row in table), table
        failing = [c for c in report.cases if not (c.outcome in ("pass", "skip") and c.delta in (None, "same"))]
        assert len(tables[1]) == 2 + len(failing)
        assert not _TERMINAL.search(text.replace("\n", ""))
        # No raw HTML, link or code span can form out of a message (the report's own <details> folds aside).
        assert not re.search(r"<[A-Za-z/!?]", re.sub(r"</?(?:details|summary)>", "", text))
        assert "](" not in text.replace("\\](", "")
        notes = text.split("## Notes\n\n")[1].splitlines() if "## Notes" in text else []
        assert all(line.startswith("- ") for line in notes)
    assert "## Notes" in render.render(hostile_report(), "markdown")


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_report_wide_notes_are_shown_escaped(fmt: str) -> None:
    report = hostile_report()
    text = render.render(report, fmt)
    notes = [line for line in text.splitlines() if "two results; kept one" in line]
    assert len(notes) == 1 and notes[0].startswith("- ")
    assert "two results" not in render.render(replace(report, notes=()), fmt)
    text = render.render(hostile_report(), "markdown")
    assert "&lt;script&gt;alert(\"x\")&lt;/script&gt;" in text
    assert "&amp; amp; &amp;lt; \\| a \\|\\| b \\\\\\| c \\[x\\](javascript" in render.render(hostile_report(), "markdown")


HTML_TAGS = {"html", "head", "meta", "link", "title", "style", "body", "header", "section", "h1", "h2", "h3", "p",
             "code", "pre", "span", "a", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "dl", "dt", "dd",
             "details", "summary", "div", "label", "input", "script"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.count: dict[str, int] = {}
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags.add(tag)
        self.count[tag] = self.count.get(tag, 0) + 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_escapes_every_string(tmp_path: Path) -> None:
    for report in reports(tmp_path):
        text = render.render(report, "html")
        parser = _Tags()
        parser.feed(text)
        assert parser.tags <= HTML_TAGS, parser.tags  # the page's own markup, none from a message
        assert parser.count["script"] == parser.count["style"] == 1
        assert not _TERMINAL.search(text.replace("\n", ""))
    parser = _Tags()
    parser.feed(render.render(hostile_report(), "html"))
    assert any('<script>alert("x")</script>' in t for t in parser.text)


def test_json_is_valid_and_ascii(tmp_path: Path) -> None:
    for report in reports(tmp_path):
        text = render.render(report, "json")
        assert text.isascii()
        assert json.loads(text)["cases"]


def test_json_is_the_contract_with_a_line_per_cell_and_per_case(tmp_path: Path) -> None:
    for report in reports(tmp_path):
        text = render.render(report, "json")
        data = json.loads(text)
        assert list(data) == ["schema", "control", "policy", "no_gpu", "audit_only", "verdicts", "settings", "cells", "cases", "notes"]
        assert data["cells"] == [report_json.cell_json(c, report.baseline, report.red(c)) for c in report.cells]
        assert data["cases"] == [report_json.case_json(c, report.baseline) for c in report.cases]
        assert data["notes"] == list(report.notes) and data["control"]["cell"] == report.control
        lines = text.splitlines()
        for row in (*data["cells"], *data["cases"]):
            assert f"    {json.dumps(row)}," in lines or f"    {json.dumps(row)}" in lines
    empty = json.loads(render.render(replace(hostile_report(), cases=(), notes=()), "json"))
    assert empty["cases"] == [] and empty["notes"] == []


def test_json_comes_in_pieces_that_make_the_same_text(tmp_path: Path) -> None:
    for report in reports(tmp_path):
        pieces = list(report_json.chunks(report, rows_per_chunk=1))
        assert "".join(pieces) == report_json.dumps(report) == "".join(render.stream(report, "json"))
        assert len(pieces) > len(report.cases)  # a piece per row here: never the whole report at once
    for fmt in ("text", "markdown", "html", "junit"):
        report = hostile_report()
        assert list(render.stream(report, fmt)) == [render.render(report, fmt)]


def test_a_case_line_is_its_case_json_as_json_dumps_writes_it(tmp_path: Path) -> None:
    """case_line writes each value by hand for speed; every kind of value each field can hold must
    come out as json.dumps(case_json(...)) writes it."""
    rows = [case for report in (*reports(tmp_path), hostile_report()) for case in report.cases]
    rows += [case_row("c", "g", "k", outcome, family, message, forward_ms=forward, slowdown=slow,
                      fingerprint_changed=changed, knobs=knobs, warnings=warnings, control_outcome=control,
                      delta=delta, baseline_outcome=Outcome.FAIL, baseline_delta=Delta.FIXED)
             for outcome, family, message, forward, slow, changed, knobs, warnings, control, delta in [
                 ("pass", None, None, None, None, None, {}, (), None, None),
                 ("fail", "other", HOSTILE, 0.1, 1e-320, True, {"pad": 8, "tf32": False}, ("cuda_oom", "other"),
                  Outcome.PASS, Delta.REGRESSION),
                 ("timeout", "timeout", "\u2028\ufeff", float("nan"), float("inf"), False, {"x": [1.5, None]},
                  ("a",), Outcome.CRASH, Delta.CHANGED),
                 ("crash", "crash", "", -0.0, 3, None, {"nested": {"k": "\x00"}}, (), Outcome.MISSING, Delta.MISSING),
                 ("skip", None, "x", 12345678901234567890.0, -float("inf"), None, {}, (), Outcome.SKIP, Delta.NEW),
             ]]
    assert len(rows) > 10
    # With --history: a row marked against earlier runs, and rows with no mark.
    rows.append(replace(rows[-1], history=marks.judge(
        [(marks.Run(run="n\u2028\"1", at=datetime.datetime(2026, 11, 1)), False),
         (marks.Run(run="n2", at=datetime.datetime(2026, 11, 2)), True)])))
    assert rows[-1].history is not None
    # Passed on both sides at a cost: every kind of value each of its fields can hold (cost_text).
    rows += [replace(rows[0], cost=cost) for cost in COSTS]
    for row in rows:
        for baseline, history in itertools.product((False, True), (False, True)):
            assert (report_json.case_line(row, baseline, history)
                    == json.dumps(report_json.case_json(row, baseline, history)))


def test_case_lines_name_each_rows_own_cell_and_gpu(tmp_path: Path) -> None:
    """case_lines writes a cell's cell and GPU once for its rows: rows of other cells between them,
    another GPU, or an equal name held by another string must each still read as case_line writes them."""
    base = case_row("a", "g1", "k", "pass", None, None)
    rows = [base, replace(base, case="k2"), replace(base, gpu="g2"), replace(base, cell="b"),
            replace(base, cell="".join(["a"])), replace(base, cell="a\u2028\"", gpu="g1")]
    for baseline, history in itertools.product((False, True), (False, True)):
        report = replace(reports(tmp_path / f"{baseline}{history}")[0], cases=tuple(rows), baseline=baseline,
                         history=history)
        assert list(report_json.case_lines(report)) == [report_json.case_line(r, baseline, history) for r in rows]


COSTS = [
    Cost(),
    Cost(backend="Cudnn", control_backend="Cudnn", memory_ratio=1.0, time_ratio=0.97, time_low=0.8, load=1.3),
    Cost(backend="Slow3d", control_backend="Mkldnn", memory_ratio=13.8, time_ratio=3.1, time_low=2.6,
         extra_bytes=1 << 30),
    Cost(backend=HOSTILE, control_backend="\u2028\ufeff", memory_ratio=float("nan"), time_ratio=float("inf"),
         time_low=-float("inf"), unsure=HOSTILE),
    Cost(backend="", control_backend=None, memory_ratio=1e-320, time_ratio=-0.0, time_low=12345678901234567890.0,
         unsure="the reference workload ran \u00d71.60 the control's (a loaded runner)"),
]


@pytest.mark.parametrize("cost", COSTS)
def test_a_cost_is_written_as_json_dumps_writes_its_object(cost: Cost) -> None:
    assert report_json.cost_text(cost) == json.dumps(report_json.cost_json(cost))


@pytest.mark.parametrize("value", [
    {"outcome": Outcome.PASS, "delta": Delta.REGRESSION, "warnings": ("a", "b"), "knobs": {"pad": 8}},
    {"message": "caf\u00e9 \u2603 \"quoted\"\n\ttab \x00 \ud83d\ude00", "n": -0.0, "big": 10**30, "f": 1e-320},
    {"nan": float("nan"), "inf": float("-inf"), "nested": [[{}], [], None, True, False]},
])
def test_the_kept_row_encoder_writes_what_json_dumps_writes(value: dict[str, Any]) -> None:
    assert report_json.row_encoder()(value) == json.dumps(value)


def test_the_row_encoder_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        report_json.row_encoder()({"x": {1}})


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_benign_report_reads_as_before(fmt: str) -> None:
    message = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-cont"
    report = Report(
        control="control",
        health={"cpu": Health(healthy=True, reason=None)},
        cells=(cell_row("control", "cpu", "control", {"pass": 1}),
               cell_row("host", "cpu", "regression", {"pass": 0, "cudnn_not_supported": 1}, signature=True)),
        cases=(case_row("host", "cpu", "conv1d-bf16-k7-p3-dw", "fail", "cudnn_not_supported", message + "iguous"),),
    )
    text = render.render(report, fmt)
    assert "conv1d-bf16-k7-p3-dw" in text
    assert message in text
    assert "REGRESSION: 0 pass, cudnn_not_supported×1, SIGNATURE" in text


def test_visible_is_idempotent_and_keeps_printable_unicode() -> None:
    once = escape.visible(HOSTILE)
    assert escape.visible(once) == once
    assert escape.visible("é ü 中文 ×") == "é ü 中文 ×"
    for char in once:
        assert char in "\t\n\r" or unicodedata.category(char) not in ("Cc", "Cf", "Cs"), ascii(char)
    assert escape.visible("a\u200bb\ufeff\U000e0041") == "a\\u200bb\\ufeff\\U000e0041"


def test_a_failing_cases_own_sources_are_its_provenance_not_a_known_upstream_claim(tmp_path: Path) -> None:
    """Issue 22, then issue 34 item 1: a case's sources travel from its results line into every
    format as where the case comes from ("case from: <url>"), never as "reported upstream": the
    conv1d of the autocast group failed with an injected message and was annotated with a report
    about depthwise conv3d. A passing case shows none; a line's non-URL entries never show."""
    url = "https://github.com/gungui98/Pytorch-Depthwise-Conv3d/issues/3"
    sources = [url, "javascript:alert(1)", "https://x y", 7]
    write_result(tmp_path, "control", [record("prod-a", sources=sources), record("prod-b", sources=sources)],
                 env=env_json("control"))
    write_result(tmp_path, "candidate", [record("prod-a", status="failed", message="CUDNN_STATUS_NOT_SUPPORTED",
                                                sources=sources),
                                         record("prod-b", sources=sources)], env=env_json("candidate"))
    built = report_model.build(results.load([str(tmp_path)]).results, "control")
    failing = next(c for c in built.cases if c.cell == "candidate" and c.case == "prod-a")
    assert failing.sources == (url,)
    said = f"case from: {url}"
    text = render.render(built, "text")
    assert f"prod-a: {said}" in text and "prod-b: case from" not in text
    assert said in render.render(built, "markdown")
    page = render.render(built, "html")
    assert f'case from: <a href="{url}" rel="noreferrer">{url}</a>' in page and "javascript:" not in page
    for fmt in ("text", "markdown", "html", "json"):
        assert "reported upstream" not in render.render(built, fmt), fmt
    rows = json.loads(render.render(built, "json"))["cases"]
    assert {(r["cell"], r["case"]): r["sources"] for r in rows}[("candidate", "prod-a")] == [url]
    assert {(r["cell"], r["case"]): r["known"] for r in rows}[("candidate", "prod-a")] == []


def test_a_failing_case_that_matches_a_known_issue_is_annotated_in_every_format(tmp_path: Path) -> None:
    """Issue 23: the known-issues file (results/known_issues.toml) on a failing case's params and
    the stack its cell observed: cuDNN 8.9.2 below 8.9.7, a dgrad with batch 70000 and stride 2."""
    params = {"op": "conv2d", "n": 70000, "c_in": 8, "c_out": 8, "size": [16, 16], "kernel": 3, "stride": 2,
              "padding": 1, "dilation": 1, "groups": 1, "dtype": "float16", "autocast": None,
              "memory_format": "contiguous", "layout": None, "backward": True, "direction": "backward_input",
              "output_padding": 0, "tf32": None}
    gpu = [{"index": 0, "name": "NVIDIA A100", "capability": "8.0", "memory_mb": 81000}]
    old = env_json("old", cudnn=8902, device="cuda", gpus=gpu)
    message = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
    write_result(tmp_path, "control", [record("dgrad", params=params)], env=env_json("control", device="cuda", gpus=gpu))
    write_result(tmp_path, "old", [record("dgrad", status="failed", message=message, params=params)], env=old)
    write_result(tmp_path, "new", [record("dgrad", status="failed", message=message, params=params)],
                 env=env_json("new", cudnn=90100, device="cuda", gpus=gpu))
    built = report_model.build(results.load([str(tmp_path)]).results, "control")
    by_cell = {c.cell: c for c in built.cases}
    (said,) = by_cell["old"].known
    assert said.startswith("known: ") and "fixed in cuDNN 8.9.7" in said and "cudnn-897" in said
    # Issue 34: the line says what of the failure met the entry (family, conditions, the range).
    assert said.endswith("[matched: family cudnn_not_supported; dgrad=true; min_batch=65536; min_stride=2; "
                         "cuDNN 8.9.2 in [-inf, 8.9.7)]"), said
    assert by_cell["new"].known == ()  # 9.1 is past the fix
    for fmt in ("text", "markdown", "html", "json"):
        assert "fixed in cuDNN 8.9.7" in render.render(built, fmt), fmt


def test_what_explain_found_is_one_line_under_the_case_in_every_format(tmp_path: Path) -> None:
    """Issue 23: explain/<case>.json (run/explain.py) in text, markdown, html and json; a `log`
    outside explain/ is not named, and text fields are bounded."""
    message = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
    write_result(tmp_path, "control", [record("c")], env=env_json("control"))
    cell = write_result(tmp_path, "cell", [record("c", status="failed", message=message)], env=env_json("cell"))
    (cell / "explain").mkdir()
    found = {"schema": 1, "case": "c", "level": "warn", "status": "failed", "backend": "CudnnTranspose",
             "cudnn_path": "get", "cudnn_off": "passed", "cudnn_is_the_cause": True,
             "cudnn": {"status": "CUDNN_STATUS_NOT_SUPPORTED_SHAPE", "subcode": 3002, "meaning": "the shape",
                       "cause": "software", "reason": "x" * 5000, "function": "cudnnBackendFinalize", "line": 7,
                       "count": 2},
             "log": "explain/c/cudnn.log"}
    (cell / "explain" / f"{rundir.explain_name('c')}.json").write_text(json.dumps(found))
    built = report_model.build(results.load([str(tmp_path)]).results, "control")
    row = next(c for c in built.cases if c.cell == "cell")
    assert row.explained is not None and row.explained.reason == "x" * 500
    line = ("explained: cuDNN said CUDNN_STATUS_NOT_SUPPORTED_SHAPE (3002: the shape; software) in "
            "cudnnBackendFinalize(): " + "x" * 500 + "; backend CudnnTranspose (GET); without cuDNN: passed, so "
            "cuDNN's path is the cause; log explain/c/cudnn.log")
    for fmt in ("text", "markdown"):
        assert line in render.render(built, fmt), fmt
    assert escape.html_cell(line) in render.render(built, "html")
    (case,) = [c for c in json.loads(render.render(built, "json"))["cases"] if c["cell"] == "cell"]
    assert case["explained"]["subcode"] == 3002 and case["explained"]["cudnn_is_the_cause"] is True
    found["log"] = "../../../etc/passwd"
    (cell / "explain" / f"{rundir.explain_name('c')}.json").write_text(json.dumps(found))
    rebuilt = report_model.build(results.load([str(tmp_path)]).results, "control")
    assert next(c for c in rebuilt.cases if c.cell == "cell").explained.log is None  # type: ignore[union-attr]



def test_a_real_h200_run_explains_its_two_failures_in_every_format(tmp_path: Path) -> None:
    """Issue 23, on a GPU: the suite through the harness with --explain=info on an H200 (torch
    2.11.0+cu130, cuDNN 9.19.0; tests/data/gpu/h200-torch2.11-cudnn9.19/README.md). explain.json is
    derived again from the captured logs by today's code, as the harness writes it."""
    shutil.copytree(REPO / "tests" / "data" / "gpu" / "h200-torch2.11-cudnn9.19" / "run", tmp_path / "run")
    cell = tmp_path / "run" / "host@h200-sm90@h200box"
    illegal, slow = ("conv2d-fp32-k1-bwd-over2g-pointwise_extreme-wide_channels",
                     "conv_transpose3d-fp16-k4-s2-p1-over2g-int32_other_ops-out4g")
    for case in (illegal, slow):
        # The GPU run's folders are named by the case (the layout before issue 32); the finding is
        # written where the report reads it now, and names the folder it came from.
        rundir.write_json(cell / "explain" / f"{rundir.explain_name(case)}.json",
                          explain.found(cell / "explain" / case, case, "info"))
    built = report_model.build(results.load([str(tmp_path / "run")]).results, "host")
    rows = {c.case: c for c in built.cases if c.outcome.failing}
    assert set(rows) == {illegal, slow} and rows[illegal].family == "cuda_illegal_address"
    lines = {
        illegal: ("explained: cuDNN's log names no failure; the last plan it executed: CONVOLUTION_BACKWARD_FILTER; "
                  f"backend Cudnn (GET); without cuDNN: passed, so cuDNN's path is the cause; log explain/{illegal}/cudnn.log"),
        slow: ("explained: cuDNN's log names no failure; backend CudnnTranspose (GET); without cuDNN: passed, "
               f"so cuDNN's path is the cause; log explain/{slow}/cudnn.log"),
    }
    for fmt in ("text", "markdown"):
        shown = render.render(built, fmt)
        assert all(line in shown for line in lines.values()), fmt
    html = render.render(built, "html")
    assert all(escape.html_cell(line) in html for line in lines.values())
    cases = {c["case"]: c for c in json.loads(render.render(built, "json"))["cases"] if c["explained"]}
    assert cases[illegal]["explained"]["last_operation"] == "CONVOLUTION_BACKWARD_FILTER"
    # junit carries no annotation lines, but the same two failing cases, and only those.
    suites = ET.fromstring(render.render(built, "junit"))
    failed = {tc.get("name") for tc in suites.iter("testcase")
              if tc.find("failure") is not None or tc.find("error") is not None}
    assert {name for name in failed if name} and all(any(case in (name or "") for case in (illegal, slow))
                                                     for name in failed)
    assert all(any(case in (name or "") for name in failed) for case in (illegal, slow))
    assert cases[slow]["explained"]["cudnn_is_the_cause"] is True and cases[slow]["explained"]["log"].endswith("cudnn.log")


def test_the_wheel_on_an_h200_ran_the_checkouts_suite_to_the_same_failure() -> None:
    """Issue 25, item 1, on a GPU: the built wheel, installed outside the checkout, ran a host cell on
    an H200 (tests/data/gpu/h200-wheel-torch2.11/README.md). Its cell names the suite inside the
    installed package, with the suite_version and node ids of the checkout's own run there, and the
    report finds the failure the checkout's run found, and only it."""
    gpu = REPO / "tests" / "data" / "gpu"
    wheel, checkout = (gpu / name / "run" / "host@h200-sm90@h200box"
                       for name in ("h200-wheel-torch2.11", "h200-torch2.11-cudnn9.19"))
    suite = json.loads((wheel / "cell.json").read_text())["suite"]
    assert suite["path"].endswith("/site/convmatrix/suites") and "/work/" not in suite["path"]
    versions = {json.loads((cell / "env.json").read_text())["suite_version"] for cell in (wheel, checkout)}
    assert versions == {suite["version"]}

    def nodeids(cell: Path) -> set[str]:
        return {json.loads(line)["nodeid"] for line in (cell / "results.jsonl").read_text().splitlines() if line}

    assert len(nodeids(wheel)) == 104 and nodeids(wheel) <= nodeids(checkout)
    built = report_model.build(results.load([str(wheel.parent)]).results, "host")
    failing = {(c.case, c.family) for c in built.cases if c.outcome.failing}
    assert failing == {("conv2d-fp32-k1-bwd-over2g-pointwise_extreme-wide_channels", "cuda_illegal_address")}
    assert "CTRL 103/104" in render.render(built, "text")


def test_each_case_row_carries_its_parameters_in_json_and_the_html_case_view(tmp_path: Path) -> None:
    """Issue 23: what failed can be read without the suite."""
    params = {"op": "conv_transpose2d", "n": 2, "c_in": 8, "c_out": 4, "size": [8, 8], "kernel": 4, "stride": 2,
              "padding": 1, "dilation": 1, "groups": 1, "bias": False, "dtype": "bfloat16", "autocast": None,
              "memory_format": "channels_last", "layout": None, "direction": "backward_weight", "benchmark": False}
    write_result(tmp_path, "control", [record("c", params=params)], env=env_json("control"))
    write_result(tmp_path, "cell", [record("c", status="failed", message="boom", params=params)], env=env_json("cell"))
    built = report_model.build(results.load([str(tmp_path)]).results, "control")
    rows = {r["cell"]: r for r in json.loads(render.render(built, "json"))["cases"]}
    assert rows["cell"]["params"] == params and rows["control"]["params"] == params
    shown = ("parameters: op=conv_transpose2d n=2 c_in=8 c_out=4 size=8x8 kernel=4 stride=2 padding=1 bias=False "
             "dtype=bfloat16 memory_format=channels_last direction=backward_weight benchmark=False")
    assert escape.html_cell(shown) in render.render(built, "html")


@pytest.mark.parametrize("operation", ["<script>alert(1)</script>", "CONV\x1b[2J", "conv_forward", "A" * 65, 5, True,
                                       ["CONVOLUTION_FORWARD"], "CONVOLUTION FORWARD", ""])
def test_a_hostile_last_operation_is_never_shown(tmp_path: Path, operation: Any) -> None:
    """explain/<case>.json is untrusted: only a cuDNN operation name (A-Z, digits, _) reaches a report."""
    write_result(tmp_path, "control", [record("c")], env=env_json("control"))
    cell = write_result(tmp_path, "cell", [record("c", status="failed", message="CUDA error: an illegal memory access")],
                        env=env_json("cell"))
    (cell / "explain").mkdir()
    activity: dict[str, Any] = {"executions": "many", "last_operation": operation, "last_call": "<b>"}
    found = {"schema": 1, "case": "c", "level": "info", "status": "failed", "cudnn_off": "passed",
             "cudnn_is_the_cause": True, "cudnn": None, "log": "explain/c/cudnn.log", "activity": activity}
    (cell / "explain" / f"{rundir.explain_name('c')}.json").write_text(json.dumps(found))
    built = report_model.build(results.load([str(tmp_path)]).results, "control")
    row = next(c for c in built.cases if c.cell == "cell")
    assert row.explained is not None and row.explained.last_operation is None
    for fmt in ("text", "markdown", "html", "json"):
        shown = render.render(built, fmt)
        said = "cuDNN's log names no failure; without cuDNN"
        assert (escape.html_cell(said) if fmt == "html" else said) in shown or fmt == "json", fmt
        assert "the last plan it executed" not in shown and "alert(1)" not in shown and "\x1b" not in shown, fmt
    activity["last_operation"] = "CONVOLUTION_FORWARD"
    (cell / "explain" / f"{rundir.explain_name('c')}.json").write_text(json.dumps(found))
    rebuilt = report_model.build(results.load([str(tmp_path)]).results, "control")
    for fmt in ("text", "markdown", "html"):
        assert "the last plan it executed: CONVOLUTION_FORWARD" in render.render(rebuilt, fmt), fmt
    assert '"last_operation": "CONVOLUTION_FORWARD"' in render.render(rebuilt, "json")


def test_a_cases_view_and_weight_format_are_in_its_parameters(tmp_path: Path) -> None:
    """Issue 39: a case's own view (its input strides and storage offset) and its weight's memory
    format apart from the input's show where its parameters do."""
    params = {"op": "conv_transpose1d", "n": 1, "c_in": 1024, "c_out": 1, "size": 1, "kernel": 1, "stride": 1,
              "padding": 0, "dilation": 1, "groups": 1, "bias": True, "dtype": "float32", "autocast": None,
              "memory_format": "contiguous", "layout": None, "input_strides": [1024, 1, 1], "storage_offset": 3,
              "weight_memory_format": "channels_last", "direction": "backward", "edge": None}
    write_result(tmp_path, "control", [record("c", params=params)], env=env_json("control"))
    write_result(tmp_path, "cell", [record("c", status="failed", message="boom", params=params)], env=env_json("cell"))
    built = report_model.build(results.load([str(tmp_path)]).results, "control")
    shown = ("parameters: op=conv_transpose1d n=1 c_in=1024 c_out=1 size=1 kernel=1 dtype=float32 "
             "memory_format=contiguous input_strides=1024x1x1 storage_offset=3 weight_memory_format=channels_last "
             "direction=backward")
    assert escape.html_cell(shown) in render.render(built, "html")
    assert json.loads(render.render(built, "json"))["cases"][0]["params"]["input_strides"] == [1024, 1, 1]


@pytest.mark.parametrize("strides", [list(range(200_000)), [[1, [2, [3]]], {"a": 1}, 5], ["<script>alert(1)</script>",
                                     "\x1b[2J", "a" * 5000], json.loads("[" * 50 + "]" * 50)], ids=str)
def test_a_crafted_view_in_a_results_line_shows_bounded_and_escaped(tmp_path: Path, strides: list[Any]) -> None:
    """h39: a results line is untrusted: an input_strides of 200,000 numbers made a 1.3 MB
    parameters line in the html case view; nested lists and text show bounded too, escaped."""
    params = {"op": "conv2d", "n": 2, "input_strides": strides, "storage_offset": "x" * 10_000}
    write_result(tmp_path, "control", [record("c", params=params)], env=env_json("control"))
    write_result(tmp_path, "cell", [record("c", status="failed", message="boom", params=params)], env=env_json("cell"))
    built = report_model.build(results.load([str(tmp_path)]).results, "control")
    row = next(c for c in built.cases if c.cell == "cell")
    shown = report_cases.parameters(row)
    assert shown is not None and shown.startswith("parameters: op=conv2d n=2 input_strides=")
    assert len(shown) <= 300 and "199999" not in shown
    page = render.render(built, "html")
    assert escape.html_cell(shown) in page and "<script>alert" not in page
    for fmt in ("text", "markdown"):  # they show no parameters: nothing of the line's reaches them
        assert "input_strides" not in render.render(built, fmt), fmt
