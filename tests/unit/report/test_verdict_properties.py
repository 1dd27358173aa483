"""The invariants of the order of verdicts (docs/contracts.md: Invariants), property-tested over
generated control and candidate result sets (tests/strategies.py): statuses, families, skips,
missing and duplicate lines, killed cells, stack mismatches, declared skips, several GPUs."""

from __future__ import annotations

import json
import random
import re
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import strategies as gen
from convmatrix import results
from convmatrix.errors import NotGreen, UnhealthyControl
from convmatrix.report import grid as report_grid
from convmatrix.report import markdown as render_markdown
from convmatrix.report import model as report_model
from convmatrix.report import render, verdicts
from convmatrix.report.model import CellRow, Report
from convmatrix.results.outcomes import Outcome, Verdict
from convmatrix.results.verdicts import OUTSIDE, RANK
from reportkit import said_by_formats
from testkit import env_json, write_result

pytestmark = pytest.mark.properties

GREEN = frozenset({Verdict.OK, Verdict.FIXED, Verdict.CHANGED, Verdict.DECLARED_SKIP})


def build(run: gen.Run) -> Report:
    return report_model.build(list(run.results), "ctrl")


def exit_code(report: Report, fail_on: str = "regression") -> int:
    try:
        verdicts.judge(report, fail_on)
    except NotGreen:
        return 1
    except UnhealthyControl:
        return 3
    return 0


def verdict_of(report: Report) -> dict[tuple[str, str], Verdict]:
    return {(c.cell, c.gpu.key): c.verdict for c in report.cells}


@given(gen.runs())
def test_never_green_unless_every_case_the_control_passed_ran_and_passed(run: gen.Run) -> None:
    report = build(run)
    for cell in report.cells:
        if cell.verdict not in GREEN:
            continue
        control = run.control_on(cell.gpu.key)
        mine = next(r for r in run.results if (r.cell, r.gpu_key) == (cell.cell, cell.gpu.key))
        assert control is not None and report.health[cell.gpu.key].healthy
        assert not mine.problems and not mine.stack_mismatch
        for name, theirs in control.cases.items():
            if theirs.outcome != Outcome.PASS:
                continue
            here = mine.cases.get(name)
            assert here is not None, (cell.where, name)
            declared = any(row.declared for row in report.cases if (row.where, row.case) == (cell.where, name))
            assert here.outcome == Outcome.PASS or (here.outcome == Outcome.SKIP and declared), (cell.where, name)


@given(gen.runs(sick_controls=False), st.data())
def test_a_signature_failure_on_a_case_the_control_passed_is_red(run: gen.Run, data: st.DataObject) -> None:
    candidate = data.draw(st.sampled_from(run.candidates()))
    control = run.control_on(candidate.gpu_key)
    passed = [n for n, c in control.cases.items() if c.outcome == Outcome.PASS] if control else []
    if not passed:
        return
    name = data.draw(st.sampled_from(passed))
    broken = gen.with_case(candidate, name, Outcome.FAIL, gen.SIGNATURE)
    report = build(gen.Run(results=tuple(broken if r is candidate else r for r in run.results)))
    # exit 3 (a control unhealthy or absent on another GPU with candidates) outranks it, never 0
    sick = any(not h.healthy for h in report.health.values())
    assert exit_code(report, "regression") == (3 if sick and exit_code(report, "regression") == 3 else 1)
    assert exit_code(report, "signature") in ((1, 3) if sick else (1,))
    (cell,) = [c for c in report.cells if (c.cell, c.gpu.key) == (candidate.cell, candidate.gpu_key)]
    assert cell.verdict in (Verdict.REGRESSION, Verdict.INVALID)


@given(gen.runs(), st.data())
def test_adding_a_failing_or_missing_case_never_improves_a_verdict(run: gen.Run, data: st.DataObject) -> None:
    candidate = data.draw(st.sampled_from(run.candidates()))
    passing = [n for n, c in candidate.cases.items() if c.outcome == Outcome.PASS]
    absent = [n for n in gen.CASE_NAMES if n not in candidate.cases]
    changes = [*(("fail", n) for n in passing), *(("drop", n) for n in passing), *(("add", n) for n in absent)]
    if not changes:
        return
    how, name = data.draw(st.sampled_from(changes))
    outcome, family = data.draw(st.sampled_from([r for r in gen.RESULTS if r[0].failing]))
    if how == "drop":
        worse = gen.without_case(candidate, name)
    else:
        control = run.control_on(candidate.gpu_key)
        if how == "add" and control is not None and name in control.cases:
            return  # a case the control ran and the candidate lacked is already not-run: see the docs
        worse = gen.with_case(candidate, name, outcome, family)
    before = verdict_of(build(run))
    after = verdict_of(build(gen.Run(results=tuple(worse if r is candidate else r for r in run.results))))
    key = (candidate.cell, candidate.gpu_key)
    if before[key] in OUTSIDE or after[key] in OUTSIDE:
        assert before[key] == after[key]
    else:
        assert RANK[after[key]] <= RANK[before[key]], (before[key], after[key], how, name, family)


