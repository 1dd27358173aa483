"""Issue 49, reds first: the report of a realistic fleet (tests/fleetkit.write_fleet: mostly green,
four regressions of different families on some GPUs, an outage) opens with the cells to look
at, one line each with its GPUs and cause; the html can show only the rows and columns that hold
one; GPU columns go by generation; the text says a stack's identical line once for all its GPUs.
And a night in which no GPU took part says so first, in every format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fleetkit
from convmatrix import results
from convmatrix.report import grid as report_grid
from convmatrix.report import model as report_model
from convmatrix.report import render
from convmatrix.report import verdicts as report_verdicts
from testkit import record, write_result

ORDERED = ["a100-sm80", "l4-sm89", "h100-sm90", "b200-sm100"]  # Ampere, Ada, Hopper, Blackwell


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> report_model.Report:
    run = fleetkit.write_fleet(tmp_path_factory.mktemp("fleet") / "run")
    loaded = results.load([str(run)])
    return report_model.build(loaded.results, report_verdicts.control_id(loaded.results, None))


def findings(report: report_model.Report) -> list[report_model.CellRow]:
    return [c for c in report.cells if report_grid.finding(c)]


def test_the_fleet_is_mostly_green_with_a_few_regressions_of_different_families_and_an_outage(
        fleet: report_model.Report) -> None:
    regressed = [c for c in fleet.cells if c.verdict == "regression"]
    families = {f for c in regressed for f in c.counts if f not in ("pass", "skip")}
    assert {"cudnn_not_supported", "cuda_illegal_address", "cuda_oom", "numeric_mismatch"} <= families
    assert 0 < len(regressed) <= 10 and sum(c.verdict == "ok" for c in fleet.cells) > 150
    assert sum(1 for c in fleet.cells if c.did_not_run) == 12  # three stacks on all four GPUs


def test_gpu_columns_go_by_generation_in_every_grid(fleet: report_model.Report) -> None:
    assert [c.key for c in report_grid.build(fleet).columns] == ORDERED
    text = render.render(fleet, "text")
    header = next(line for line in text.splitlines() if line.startswith("stack "))
    assert header.split()[1:] == ORDERED
    page = render.render(fleet, "html")
    grid = page.split('<table class="grid', 1)[1].split("</thead>", 1)[0]
    assert [grid.index(k) for k in ORDERED] == sorted(grid.index(k) for k in ORDERED)


def test_columns_go_by_capability_then_memory_or_slice() -> None:
    def column(key: str, name: str, capability: str | None) -> report_grid.Column:
        return report_grid.Column(key=key, generation="", name=name, capability=capability)

    given = [column("h200-sm90", "NVIDIA H200", "9.0"), column("cpu", "cpu", None),
             column("a100-sm80", "NVIDIA A100-SXM4-80GB", "8.0"),
             column("a100-sm80-mig3g-40gb", "NVIDIA A100-SXM4-80GB", "8.0"),
             column("a100-sm80-mig1g-10gb", "NVIDIA A100-SXM4-80GB", "8.0"),
             column("a30-sm80", "NVIDIA A30 24GB", "8.0"), column("b200-sm100", "NVIDIA B200", "10.0"),
             column("h100-sm90", "NVIDIA H100 80GB HBM3", "9.0"), column("l4-sm89", "NVIDIA L4", None)]
    assert [c.key for c in sorted(given, key=report_grid.column_order)] == [
        "a100-sm80-mig1g-10gb", "a30-sm80", "a100-sm80-mig3g-40gb", "a100-sm80", "l4-sm89", "h100-sm90",
        "h200-sm90", "b200-sm100", "cpu"]


def test_the_text_says_a_stacks_identical_lines_once_for_all_its_gpus(fleet: report_model.Report) -> None:
    look = render.render(fleet, "text").split("\nCells to look at\n\n", 1)[1].split("\n\n", 1)[0]
    lines = look.splitlines()
    outage = [line for line in lines if "pip could not reach" in line]
    assert len(outage) == 3 and all(f"on {', '.join(ORDERED)}:" in line for line in outage), look
    numeric = [line for line in lines if "numeric_mismatch" in line]
    assert len(numeric) == 1 and f"on {', '.join(ORDERED)}:" in numeric[0], look
    signature = [line for line in lines if "SIGNATURE" in line]
    assert len(signature) == 1 and "on h100-sm90, b200-sm100:" in signature[0], look
    assert len(lines) == 7, look


def test_the_html_opens_with_every_red_cell_and_finding_one_line_each(fleet: report_model.Report) -> None:
    page = render.render(fleet, "html")
    assert page.index('id="look"') < page.index('id="grid"')
    look = page.split('<section id="look">', 1)[1].split("</section>", 1)[0]
    items = look.split("<li")[1:]
    assert len(items) == 7, look
    every = {c.where for c in findings(fleet)}
    named = {f"{c.cell}@{key}" for c in findings(fleet) for key in ORDERED
             if any(c.cell in item and key in item for item in items)}
    assert every <= named
    for family in ("cudnn_not_supported", "cuda_illegal_address", "cuda_oom", "numeric_mismatch", "build failed"):
        assert family in look, family
    assert 'href="#c' in look  # each line opens its cell


def test_the_html_marks_the_rows_and_columns_a_reds_only_view_keeps(fleet: report_model.Report) -> None:
    page = render.render(fleet, "html")
    assert '<input type="checkbox" id="reds-only"' in page
    grid = page.split('<table class="grid', 1)[1].split("</table>", 1)[0]
    rows = grid.split("<tr")[1:]
    kept = [r for r in rows if 'class="stack' in r and " plain" not in r.split(">", 1)[0]]
    assert len(kept) == len({c.cell for c in findings(fleet)}) == 7
    # Every GPU holds a finding here: no column is plain.
    assert "plain-col" not in grid


def test_a_fleets_html_stays_under_a_megabyte(fleet: report_model.Report) -> None:
    assert len(render.render(fleet, "html").encode()) <= 1_000_000


def no_gpu_report(tmp_path: Path) -> report_model.Report:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record("a")], cell={"control": True})
    write_result(run, "cand", [record("a")], cell={})
    loaded = results.load([str(run)])
    return report_model.build(loaded.results, "ctrl")


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "json"])
def test_a_night_in_which_no_gpu_took_part_says_so_first(tmp_path: Path, fmt: str) -> None:
    report = no_gpu_report(tmp_path)
    out = render.render(report, fmt)
    said = "NO GPU took part: every cell that ran, ran on the CPU, so cuDNN was never exercised"
    if fmt == "json":
        data = json.loads(out)
        assert data["no_gpu"] is True and data["control"]["alerts"][0].startswith(said)
        return
    assert said in out
    first_alert = {"text": "! ", "markdown": "> **", "html": '<p class="warn">'}[fmt]
    assert out.split(first_alert, 1)[1].startswith(said)


def test_a_night_with_a_gpu_has_no_such_alert(fleet: report_model.Report) -> None:
    assert not any("NO GPU" in line for line in render.render(fleet, "text").splitlines())
