"""Issue 49, a history page: `convmatrix history --format html -o DIR` writes a static page of the
recorded cells x nights, coloured by verdict, first-red and flaky marked, each night linked through
--link, from SQLite or PostgreSQL, in the report's page shell (its escaping, its CSP, no script)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from convmatrix.cli.main import main
from historykit import night, recorded

LINK = "https://ci.example/{run}/report.html"
# cand's case b, night by night: green, green, red (first-red), green, red, green, red, green, red
PATTERN = ((), (), ("b",), (), ("b",), (), ("b",), (), ("b",))


def page(history_url: str, tmp_path: Path, *extra: str) -> str:
    out = tmp_path / "page"
    assert main(["history", "--history", history_url, "--format", "html", "-o", str(out), *extra]) == 0
    return (out / "index.html").read_text()


def squares(html: str, cell: str) -> list[str]:
    row = html.split(f'title="{cell}@cpu"', 1)[1].split("</tr>", 1)[0]
    return re.findall(r'<td class="([^"]*)"', row)


def test_the_page_is_cells_by_nights_coloured_with_first_red_and_flaky_marked(history_url: str,
                                                                             tmp_path: Path) -> None:
    for n, broken in enumerate(PATTERN, 1):
        assert recorded(night(tmp_path, n, broken), history_url) == 0
    html = page(history_url, tmp_path, "--link", LINK)
    cand, ctrl = squares(html, "cand"), squares(html, "ctrl")
    assert len(cand) == len(ctrl) == len(PATTERN)
    assert [c.split()[0] for c in cand] == ["v-ok" if not b else "v-regression" for b in PATTERN]
    assert all(c.split()[0] == "v-control" for c in ctrl)
    assert "first" in cand[2].split() and not any("first" in c.split() for i, c in enumerate(cand) if i != 2)
    assert "flaky" in cand[-1].split() and "flaky" not in cand[2].split()
    for n in range(1, len(PATTERN) + 1):
        assert f'href="https://ci.example/night-{n:03d}/report.html"' in html
    assert "first-red" in html and "flaky" in html  # the legend says what the marks mean


def test_the_page_has_the_reports_shell_and_escapes_what_it_shows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    assert main(["record", str(night(tmp_path, 1, ("a",))), "--history", url, "--run-id", "<b>x&y</b> 1"]) == 0
    html = page(url, tmp_path, "--link", LINK)
    assert "<b>x&amp;y" not in html and "&lt;b&gt;x&amp;amp;y" not in html
    assert "&lt;b&gt;x&amp;y&lt;/b&gt; 1" in html
    assert 'href="https://ci.example/%3Cb%3Ex%26y%3C%2Fb%3E%201/report.html"' in html
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', html)
    assert policy and "default-src 'none'" in policy[1] and "script-src 'none'" in policy[1]
    assert "<script" not in html


@pytest.mark.parametrize("link", ["javascript:alert(1)//{run}", "https://ci.example/report.html",
                                  "https://ci.example/{run}/{cell}", "data:text/html,{run}"])
def test_a_link_template_that_is_not_a_page_per_run_is_refused(tmp_path: Path, link: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    assert recorded(night(tmp_path, 1), url) == 0
    assert main(["history", "--history", url, "--format", "html", "-o", str(tmp_path / "p"), "--link", link]) == 2
    assert "--link" in capsys.readouterr().err and not (tmp_path / "p").exists()


def test_the_html_needs_a_folder_and_no_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    assert recorded(night(tmp_path, 1), url) == 0
    assert main(["history", "--history", url, "--format", "html"]) == 2
    assert main(["history", "cand", "--history", url, "--format", "html", "-o", str(tmp_path / "p")]) == 2
    assert main(["history", "--history", url, "--link", LINK]) == 2
    assert capsys.readouterr().err.count("convmatrix:") == 3


def test_an_empty_history_is_a_page_that_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    assert recorded(night(tmp_path, 1), url) == 0  # creates the schema
    html = page(url, tmp_path, "--limit", "1")
    assert "1 night" in html
