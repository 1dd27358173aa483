"""The history page (`convmatrix history --format html -o DIR`): every recorded cell (a series: its
cell, GPU key and host) as a row, the newest nights as columns, oldest first, each square coloured
by that night's verdict; a series' first red night is marked, and so is each night on which the
series is flaky by history/marks.py's rule (its last WINDOW runs flip often beyond chance). Each
night's header links to its report through an optional URL template (`--link
https://ci.example/{run}/report.html`).

A view of the history database (history/timeline.sheet), in the report's page shell
(report/html.document: the same escaping and Content-Security-Policy, and no script at all): a
run id or a cell id that holds markup stays text. Static: one file, nothing fetched."""

from __future__ import annotations

import itertools
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from convmatrix.errors import BadInput
from convmatrix.escape import html_cell
from convmatrix.history import marks
from convmatrix.history.timeline import Sheet, Square
from convmatrix.matrix.cells import abbreviate
from convmatrix.report.html import asset, document

PLACEHOLDER = "{run}"
_VERDICT = re.compile(r"[a-z][a-z-]{0,30}")
CSS = """
table.nights { border-collapse: separate; border-spacing: 1px; font-size: 12px; }
table.nights th { font-weight: 400; text-align: left; white-space: nowrap; padding: 0 0.4rem 0 0; }
table.nights thead th.night { writing-mode: vertical-rl; transform: rotate(180deg); padding: 0.2rem 0;
  font-size: 10px; }
table.nights thead th.night a { color: inherit; text-decoration: none; }
table.nights thead th.night a:hover, table.nights thead th.night a:focus-visible { text-decoration: underline; }
table.nights tbody th .gpu { color: var(--muted); margin-left: 0.4rem; }
table.nights td { width: 10px; min-width: 10px; height: 16px; padding: 0; border-radius: 2px; text-align: center;
  font-size: 10px; line-height: 16px; font-weight: 700; }
table.nights td.none { background: transparent; }
table.nights td.unjudged { opacity: 0.45; }
table.nights td.first { box-shadow: inset 0 0 0 2px var(--regression-fg); }
table.nights td.first::after { content: "!"; }
table.nights td.flaky:not(.first)::after { content: "~"; }
.scroll { overflow-x: auto; padding-bottom: 0.5rem; }
ul.key { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 0.3rem 1rem; }
ul.key span { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 0.3rem;
  vertical-align: -2px; text-align: center; font-size: 10px; line-height: 12px; font-weight: 700; }
"""


def check_link(template: str) -> str:
    """--link: an http(s) URL, or a path relative to the page, holding {run} and no other field
    (a run's page; `javascript:` or `data:` would run in the reader's browser)."""
    fields = re.findall(r"\{[^{}]*\}", template)
    scheme = urllib.parse.urlsplit(template.replace(PLACEHOLDER, "run")).scheme
    if fields != [PLACEHOLDER] or scheme not in ("", "http", "https") or len(template) > 500:
        raise BadInput(f"--link {template[:200]!r}: give a URL template with {PLACEHOLDER} once and no other "
                       "field, http(s) or relative, e.g. https://ci.example/{run}/report.html")
    return template


@dataclass(frozen=True, kw_only=True)
class Series:
    cell: str
    gpu_key: str
    host: str

    @property
    def where(self) -> str:
        return f"{self.cell}@{self.gpu_key}" + (f"@{self.host}" if self.host else "")


def squares_of(sheet: Sheet) -> dict[Series, dict[str, Square]]:
    found: dict[Series, dict[str, Square]] = {}
    for square in sheet.squares:
        found.setdefault(Series(cell=square.cell, gpu_key=square.gpu_key, host=square.host), {})[square.run] = square
    return dict(sorted(found.items(), key=lambda item: (item[0].cell, item[0].gpu_key, item[0].host)))


