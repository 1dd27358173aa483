"""The atlas as a static, self-contained site (docs/atlas.md): index.html (the grid of stacks
by GPU generation, the rows from published sources, the fleets that disagree, filters and a search
in a little JS), a page per stack x column x failure family under pages/, each failing case's
repro script under repro/, and the same data as atlas.json and atlas.csv. No server, no network:
the pages open from disk, and a Content-Security-Policy lets only their own style and script (by
hash) run, as the html report does.

Every string from a bundle is untrusted (another fleet wrote it): it reaches the html through
escape.html_cell only (text and attribute values alike), a link only when it is an https URL of
printable ASCII (results/read.SOURCE), a file name never (pages and scripts are named by digest),
the CSV with a leading = + - @ tab or CR neutralised (a spreadsheet would run it as a formula), the
JSON through json.dumps with ASCII escapes. A repro script is written by prove/repro.py, which
writes into code only values it checked and free text into comments only."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from convmatrix import jsonread, tree
from convmatrix.atlas.bundle import URL
from convmatrix.atlas.merge import FAIL, OTHER, PASS, Atlas, AtlasCell, Column, Row, Seen, Tally, family_of
from convmatrix.atlas.model import Repro, Stack
from convmatrix.atlas.sources import Source, bounds, covers_capability, version_key
from convmatrix.errors import BadInput
from convmatrix.escape import html_cell, one_line
from convmatrix.matrix import stacks as stack_facts
from convmatrix.matrix.stacks import cudnn_int
from convmatrix.prove import repro as repro_script
from convmatrix.report.html import document
from convmatrix.results.read import SOURCE

FORMAT = "convmatrix-atlas"
VERSION = 1
INDEX, JSON_FILE, CSV_FILE, PAGES, REPROS = "index.html", "atlas.json", "atlas.csv", "pages", "repro"
SHOWN_FLEETS = 4  # fleets a grid cell names one by one; the rest are counted (a page lists all)
SHOWN_FAMILIES = 3
SEARCH_CASES = 40  # failing case ids a row carries for the search
# Rows the table holds at once (a filter's first matches; a button shows more): laying out rows is
# most of a filter's time, 300 rows some 170 ms and 10,000 seconds (bench/atlas.py). site.js's SHOWN.
SHOWN_ROWS = 150
ROW_FIELDS = ("torch", "cudnn key", "families", "generations", "search", "html")  # a measured row's data
_CSV_FORMULA = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Page:
    """A stack x column x family page: where it is, for the grid to link."""

    row: Row
    column: Column
    family: str

    @property
    def name(self) -> str:
        """A file name made of safe characters only, unique by digest (the strings are untrusted)."""
        key = json.dumps([self.row.torch, self.row.cuda, self.row.cudnn, self.column.capability, self.column.mig,
                          self.family])
        words = re.sub(r"[^a-z0-9.]+", "-", f"{self.column.generation}-{self.family}".lower()).strip("-.")[:40]
        return f"{words}-{hashlib.sha256(key.encode()).hexdigest()[:10]}.html"


# --- the files ------------------------------------------------------------------------------------

def publish(path: Path, atlas: Atlas, sources: tuple[Source, ...], *, refused: int = 0) -> int:
    """The site written into the folder at path (made when missing), through tree.Tree: every file
    whole or not at all, never through a link. The folder must be new, empty, or an atlas this
    command wrote (its atlas.json says so): its pages/ and repro/ are replaced, nothing else of a
    folder the user named is removed. Returns the number of files written."""
    built = list(files(atlas, sources, refused=refused))  # all made first: a failure writes nothing
    where = one_line(str(path))  # a folder name may hold a line break: the message stays one line
    try:
        with tree.Tree.open(path, create=True) as root:
            if root.entries() and not is_site(root):
                raise BadInput(f"-o {where}: holds files that are not an atlas; name a new or empty folder, "
                               "or one a previous `convmatrix atlas` wrote")
            for folder in (PAGES, REPROS):
                if root.lstat(folder) is not None:
                    root.remove(folder)
            with root.sub(PAGES, create=True) as pages, root.sub(REPROS, create=True) as repros:
                into = {"": root, PAGES: pages, REPROS: repros}
                for folder, name, content in built:
                    into[folder].write(name, content)
    except OSError as exc:  # tree.Refused among them: a link, a file where the folder should be
        raise BadInput(f"-o {where}: cannot write the site ({one_line(str(exc.strerror or exc))})") from None
    return len(built)


def is_site(root: tree.Tree) -> bool:
    """Whether the folder holds an atlas this command wrote: its atlas.json names the format."""
    try:
        found = jsonread.loads(root.read(JSON_FILE, jsonread.MAX_BYTES), max_depth=16)
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and found.get("format") == FORMAT


def files(atlas: Atlas, sources: tuple[Source, ...], *, refused: int = 0) -> Iterator[tuple[str, str, bytes]]:
    """(folder or "", file name, bytes) for every file of the site."""
    repros: dict[str, bytes] = {}
    pages: dict[tuple[Row, Column, str], Page] = {}
    for (row, column), cell in atlas.cells.items():
        for family in cell.families:
            pages[(row, column, family)] = Page(row, column, family)
    known = {s.issue.id: s for s in sources}
    for page in pages.values():
        cell = atlas.cells[(page.row, page.column)]
        yield PAGES, page.name, case_page(page, cell, known, repros).encode()
    for name, script in sorted(repros.items()):
        yield REPROS, name, script
    yield "", INDEX, index(atlas, sources, pages, refused).encode()
    yield "", JSON_FILE, (json.dumps(data(atlas, sources, pages, refused), indent=1, sort_keys=True,
                                      ensure_ascii=True) + "\n").encode()
    yield "", CSV_FILE, table(atlas, sources).encode()


def asset(name: str) -> str:
    return (resources.files("convmatrix.atlas") / name).read_text(encoding="utf-8")


def link(url: str, text: str, cls: str = "") -> str:
    """An http(s) link (bundle.URL: no quote, no angle bracket), or the text alone: nothing else
    (javascript:, data:) becomes an href."""
    shown = html_cell(text)
    if not URL.fullmatch(url):
        return shown
    extra = f' class="{cls}"' if cls else ""
    return f'<a{extra} href="{html_cell(url)}" rel="noopener noreferrer">{shown}</a>'


def by_fleet(cell: AtlasCell) -> list[Tally]:
    return sorted(cell.tallies.values(), key=lambda t: t.fleet)


def generation_name(column: Column) -> str:
    name = stack_facts.load().generation(column.capability) if re.fullmatch(r"[0-9]{1,2}\.[0-9]{1,2}",
                                                                           column.capability) else "unknown"
    return "" if name == "unknown" else name


# --- index.html -----------------------------------------------------------------------------------

def index(atlas: Atlas, sources: tuple[Source, ...], pages: dict[tuple[Row, Column, str], Page],
          refused: int) -> str:
    columns = atlas.columns
    generations = sorted({c.generation for c in columns}, key=lambda g: int(g[2:]) if g[2:].isdigit() else 0)
    gen_index = {g: i for i, g in enumerate(generations)}
    css = asset("site.css") + "\n" + "\n".join(
        f'table.atlas.gsel-{i} [data-g]:not([data-g="{i}"]) {{ display: none; }}' for i in range(len(generations)))
    families = sorted({f for cell in atlas.cells.values() for f in cell.families}
                      | {f for s in sources for f in s.issue.families})
    measured = [grid_row(atlas, row, columns, gen_index, pages) for row in atlas.rows]
    torches = sorted({r.torch for r in atlas.rows if r.torch}, key=lambda t: version_key(t) or 0)
    body = [
        "<header>", "<h1>convmatrix atlas</h1>",
        f'<p class="sub">{len(atlas.fleets)} fleet(s), {atlas.bundles} bundle(s), {len(atlas.runs)} run(s); '
        f"{len(atlas.rows)} stack(s) on {len(columns)} GPU column(s); {len(sources)} row(s) from published "
        f'sources. Data: <a href="{JSON_FILE}">{JSON_FILE}</a>, <a href="{CSV_FILE}">{CSV_FILE}</a>.</p>',
        *([f'<p class="warn">{refused} bundle(s) could not be read and are not in this atlas.</p>'] if refused else []),
        *([f'<p class="warn">{len(atlas.conflicts)} run(s) given with different contents by two bundles or more: '
           'neither copy is in this atlas (<a href="#conflicts">which</a>).</p>'] if atlas.conflicts else []),
        "</header>", *conflicts(atlas),
        '<section id="filters" class="filters">',
        '<label>GPU generation <select id="f-gen"><option value="">all</option>'
        + "".join(f'<option value="{i}">{html_cell(g)}</option>' for g, i in gen_index.items()) + "</select></label>",
        '<label>torch <select id="f-torch"><option value="">all</option>'
        + "".join(f'<option value="{html_cell(t)}">{html_cell(t)}</option>' for t in torches) + "</select></label>",
        '<label>cuDNN from <input id="f-cudnn-min" size="7" placeholder="9.1"> to '
        '<input id="f-cudnn-max" size="7" placeholder="9.10"></label>',
        '<label>family <select id="f-family"><option value="">all</option>'
        + "".join(f'<option value="{html_cell(f)}">{html_cell(f)}</option>' for f in families) + "</select></label>",
        '<label>search <input id="f-search" type="search" size="24" placeholder="case, fleet, sub-code"></label>',
        '<span class="hint"><span id="shown">0</span> row(s) match</span>',
        "</section>",
        '<table class="atlas grid" id="atlas">', "<thead><tr><th class=\"stack\">stack (torch · CUDA · cuDNN)</th>",
        *[f'<th data-g="{gen_index[c.generation]}" class="col">{html_cell(c.generation)}'
          f'<span class="gen">{html_cell(c.mig or generation_name(c))}</span></th>' for c in columns],
        "</tr></thead>", '<tbody id="measured">',
        # Without JS the first rows are here; site.js draws the rows the filters leave from the data block.
        *[str(r[-1]) for r in measured[:SHOWN_ROWS]],
        *([f'<tr class="group"><th colspan="{len(columns) + 1}">{len(measured) - SHOWN_ROWS} more row(s): '
           f"the page lists them with JavaScript on; {CSV_FILE} has them all</th></tr>"]
          if len(measured) > SHOWN_ROWS else []),
        "</tbody>", '<tbody id="sources">',
        f'<tr class="group"><th colspan="{len(columns) + 1}">From published sources (not measured: what a '
        "release note, an issue or a packager says; the GPU columns its capability range covers)</th></tr>",
        *[source_row(source, columns, gen_index) for source in sources],
        "</tbody>", "</table>",
        f'<p><button id="more" type="button" hidden>show {SHOWN_ROWS} more</button></p>',
        data_block("rows", measured), *legend(), *disagreements(atlas, pages), *notes(atlas),
    ]
    return document("convmatrix atlas", body, css=css, js=asset("site.js"))


def legend() -> list[str]:
    return ['<p class="legend">',
            '<span class="badge s-fail">fail</span> every fleet\'s runs failed a case',
            '<span class="badge s-pass">pass</span> every fleet\'s runs passed',
            '<span class="badge s-flaky">flaky</span> a fleet saw both',
            '<span class="badge s-disagree">disagree</span> fleets differ: each shown',
            '<span class="badge s-other">other</span> did not run or complete',
            '<span class="badge s-source">source</span> published, not measured', "</p>"]


def grid_row(atlas: Atlas, row: Row, columns: list[Column], gen_index: dict[str, int],
             pages: dict[tuple[Row, Column, str], Page]) -> list[str | int]:
    """A measured row: what the filters read of it, and its html (escaped here, once), which
    site.js puts in the table when the row is among those shown."""
    cells = [atlas.cells.get((row, column)) for column in columns]
    present = [c for c in cells if c is not None]
    families = sorted({f for c in present for f in c.families})
    words = dict.fromkeys([
        row.label, *families, *(str(s) for c in present for s in c.subcodes), *(f for c in present for f in c.tallies),
        *(c.column.key for c in present),
        *sorted({k for c in present for seen in c.cases.values() for s in seen for k in s.case.known}),
        *sorted({case for c in present for case, seen in c.cases.items()
                 if any(s.failing for s in seen)})[:SEARCH_CASES]])
    html = "".join([f"<tr class='row measured'><th>{html_cell(row.label)}</th>",
                    *(f"<td data-g='{gen_index[column.generation]}' class='c empty'></td>" if cell is None
                      else grid_cell(cell, gen_index[column.generation], pages)
                      for column, cell in zip(columns, cells, strict=True)), "</tr>"])
    # A list, not an object: ROW_FIELDS names its items (site.js reads them by place), and 10,000
    # rows do not repeat six keys each.
    return [row.torch or "", version_key(row.cudnn) or 0, f" {' '.join(families)} ",
            f" {' '.join(sorted({str(gen_index[c.column.generation]) for c in present}))} ",
            one_line(" ".join(words)).lower(), html]


def data_block(element_id: str, value: object) -> str:
    """JSON inside the page, as a data block (type application/json: never run, so outside the
    CSP's script hashes), with nothing left that ends the element or opens a comment (the page is
    UTF-8; JSON.parse takes U+2028 and U+2029 in strings)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    # In a script element only "</" (which may end it) and "<!--" (which changes how its end is
    # found) matter (HTML, "script data" states); JSON allows "\\/" in a string, and outside
    # strings it has no "<". Escaping every "<" instead made a 10,000-row page a third larger.
    text = text.replace("</", "<\\/").replace("<!--", "\\u003c!--")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def grid_cell(cell: AtlasCell, g: int, pages: dict[tuple[Row, Column, str], Page]) -> str:
    """One cell, as small as it reads: a 10,000-row atlas holds 40,000 of them (bench/atlas.py), and
    the page's size is most of its load time. Single-quoted attributes (html_cell escapes ' too), so
    the row's html needs no escaping in the JSON block; <i> is the sub-code line, <small> the dates."""
    tallies = sorted(cell.tallies.values(), key=lambda t: (t.status != FAIL, t.fleet))
    parts = [f"<b class='s-{t.status}'>{html_cell(t.fleet)} {t.count(FAIL)}✗{t.count(PASS)}✓"
             f"{f'{t.count(OTHER)}·' if t.count(OTHER) else ''}</b>" for t in tallies[:SHOWN_FLEETS]]
    if len(tallies) > SHOWN_FLEETS:
        parts.append(f"<b>+{len(tallies) - SHOWN_FLEETS} fleet(s)</b>")
    parts += [f"<a href='{PAGES}/{pages[(cell.row, cell.column, f)].name}'>{html_cell(f)}</a>×{n} "
              for f, n in cell.families.most_common(SHOWN_FAMILIES)]
    if len(cell.families) > SHOWN_FAMILIES:
        parts.append(f"+{len(cell.families) - SHOWN_FAMILIES}")
    if cell.subcodes:
        parts.append(f"<i>sub-code {', '.join(str(code) for code, _ in cell.subcodes.most_common(3))}</i>")
    lines = loaded_lines(cell)
    if lines:  # what its cells loaded where it differs from what they installed (issue 47)
        more = f" (+{len(lines) - 1} other)" if len(lines) > 1 else ""
        parts.append(f"<i class='lib'>libraries: {html_cell(lines[0])}{more}</i>")
    first, last = cell.first, cell.last
    parts.append(f"<small>{html_cell(first)}{'–' + html_cell(last) if last != first else ''}</small>")
    return f"<td data-g='{g}' class='c s-{cell.status}'>{''.join(parts)}</td>"