@given(gen.runs(), st.randoms(use_true_random=False))
def test_the_order_of_lines_and_of_cells_changes_nothing(run: gen.Run, rnd: random.Random) -> None:
    shuffled = []
    for result in run.results:
        items = list(result.cases.items())
        rnd.shuffle(items)
        shuffled.append(replace(result, cases=dict(items)))
    rnd.shuffle(shuffled)
    one, other = build(run), build(gen.Run(results=tuple(shuffled)))
    assert verdict_of(one) == verdict_of(other)
    assert {(c.where, c.case): c.verdict for c in one.cases} == {(c.where, c.case): c.verdict for c in other.cases}
    assert exit_code(one) == exit_code(other)


@given(gen.runs())
def test_every_format_agrees_with_the_exit_code_on_every_cell(run: gen.Run) -> None:
    report = build(run)
    said = said_by_formats(report)
    truth = {c.where: str(c.verdict) for c in report.cells}
    assert said["json"] == truth and said["html"] == truth
    # text lists every cell that is not plainly ok ("Cells to look at"), in its verdict's word
    assert {w: v for w, v in truth.items() if v not in ("ok", "control")} == {
        w: v for w, v in said["text"].items() if v not in ("ok", "control")}
    # markdown: one mark per grid entry, the same multiset of verdicts
    md = render.render(report, "markdown")
    marks = {mark: str(v) for v, mark in render_markdown.MARKS.items()}
    grid = "\n".join(line for line in md[:md.index("## Failing or changed cases")].splitlines()
                     if line.startswith("| "))
    shown = Counter(marks[m] for m in re.findall("|".join(map(re.escape, marks)), grid))
    expected = Counter(v for c in report.cells if not report_grid.quiet(c) for v in [str(c.verdict)])
    assert shown == expected
    # junit fails a candidate's testsuite exactly when that cell makes the report red
    junit = ET.fromstring(render.render(report, "junit"))
    # one testsuite per cell: an empty suite (a cell that ran nothing) was once made twice
    names = [suite.get("name") for suite in junit.findall("testsuite")]
    assert len(names) == len(set(names)), names
    for cell in report.cells:
        if cell.verdict in OUTSIDE:
            continue
        suite = junit.find(f"testsuite[@name='{cell.where}']")
        failing = suite is not None and int(suite.get("failures") or 0) > 0
        assert failing == report.red(cell), cell.where
    red = any(report.red(c) for c in report.cells)
    assert exit_code(report) in ((1, 3) if red else (0, 3))
    assert json.loads(render.render(report, "json"))["verdicts"] == verdicts.tally(report.cells)


def red_cells(report: Report) -> list[CellRow]:
    return [c for c in report.cells if report.red(c)]


@given(gen.runs(max_candidates=2), st.lists(st.tuples(st.sampled_from(gen.CASE_NAMES),
                                                         st.sampled_from(gen.RESULTS)), max_size=3))
def test_through_the_reader_duplicates_and_kills_are_never_green(run: gen.Run,
                                                                 extra: list[tuple[str, tuple[Outcome, str | None]]]) -> None:
    """The same sets written as result directories and read back (results.load): a case recorded
    twice with another outcome, or a cell killed before its end, is INVALID, never green."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        conflicted = set()
        for result in run.results:
            lines = gen.lines(result.cases)
            if result.cell != "ctrl":
                for name, (outcome, family) in extra:
                    if name in result.cases and result.cases[name].outcome != outcome and outcome in gen.STATUS:
                        conflicted.add((result.cell, result.gpu_key))
                    lines += gen.lines({name: gen.case(name, outcome, family)})
            killed = bool(result.problems)
            write_result(out, result.cell, lines, gpu=result.gpu_key,
                         env=env_json(result.cell, ended=None if killed else "2026-12-02T00:01:00Z"),
                         cell={"control": result.cell == "ctrl", "ended": "2026-12-02T00:01:00Z"})
        loaded = results.load([out])
        report = report_model.build(loaded.results, "ctrl")
        for cell in report.cells:
            if (cell.cell, cell.gpu.key) in conflicted or cell.problems:
                assert cell.verdict in (Verdict.INVALID, Verdict.CONTROL, Verdict.NO_CONTROL) \
                    or (cell.verdict == Verdict.REGRESSION and cell.problems == ()), (cell.where, cell.verdict)
                assert cell.verdict not in GREEN


@pytest.mark.parametrize("fail_on", ["regression", "signature"])
@given(run=gen.runs())
def test_never_still_writes_what_is_red(fail_on: str, run: gen.Run) -> None:
    """--fail-on never changes the exit, not what the views mark red."""
    report = build(run)
    assert exit_code(report, "never") in (0, 3)
    red = [c.where for c in report.cells if verdicts.failing(c, fail_on)]
    if red and exit_code(report, fail_on) != 3:
        assert exit_code(report, fail_on) == 1
