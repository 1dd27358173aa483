"""Issue 34 item 6: the report at fleet scale, on the nightly matrix's 51 cells x 4 GPU generations
with a tenth of the candidates' cases failing and three candidates that never installed
(tests/fleetkit.py): labels that are never cut, an overview that names a few cells and counts
the rest, and the grid that fits four GPU columns."""

from __future__ import annotations

from pathlib import Path

import pytest

import fleetkit
from convmatrix import results
from convmatrix.report import model as report_model
from convmatrix.report import render
from convmatrix.report import text as render_text
from convmatrix.report import verdicts as report_verdicts
from reportkit import said_by_formats


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> report_model.Report:
    run = fleetkit.write_nightly(tmp_path_factory.mktemp("fleet") / "run")
    loaded = results.load([str(run)])
    return report_model.build(loaded.results, report_verdicts.control_id(loaded.results, None))


def test_the_text_grid_cuts_no_label_and_fits_120_columns(fleet: report_model.Report) -> None:
    text = render.render(fleet, "text")
    lines = text.split("\nlegend: ", 1)[0].splitlines()
    grid = lines[next(n for n, line in enumerate(lines) if line.startswith("stack")):]  # after the alerts
    assert max(len(line) for line in grid) <= render_text.WIDTH
    assert not any("…" in line for line in grid), [line for line in grid if "…" in line]
    assert not any("channels_last" in line for line in grid)  # no knob varies: none names a row


def test_the_html_overview_names_a_few_signature_cells_and_counts_the_rest(fleet: report_model.Report) -> None:
    page = render.render(fleet, "html")
    overview = page.split('<p class="sig-cells">', 1)[1].split("</p>", 1)[0]
    signed = sum(1 for c in fleet.cells if c.signature)
    assert signed > 100 and overview.count("<code>") == 6 and f"and {signed - 6} more" in overview


def test_the_fleet_fixture_is_what_the_nightly_matrix_expands_to(fleet: report_model.Report) -> None:
    assert len({c.cell for c in fleet.cells}) == 51 and len({c.gpu.key for c in fleet.cells}) == 4
    assert Path(fleet.cells[0].path).name.endswith("@runner")


def test_the_html_of_a_fleet_is_under_a_megabyte_and_tells_each_failure_once(fleet: report_model.Report) -> None:
    """16 MB before: every cell listed its 233 cases one by one. Past the page's row budget each
    cell names its noteworthy cases and each distinct failure is told once, with its cells."""
    page = render.render(fleet, "html")
    assert len(page.encode()) <= 1_000_000, len(page.encode())
    failing = {c.case for c in fleet.cases if c.outcome.failing}
    told = page.split('<section id="failures">', 1)[1].split("</section>", 1)[0]
    assert all(f'<code class="id">{case}</code>' in told for case in failing)
    assert page.count('<p class="ids"') >= 188 and "<li class=\"case" not in page


def test_a_stack_not_run_on_several_gpus_for_one_reason_is_one_line(tmp_path: Path) -> None:
    """The nightly said "NOT RUN: no runner reported GPU ..." three times per stack (once per GPU
    the fleet expects and no runner had): now one line per stack, naming the GPUs."""
    run = fleetkit.write_nightly(tmp_path / "run", failing=0)
    missing = ["b300-sm103", "gb200-sm100", "rtx6000-sm120"]
    loaded = results.load([str(run)], expect_gpus=missing)
    built = report_model.build(loaded.results, report_verdicts.control_id(loaded.results, None))
    look = render.render(built, "text").split("\nCells to look at\n", 1)[1].split("\n\n", 1)[0]
    lines = [line for line in look.splitlines() if "no runner reported GPU" in line]
    assert len(lines) == 51, look
    in_order = ["gb200-sm100", "b300-sm103", "rtx6000-sm120"]  # by generation (compute capability)
    assert f"- host on {', '.join(in_order)}: NOT RUN: no result on any host: no runner reported GPU <gpu>" \
        in look, look


def test_every_format_says_the_same_verdict_of_every_cell_at_fleet_scale(tmp_path: Path) -> None:
    """The compact html, the grouped lines of stacks not run on several GPUs and the rest agree
    with the json on every one of the 51 x 7 cells (4 GPUs reported, 3 expected and not)."""
    run = fleetkit.write_nightly(tmp_path / "run")
    loaded = results.load([str(run)], expect_gpus=["b300-sm103", "gb200-sm100", "rtx6000-sm120"])
    built = report_model.build(loaded.results, report_verdicts.control_id(loaded.results, None))
    said = said_by_formats(built)
    truth = {c.where: str(c.verdict) for c in built.cells}
    assert len(truth) == 51 * 7 and said["json"] == truth and said["html"] == truth
    assert said["text"] == {w: v for w, v in truth.items() if v not in ("ok", "control")}