def loaded_lines(cell: AtlasCell) -> list[str]:
    """The cell's library lines (merge.libraries_line), the one most runs said first."""
    runs: dict[str, int] = {}
    for tally in cell.tallies.values():
        for line, ids in tally.libraries.items():
            runs[line] = runs.get(line, 0) + len(ids)
    return sorted(runs, key=lambda line: (-runs[line], line))


def source_row(source: Source, columns: list[Column], gen_index: dict[str, int]) -> str:
    issue = source.issue
    torch_lo, torch_hi = bounds(issue.torch)
    cudnn_lo, cudnn_hi = bounds(issue.cudnn)
    covered = [c for c in columns if covers_capability(issue, c.capability)]
    attributes = {
        "tlo": str(torch_lo), "thi": str(torch_hi), "clo": str(cudnn_lo), "chi": str(cudnn_hi),
        "families": " ".join(issue.families),
        "gens": " ".join(sorted({str(gen_index[c.generation]) for c in covered})),
        "search": one_line(" ".join([issue.id, issue.summary, source.ranges, *issue.families,
                                     issue.conditions])).lower(),
    }
    shown = " ".join(f'data-{k}="{html_cell(v)}"' for k, v in attributes.items())
    head = (f'<th title="{html_cell(issue.summary)}"><span class="badge s-source">source</span>'
            f"{link(issue.source, issue.id)}"
            f'<span class="ranges">{html_cell(source.ranges)}'
            f'{"; " + html_cell(issue.conditions) if issue.conditions else ""}'
            f'{"; families " + html_cell("/".join(issue.families)) if issue.families else ""}</span>'
            f'<details><summary>what it says</summary>{html_cell(issue.summary)}</details></th>')
    tds = [f'<td data-g="{gen_index[c.generation]}" class="c {"s-source" if c in covered else "empty"}">'
           f'{"source" if c in covered else ""}</td>' for c in columns]
    return f'<tr class="row source" {shown}>{head}{"".join(tds)}</tr>'


