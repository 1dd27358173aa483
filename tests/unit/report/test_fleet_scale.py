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


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> report_model.Report:
    run = fleetkit.write_nightly(tmp_path_factory.mktemp("fleet") / "run")
    loaded = results.load([str(run)])
    return report_model.build(loaded.results, None)


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
