"""report/nights.py: every format shows the marks against the history, first-red apart from
recurring; --fail-on first-red fails on first-red alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from convmatrix.cli.main import main
from historykit import night, recorded

FORMATS = {"text": "first-red (red for the first time", "markdown": "## Against the history",
           "html": "<h2>Against the history</h2>", "junit": '<property name="history" value="first-red" />'}


@pytest.fixture
def marked(tmp_path: Path) -> tuple[Path, str]:
    """SQLite: night 1 green; nights 2 and 3 break b; night 4 breaks c too: b recurring, c first-red."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    for n, broken in ((1, ()), (2, ("b",)), (3, ("b",))):
        assert recorded(night(tmp_path, n, broken=broken), url) == 0
    return night(tmp_path, 4, broken=("b", "c")), url


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_shows_the_marks(marked: tuple[Path, str], tmp_path: Path, fmt: str) -> None:
    run, url = marked
    out = tmp_path / f"r.{fmt}"
    assert main(["report", str(run), "--history", url, "--format", fmt, "-o", str(out), "--fail-on", "never"]) == 0
    text = out.read_text()
    assert FORMATS[fmt] in text
    if fmt != "junit":
        # first-red and recurring stand apart, each naming its case
        first, recurring = text.index("first-red ("), text.index("recurring (")
        assert first < text.index("cand@cpu c", first) < recurring < text.index("cand@cpu b", recurring)
        # The timeline: green, then red three nights, tonight the last (markdown escapes the brackets).
        assert re.search(r"\\?\[\.xxx\\?\]", text)


def test_without_history_no_format_says_anything_of_it(marked: tuple[Path, str], tmp_path: Path) -> None:
    run, _ = marked
    for fmt in ("text", "json"):
        out = tmp_path / f"plain.{fmt}"
        assert main(["report", str(run), "--format", fmt, "-o", str(out), "--fail-on", "never"]) == 0
        text = out.read_text().lower()
        assert '"history"' not in text and "against the history" not in text


def test_the_json_marks_every_cell_and_case(marked: tuple[Path, str], tmp_path: Path) -> None:
    run, url = marked
    out = tmp_path / "r.json"
    assert main(["report", str(run), "--history", url, "--format", "json", "-o", str(out), "--fail-on", "never"]) == 0
    data = json.loads(out.read_text())
    assert all("history" in c for c in data["cells"]) and all("history" in c for c in data["cases"])
    states = {(c["cell"], c["case"]): (c["history"] or {}).get("state") for c in data["cases"]}
    assert states[("cand", "b")] == "recurring" and states[("cand", "c")] == "first-red"
    assert states[("cand", "a")] is None and states[("ctrl", "a")] is None


def test_fail_on_first_red_names_only_what_is_new(marked: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    run, url = marked
    assert main(["report", str(run), "--history", url, "--fail-on", "first-red", "--format", "json",
                 "-o", str(run / "r.json")]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("convmatrix: 1 first-red: cand@cpu c (against the history: 1 first-red")


def test_the_html_grid_separates_first_red_from_recurring_with_a_timeline(tmp_path: Path) -> None:
    """Issue 36: the grid itself marks a cell's history (first-red apart from recurring) and shows
    its last runs as a strip, oldest first."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    assert recorded(night(tmp_path, 1, broken=()), url) == 0
    for n, state in ((2, "first-red"), (3, "recurring")):
        run = night(tmp_path, n, broken=("b",))
        out = tmp_path / f"r{n}.html"
        assert main(["report", str(run), "--history", url, "--format", "html", "-o", str(out),
                     "--fail-on", "never"]) == 0
        grid = out.read_text().split('<table class="grid">', 1)[1].split("</table>", 1)[0]
        assert f'<span class="hist h-{state}">{state}</span>' in grid, grid
        strip = re.search(r'<span class="strip"[^>]*>(.*?)</span>', grid)
        assert strip is not None and strip[1].endswith('<i class="r"></i>') and strip[1].startswith('<i class="g"></i>')
        assert recorded(run, url) == 0


def outage(base: Path, n: int) -> Path:
    """Night n with a second candidate whose venv never installed (cell.json's cause: the index)."""
    from testkit import write_result

    run = night(base, n)
    ended = f"2026-11-{n:02d}T02:00:00+00:00"
    directory = write_result(run, "down", [], env=None, cell={"ended": ended, "exit_code": 255,
                                                                "error": "venv install failed",
                                                                "cause": {"cause": "index unreachable",
                                                                          "line": "dns error", "log": None,
                                                                          "line_no": None}})
    (directory / "results.jsonl").unlink()
    (directory / "env.json").unlink()
    return run


def test_an_outage_under_first_red_is_infrastructure_on_its_first_night_and_its_second(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review of issue 36: under --fail-on first-red a cell that did not run (a dead index) read
    first-red on the outage's first night (exit 1, a finding about no stack) and recurring on the
    next (exit 0: the outage unseen). The one verdict function now says 4 on both nights."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    assert recorded(night(tmp_path, 1), url) == 0
    for n in (2, 3):
        run = outage(tmp_path, n)
        code = main(["report", str(run), "--history", url, "--fail-on", "first-red", "--format", "json",
                     "-o", str(tmp_path / f"r{n}.json")])
        err = capsys.readouterr().err
        assert code == 4 and "did not run, for the infrastructure alone: down@cpu" in err, (n, code, err)
        assert recorded(run, url) == 0