def disagreements(atlas: Atlas, pages: dict[tuple[Row, Column, str], Page]) -> list[str]:
    split = [cell for _, cell in sorted(atlas.cells.items(), key=lambda kv: (kv[0][0].sort_key(), kv[0][1].sort_key()))
             if cell.disagree]
    out = ['<section id="disagreements">', "<h2>Where fleets disagree</h2>"]
    if not split:
        return [*out, '<p class="hint">No stack and GPU where one fleet fails and another passes.</p>', "</section>"]
    out.append('<table class="sides"><thead><tr><th>stack</th><th>GPU</th><th>fleets, side by side</th></tr>'
               "</thead><tbody>")
    for cell in split:
        sides = "".join(
            f'<div class="side s-{t.status}"><b>{html_cell(t.fleet)}</b> {t.status}: {t.count(FAIL)} of '
            f"{len(t.runs)} run(s) failed"
            + (f" ({html_cell(', '.join(f'{f} ×{n}' for f, n in t.families.most_common(3)))})" if t.families else "")
            + f"; {html_cell(t.first)} to {html_cell(t.last)}</div>"
            for t in by_fleet(cell))
        fams = " ".join(f'<a href="{PAGES}/{pages[(cell.row, cell.column, f)].name}">{html_cell(f)}</a>'
                        for f in sorted(cell.families))
        out.append(f"<tr><td>{html_cell(cell.row.label)}</td><td>{html_cell(cell.column.key)}</td>"
                   f'<td><div class="sidebyside">{sides}</div>{fams}</td></tr>')
    return [*out, "</tbody></table>", "</section>"]


