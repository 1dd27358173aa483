"""A container cell's image as shipped (issue 47): the audit's second table, the image without the
harness's LD_LIBRARY_PATH (suites/test_audit.py `audit.as_shipped`), is one line in Cells to look
at when it loads other libraries than the cell as it ran; red is decided on the cell as it ran."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import strategies as gen
from convmatrix import results
from convmatrix.report import grid as report_grid
from convmatrix.report import model as report_model
from convmatrix.report import render
from convmatrix.results import libraries
from convmatrix.results.outcomes import Outcome
from testkit import env_json, record, write_result

WHEEL = "/opt/cell/lib/python3.11/site-packages/nvidia/cudnn/lib"
SYSTEM = "/usr/lib/x86_64-linux-gnu"
CONTROL = "container-torch2.5.1-cu124-cudnnbundled-py3.11-base"
CANDIDATE = "container-torch2.5.1-cu124-cudnnbundled-py3.11-newbase"


def row(name: str, version: str, folder: str, origin: str, loaded: bool = True) -> dict[str, Any]:
    return {"name": name, "family": "cudnn", "path": f"{folder}/{name}", "loaded": loaded, "version": version,
            "package": None, "origin": origin}


RAN = [row("libcudnn.so.9", "9.1.0", WHEEL, "wheel"), row("libcudnn_graph.so.9", "9.1.0", WHEEL, "wheel"),
       row("libcudnn_cnn.so.9", "9.1.0", WHEEL, "wheel")]
# The base registers 9.2.1's libcudnn_cnn with ldconfig: without the harness's path, a user's job gets it.
SHIPPED = [*RAN[:2], row("libcudnn_cnn.so.9.2.1", "9.2.1", SYSTEM, "ld cache")]
LINE = (f"as shipped (without the harness's LD_LIBRARY_PATH): libcudnn_cnn 9.2.1 from ld cache "
        f"({SYSTEM}/libcudnn_cnn.so.9.2.1), as run 9.1.0 from wheel ({WHEEL}/libcudnn_cnn.so.9)")


def table(rows: list[dict[str, Any]]) -> tuple[libraries.Library, ...]:
    return libraries.table({"libraries": rows})


def test_the_container_example_is_one_line_naming_the_library_both_versions_and_paths() -> None:
    assert libraries.shipped_line(table(RAN), table(SHIPPED)) == LINE
    assert libraries.shipped_line(table(RAN), table(RAN)) is None
    assert libraries.shipped_line(table(RAN), ()) is None  # no table as shipped: a baremetal cell's
    assert libraries.shipped(None) == () and libraries.shipped({"as_shipped": "x"}) == ()


@given(gen.shipped_pairs())
def test_a_line_says_every_difference_and_only_then(pair: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    ran, shipped = (table(rows) for rows in pair)
    line = libraries.shipped_line(ran, shipped)
    stems = {r.name.split(".so")[0]: (r.version, r.path) for r in sorted(ran, key=lambda r: not r.loaded)[::-1]}
    kept = {r.name.split(".so")[0]: (r.version, r.path) for r in sorted(shipped, key=lambda r: not r.loaded)[::-1]}
    differ = sorted(s for s in set(stems) | set(kept) if stems.get(s) != kept.get(s))
    if not shipped or not differ:
        assert line is None
        return
    assert line is not None and "\n" not in line and "\r" not in line
    assert line.startswith("as shipped (without the harness's LD_LIBRARY_PATH): ")
    for stem in differ[:libraries.SHOWN_SHIPPED]:
        assert f" {stem} " in line or f": {stem} " in line
    assert (f"and {len(differ) - libraries.SHOWN_SHIPPED} more" in line) == (len(differ) > libraries.SHOWN_SHIPPED)
    assert libraries.shipped_line(ran, ran) is None


def audit_line(ran: list[dict[str, Any]], shipped: list[dict[str, Any]] | None) -> dict[str, Any]:
    audit: dict[str, Any] = {"schema": 1, "libraries": ran, "findings": []}
    if shipped is not None:
        audit["as_shipped"] = {"libraries": shipped, "findings": ["cuDNN version mismatch: …"]}
    return record(libraries.CASE, audit=audit)


def write_run(run: Path, shipped: list[dict[str, Any]] | None) -> None:
    for cell_id in (CONTROL, CANDIDATE):
        meta = {"lane": "container", "requested": {}, "knobs": "default", "expected": {}, "control": cell_id == CONTROL,
                "gpu_key": "cpu", "gpu": None, "ended": "2026-12-02T00:02:00Z"}
        lines = [audit_line(RAN, shipped if cell_id == CANDIDATE else None), record("conv2d-a")]
        write_result(run, cell_id, lines, env=env_json(cell_id), cell=meta)


def test_every_format_shows_the_one_line_and_the_cell_stays_green(tmp_path: Path) -> None:
    write_run(tmp_path / "shipped", SHIPPED)
    write_run(tmp_path / "plain", None)
    made = {}
    for name in ("shipped", "plain"):
        loaded = results.load([str(tmp_path / name)])
        assert not loaded.errors
        made[name] = report_model.build(list(loaded.results), CONTROL)
    report = made["shipped"]
    candidate = next(c for c in report.cells if c.cell == CANDIDATE)
    assert candidate.shipped_line == LINE
    # Red is decided on the cell as it ran: the same verdicts, nothing red, with or without it.
    assert [(c.cell, c.verdict) for c in report.cells] == [(c.cell, c.verdict) for c in made["plain"].cells]
    assert not any(report.red(c) for c in report.cells)
    looks = report_grid.look(report)
    assert [(x.where, x.words, x.shipped) for x in looks] == [(f"{CANDIDATE}@cpu", LINE, True)]
    assert report_grid.look(made["plain"]) == []

    text = render.render(report, "text")
    section = text.split("Cells to look at\n\n", 1)[1].split("\n\n", 1)[0]
    assert section.splitlines() == [f"- {CANDIDATE}@cpu: {LINE}"]
    assert text.count("libcudnn_cnn 9.2.1 from ld cache") == 1

    html = render.render(report, "html")
    look = html.split('<section id="look">', 1)[1].split("</section>", 1)[0]
    assert look.count("<li ") == 1 and 'class="finding"' in look and "AS SHIPPED" in look
    assert "harness&#x27;s LD_LIBRARY_PATH" in look or "harness&#39;s LD_LIBRARY_PATH" in look

    data = json.loads(render.render(report, "json"))
    assert {c["cell"]: c["shipped_line"] for c in data["cells"]} == {CONTROL: None, CANDIDATE: LINE}
    assert not any(c["fails"] for c in data["cells"])

    markdown = render.render(report, "markdown")
    assert markdown.count("libcudnn_cnn 9.2.1 from ld cache") == 1 and "## Notes" in markdown
    assert "Cells to look at" not in render.render(made["plain"], "text")


def test_a_hostile_path_stays_one_escaped_line(tmp_path: Path) -> None:
    hostile = [*RAN[:2], {**SHIPPED[2], "path": "/x\n<script>alert(1)</script>\r\u2028- fake"}]
    write_run(tmp_path / "r", hostile)
    loaded = results.load([str(tmp_path / "r")])
    report = report_model.build(list(loaded.results), CONTROL)
    text = render.render(report, "text")
    section = text.split("Cells to look at\n\n", 1)[1].split("\n\n", 1)[0]
    assert len(section.splitlines()) == 1
    assert "<script>alert" not in render.render(report, "html")


@given(gen.runs(), st.data())
def test_a_table_as_shipped_never_changes_a_verdict(run: gen.Run, data: st.DataObject) -> None:
    """Whatever the image as shipped loads, each cell's verdict and whether it is red are those of
    the cell as it ran (the judged night decides; the report only displays)."""
    audited = []
    for result in run.results:
        ran, shipped = data.draw(gen.shipped_pairs())
        case = libraries_case(ran, shipped if data.draw(st.booleans()) else [])
        audited.append(replace(result, cases={**result.cases, libraries.CASE: case}))
    plain = [replace(r, cases={**r.cases, libraries.CASE: replace(r.cases[libraries.CASE], shipped=())})
             for r in audited]
    with_it, without = report_model.build(audited, "ctrl"), report_model.build(plain, "ctrl")
    assert [(c.where, c.verdict, with_it.red(c)) for c in with_it.cells] == [
        (c.where, c.verdict, without.red(c)) for c in without.cells]
    assert [(c.case, c.verdict) for c in with_it.cases] == [(c.case, c.verdict) for c in without.cases]
    assert [(x.where, x.words) for x in report_grid.look(with_it) if not x.shipped] == [
        (x.where, x.words) for x in report_grid.look(without)]


def libraries_case(ran: list[dict[str, Any]], shipped: list[dict[str, Any]]) -> results.Case:
    return results.Case(case=libraries.CASE, outcome=Outcome.PASS, family=None, message=None, knobs={}, warnings=(),
                        libraries=table(ran), shipped=table(shipped))