def flags(reds: Sequence[bool], red_before: bool) -> list[tuple[bool, bool]]:
    """Per night of a series (oldest first): (first-red, flaky). First-red: red, and never red
    before (red_before: red in a night older than the page's); flaky: history/marks.judge's rule
    over the series' last WINDOW runs to that night."""
    out = []
    seen = red_before
    # flipped[i]: flips among the first i+1 nights; a window's flips are a difference of two (a
    # year of nights is then linear, not a window's sum per night).
    flipped = [0, *itertools.accumulate(int(a != b) for a, b in itertools.pairwise(reds))]
    for i, red in enumerate(reds):
        size = min(i + 1, marks.WINDOW)
        flips = flipped[i] - flipped[i + 1 - size]
        flaky = flips >= marks.MIN_FLIPS and marks.wilson_lower(flips, size - 1) >= marks.FLAKY_BOUND
        out.append((red and not seen, flaky))
        seen = seen or red
    return out


def render(sheet: Sheet, *, link: str | None = None, source: str = "") -> str:
    series = squares_of(sheet)
    runs = [run for run, _ in sheet.nights]
    heads = []
    for run, at in sheet.nights:
        day = at[:10]
        text = f"{day} {run}" if run != day else day
        target = link.replace(PLACEHOLDER, urllib.parse.quote(run, safe="")) if link else None
        inner = (f'<a href="{html_cell(target)}" rel="noreferrer">{html_cell(text)}</a>' if target
                 else html_cell(text))
        heads.append(f'<th scope="col" class="night" title="{html_cell(run)}: {html_cell(at[:19])}">{inner}</th>')
    rows = []
    reds = firsts = flaky_now = 0
    for place, by_run in series.items():
        present = [by_run[run] for run in runs if run in by_run]
        marked = dict(zip((s.run for s in present),
                          flags([s.red for s in present], (place.cell, place.gpu_key, place.host) in sheet.red_before),
                          strict=True))
        tds = []
        for run in runs:
            square = by_run.get(run)
            if square is None:
                tds.append('<td class="none"></td>')
                continue
            first, flaky = marked[run]
            verdict = square.verdict if _VERDICT.fullmatch(square.verdict) else "other"
            classes = [f"v-{verdict}", *(["first"] if first else []), *(["flaky"] if flaky else []),
                       *(["unjudged"] if square.unjudged else [])]
            tds.append(f'<td class="{" ".join(classes)}"></td>')
            reds += square.red
            firsts += first
        last = present[-1].run if present else None
        flaky_now += bool(last and marked[last][1])
        rows.append(f'<tr><th scope="row" title="{html_cell(place.where)}">{html_cell(abbreviate(place.cell))}'
                    f'<span class="gpu">{html_cell(place.gpu_key)}{"@" + html_cell(place.host) if place.host else ""}'
                    f"</span></th>{''.join(tds)}</tr>")
    span = f"{sheet.nights[0][1][:10]} to {sheet.nights[-1][1][:10]}" if sheet.nights else "nothing recorded"
    summary = (f"{len(series)} cell(s) over {len(runs)} night(s) ({span}): {reds} red square(s), "
               f"{firsts} first-red, {flaky_now} cell(s) flaky on their last night")
    body = ["<header>", "<h1>convmatrix history</h1>",
            f'<p class="sub">{html_cell(summary)}' + (f" · <code>{html_cell(source)}</code>" if source else "")
            + "</p>", "</header>", '<section id="history-grid">', "<h2>Cells × nights</h2>", *key(),
            '<div class="scroll"><table class="nights">',
            f'<thead><tr><th scope="col">cell</th>{"".join(heads)}</tr></thead>', "<tbody>", *rows,
            "</tbody></table></div>", "</section>"]
    return document("convmatrix history", body, css=asset("report.css") + CSS)


def key() -> list[str]:
    words = (("v-ok", "", "ok"), ("v-regression", "", "regression (red)"), ("v-invalid", "", "invalid"),
             ("v-not-run", "", "not run"), ("v-control", "", "control"),
             ("v-regression first", "!", "first-red: the cell's first red night"),
             ("v-regression flaky", "~", "flaky: flips between red and green beyond chance (history/marks.py)"))
    items = "".join(f'<li><span class="{cls}">{mark}</span>{html_cell(text)}</li>' for cls, mark, text in words)
    return [f'<ul class="key">{items}<li>faded: not judged that night</li></ul>',
            '<p class="hint">A column per night, oldest first; its header links to that night\'s report.</p>']