def conflicts(atlas: Atlas) -> list[str]:
    """The runs two bundles claim with different contents: named with their bundles, never shown as data."""
    if not atlas.conflicts:
        return []
    return ['<section id="conflicts">', "<h2>Runs given with different contents</h2>",
            '<p class="hint">Each run below (a fleet\'s label and run id) is claimed by bundles that disagree on '
            "what it holds: one of them is wrong, perhaps forged, and the atlas cannot tell which, so it counts and "
            "shows neither.</p>",
            '<table class="sides conflicts"><thead><tr><th>fleet</th><th>run</th><th>bundles</th></tr></thead><tbody>',
            *(f"<tr><td>{html_cell(c.fleet)}</td><td><code>{html_cell(c.run)}</code></td>"
              f"<td>{'<br>'.join(html_cell(name) for name in c.bundles)}</td></tr>" for c in atlas.conflicts),
            "</tbody></table>", "</section>"]


def notes(atlas: Atlas) -> list[str]:
    if not atlas.notes:
        return []
    return ['<section id="notes">', "<h2>Notes</h2>", "<ul>", *(f"<li>{html_cell(n)}</li>" for n in atlas.notes),
            "</ul>", "</section>"]


# --- a case page ------------------------------------------------------------------------------------

def case_page(page: Page, cell: AtlasCell, known: dict[str, Source], repros: dict[str, bytes]) -> str:
    cases = cell.failing_cases(page.family)
    title = f"{page.row.label} on {page.column.key}: {page.family}"
    ids = sorted({k for seen in cases.values() for s in seen for k in s.case.known})
    body = ["<header>", '<p class="sub"><a href="../index.html">← the atlas</a></p>', f"<h1>{html_cell(title)}</h1>",
            f'<p class="sub">{html_cell(generation_name(page.column))} · {len(cases)} case(s) failed with '
            f"{html_cell(page.family)} in some run; every run's record of each is listed, passing ones too "
            "(fleets that disagree stand side by side).</p>", "</header>",
            "<h2>Fleets</h2>", '<div class="sidebyside">',
            *(f'<div class="side s-{t.status}"><b>{html_cell(t.fleet)}</b> {t.status}: {t.count(FAIL)} failed, '
              f"{t.count(PASS)} passed, {t.count(OTHER)} other; {html_cell(t.first)} to {html_cell(t.last)}; "
              f"{html_cell(', '.join(sorted(t.models)))}"
              + "".join(f"; libraries: {html_cell(line)} ({len(ids)} run(s))"
                        for line, ids in sorted(t.libraries.items()))
              + "</div>" for t in by_fleet(cell)),
            "</div>"]
    if ids:
        body += ["<h2>Known issues</h2>", "<ul>"]
        for ident in ids:
            source = known.get(ident)
            body.append(f"<li>{link(source.issue.source, ident)}: {html_cell(source.issue.summary)} "
                        f"(fixed in {html_cell(source.issue.fixed_in or 'not fixed upstream')}; workaround: "
                        f"{html_cell(source.issue.workaround)})</li>" if source else
                        f"<li>{html_cell(ident)} (not among the known issues this atlas carries)</li>")
        body.append("</ul>")
    body += ["<h2>Cases</h2>", '<table class="cases"><thead><tr><th>case</th><th>fleet</th><th>run</th><th>GPU</th>'
             "<th>verdict</th><th>outcome</th><th>family</th><th>sub-code</th><th>reason</th><th>known</th>"
             "<th>sources</th><th>repro</th></tr></thead><tbody>"]
    for case_id, seen in cases.items():
        badge, split = case_badge(seen)
        for index_, s in enumerate(seen):
            head = (f'<th rowspan="{len(seen)}" class="{"split" if split else ""}"><code>{html_cell(case_id)}</code>'
                    f"{badge}</th>" if index_ == 0 else "")
            body.append(f'<tr class="{"s-fail" if s.failing else "s-pass"}">{head}' + "".join(
                f"<td>{part}</td>" for part in case_cells(s, known, repros)) + "</tr>")
    body += ["</tbody></table>"]
    return document(title, body, css=asset("site.css"))


def case_badge(seen: list[Seen]) -> tuple[str, bool]:
    """`disagree` when a fleet failed the case where another fleet only passed it; `mixed` when the
    failing and passing records are one fleet's (two nights, or two knob sets of one run: a bundle
    keeps no knob set but a failing case's repro's)."""
    failed = {s.fleet for s in seen if s.failing}
    passed = {s.fleet for s in seen if not s.failing and s.case.outcome == "pass"}
    if failed and passed - failed:
        return '<span class="badge s-disagree">disagree</span>', True
    if failed & passed:
        return '<span class="badge s-flaky">mixed</span>', False
    return "", False


def case_cells(seen: Seen, known: dict[str, Source], repros: dict[str, bytes]) -> list[str]:
    case = seen.case
    gpu = f"{seen.gpu.model} ({seen.gpu.capability}{', MIG ' + seen.gpu.mig if seen.gpu.mig else ''})"
    known_links = ", ".join(link(known[k].issue.source, k) if k in known else html_cell(k) for k in case.known)
    source_links = " ".join(link(url, f"[{i}]") for i, url in enumerate(case.sources, 1))
    return [html_cell(seen.fleet), f"{html_cell(seen.run[:16])}<br>{html_cell(seen.date)}", html_cell(gpu),
            html_cell(case.verdict), html_cell(case.outcome), html_cell(family_of(case) if seen.failing else ""),
            html_cell("" if case.subcode is None else str(case.subcode)), html_cell(case.reason or ""),
            known_links, source_links, repro_link(seen, repros) if seen.failing else ""]


def repro_link(seen: Seen, repros: dict[str, bytes]) -> str:
    if seen.case.repro is None:
        return '<span class="norepro">no repro: the bundle carries no repro fields for this case</span>'
    try:
        script = repro_text(seen, seen.case.repro).encode()
    except (BadInput, ValueError) as exc:
        return f'<span class="norepro">no repro: {html_cell(str(exc))}</span>'
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", seen.case.case).strip("._")[:100] or "case"
    name = f"repro-{safe}-{hashlib.sha256(script).hexdigest()[:10]}.py"
    repros[name] = script
    return f'<a href="../{REPROS}/{name}" download="{name}">repro script</a>'


def repro_text(seen: Seen, repro: Repro) -> str:
    """prove/repro.py's script of the case, built from the bundle's repro fields and observed stack."""
    line = {"case": seen.case.case, "params": dict(repro.params),
            "shapes": dict(repro.shapes) if repro.shapes is not None else None, "knobs": dict(repro.knobs),
            "device": repro.device}
    env = environment(seen.stack, seen.gpu.model, seen.gpu.capability, repro.device)
    spec = repro_script.spec_of(line, env, repro.device if repro.device in repro_script.DEVICES else None)
    where = repro_script.Provenance(
        run=f"fleet {seen.fleet}, run {seen.run} of {seen.date} (a convmatrix atlas bundle)",
        cell=f"{seen.stack.lane} lane on {seen.gpu.model} ({seen.gpu.capability}"
             f"{', MIG ' + seen.gpu.mig if seen.gpu.mig else ''})",
        status=seen.case.outcome, message=seen.case.reason or "",
        sources=tuple(u for u in seen.case.sources if SOURCE.fullmatch(u))[:8], env=env, requested={})
    return repro_script.script(spec, where)


def environment(stack: Stack, model: str, capability: str, device: str) -> dict[str, object]:
    """What the script's header reads of env.json, from the bundle's observed stack."""
    try:
        cudnn: object = cudnn_int(stack.cudnn) if stack.cudnn else None
    except ValueError:
        cudnn = None
    return {"torch": stack.torch, "cuda": stack.cuda, "cudnn": cudnn, "driver": stack.driver,
            "gpus": [{"name": model, "capability": capability}], "device": device,
            "python": "(not in the bundle)", "platform": "(not in the bundle)"}


# --- atlas.json and atlas.csv ---------------------------------------------------------------------

def data(atlas: Atlas, sources: tuple[Source, ...], pages: dict[tuple[Row, Column, str], Page],
         refused: int) -> dict[str, object]:
    cells = []
    for (row, column), cell in sorted(atlas.cells.items(), key=lambda kv: (kv[0][0].sort_key(), kv[0][1].sort_key())):
        cells.append({
            "torch": row.torch, "cuda": row.cuda, "cudnn": row.cudnn, "column": column.key,
            "capability": column.capability, "mig": column.mig, "status": cell.status,
            "runs": {FAIL: cell.runs(FAIL), PASS: cell.runs(PASS), OTHER: cell.runs(OTHER)},
            "families": dict(cell.families), "subcodes": {str(k): v for k, v in cell.subcodes.items()},
            "first": cell.first, "last": cell.last,
            "pages": {f: f"{PAGES}/{pages[(row, column, f)].name}" for f in sorted(cell.families)},
            "fleets": [{"fleet": t.fleet, "status": t.status,
                        "runs": {FAIL: t.count(FAIL), PASS: t.count(PASS), OTHER: t.count(OTHER)},
                        "families": dict(t.families), "subcodes": {str(k): v for k, v in t.subcodes.items()},
                        "first": t.first, "last": t.last, "models": sorted(t.models),
                        "libraries": {line: sorted(ids) for line, ids in sorted(t.libraries.items())}}
                       for t in by_fleet(cell)],
            "failing_cases": {case: [{"fleet": s.fleet, "run": s.run, "date": s.date, "verdict": s.case.verdict,
                                      "outcome": s.case.outcome, "family": s.case.family, "subcode": s.case.subcode,
                                      "reason": s.case.reason, "known": list(s.case.known)} for s in seen]
                              for case, seen in sorted(cell.cases.items()) if any(s.failing for s in seen)},
        })
    return {
        "format": FORMAT, "version": VERSION, "fleets": list(atlas.fleets), "bundles": atlas.bundles,
        "refused": refused, "notes": list(atlas.notes),
        "runs": [{"fleet": fleet, "run": run, "date": date} for (fleet, run), date in atlas.runs.items()],
        "conflicts": [{"fleet": c.fleet, "run": c.run, "bundles": list(c.bundles)} for c in atlas.conflicts],
        "columns": [{"key": c.key, "generation": c.generation, "capability": c.capability, "mig": c.mig,
                     "name": generation_name(c)} for c in atlas.columns],
        "cells": cells,
        "sources": [{"id": s.issue.id, "from": s.origin, "link": s.issue.source, "summary": s.issue.summary,
                     "fixed_in": s.issue.fixed_in, "workaround": s.issue.workaround, "families": list(s.issue.families),
                     "ranges": s.ranges, "conditions": s.issue.conditions,
                     "columns": [c.key for c in atlas.columns if covers_capability(s.issue, c.capability)]}
                    for s in sources],
    }


CSV_HEADER = ("kind", "torch", "cuda", "cudnn", "column", "capability", "mig", "fleet", "status", "runs_failed",
              "runs_passed", "runs_other", "families", "subcodes", "first_seen", "last_seen", "id", "link", "summary")


def csv_cell(value: object) -> str:
    """One field, one line, inert in a spreadsheet: a leading = + - @ tab or CR (a formula to
    Excel, LibreOffice and Sheets) gets a ' before it (OWASP, "CSV Injection")."""
    text = one_line("" if value is None else str(value))
    return "'" + text if text.startswith(_CSV_FORMULA) else text


def table(atlas: Atlas, sources: tuple[Source, ...]) -> str:
    """A row per stack x column x fleet (kind "measured"), then a row per published fact (kind "source")."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for (row, column), cell in sorted(atlas.cells.items(), key=lambda kv: (kv[0][0].sort_key(), kv[0][1].sort_key())):
        for t in by_fleet(cell):
            writer.writerow(csv_cell(v) for v in (
                "measured", row.torch, row.cuda, row.cudnn, column.key, column.capability, column.mig, t.fleet,
                t.status, t.count(FAIL), t.count(PASS), t.count(OTHER),
                " ".join(f"{f}:{n}" for f, n in sorted(t.families.items())),
                " ".join(f"{c}:{n}" for c, n in sorted(t.subcodes.items())), t.first, t.last, "", "", ""))
    for s in sources:
        issue = s.issue
        writer.writerow(csv_cell(v) for v in (
            "source", issue.torch, issue.cuda, issue.cudnn,
            " ".join(c.key for c in atlas.columns if covers_capability(issue, c.capability)),
            issue.capability, "", "", "", "", "", "", " ".join(issue.families), "", "", "", issue.id, issue.source,
            issue.summary))
    return out.getvalue()

