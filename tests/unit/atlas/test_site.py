"""atlas/site.py: the grid (both generations, a MIG sub-column, fleets side by side), a page per
stack x column x family with each failing case's repro script (or why there is none), the rows from
published sources marked apart, atlas.json and atlas.csv, every bundle string escaped in every
output, and the one way the site is written (tree.Tree, into a folder of its own)."""

from __future__ import annotations

import ast
import csv
import dataclasses
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import atlaskit
import strategies
from atlaskit import HOSTILE
from convmatrix.atlas import merge, site, sources
from convmatrix.atlas.model import Bundle
from convmatrix.errors import BadInput


def built(*bundles: object, refused: int = 0) -> dict[str, bytes]:
    atlas = merge.merge(bundles or [atlaskit.fleet_a(), atlaskit.fleet_b()])  # type: ignore[arg-type]
    return {f"{folder}/{name}" if folder else name: data
            for folder, name, data in site.files(atlas, sources.load(), refused=refused)}


def text(files: dict[str, bytes], name: str) -> str:
    return files[name].decode()


def rows_of(index: str) -> list[list[Any]]:
    """The measured rows' data block, as site.js reads it."""
    found = re.search(r'<script type="application/json" id="rows">(.*?)</script>', index, re.DOTALL)
    assert found is not None
    return json.loads(found[1])  # type: ignore[no-any-return]


def test_the_data_block_cannot_end_its_element_or_open_a_comment() -> None:
    value = ["</script><script>alert(1)</script>", "<!--<script>", "</SCRIPT >", "a\u2028b"]
    block = site.data_block("rows", value)
    inner = block.removeprefix('<script type="application/json" id="rows">').removesuffix("</script>")
    assert "</" not in inner and "<!--" not in inner
    assert json.loads(inner) == value


def test_the_grid_has_both_generations_and_the_mig_slice_under_its_gpu() -> None:
    index = text(built(), "index.html")
    heads = re.findall(r'<th data-g="(\d+)" class="col">([^<]+)<span class="gen">([^<]*)</span>', index)
    assert heads == [("0", "sm70", "Volta"), ("1", "sm90", "Hopper"), ("1", "sm90", "1g.18gb")]
    assert index.count("<tr class='row measured'>") == 2 * 2  # in the table (no JS) and in the data block
    assert rows_of(index)[0][0] == "2.5.1+cu124" and rows_of(index)[1][5].startswith("<tr class='row measured'>")


def test_a_disagreement_shows_each_fleet_side_by_side() -> None:
    index = text(built(), "index.html")
    cell = re.search(r"<td data-g='1' class='c s-disagree'>.*?</td>", index)
    assert cell is not None
    assert "<b class='s-fail'>fleet-a 2✗0✓</b><b class='s-pass'>fleet-b 0✗1✓</b>" in cell[0]
    assert "<i>sub-code 3002</i><small>2026-12-01–2026-12-05</small>" in cell[0]
    section = index[index.index('<section id="disagreements">'):]
    assert "fleet-a</b> fail: 2 of 2 run(s) failed" in section and "fleet-b</b> pass: 0 of 1 run(s) failed" in section


def test_each_failing_family_has_a_page_with_its_cases_and_repro_scripts() -> None:
    files = built()
    pages = sorted(name for name in files if name.startswith("pages/"))
    assert [re.sub(r"-[0-9a-f]{10}\.html$", "", p) for p in pages] == [
        "pages/sm70-crash", "pages/sm70-cudnn-arch-mismatch", "pages/sm90-cudnn-not-supported"]
    index = text(files, "index.html")
    assert all(f"href='{p}'" in index for p in pages)
    page = text(files, pages[2])
    assert page.count("<tr class=\"s-fail\">") == 2 and page.count("<tr class=\"s-pass\">") == 1  # fleet b's pass
    assert '<span class="badge s-disagree">disagree</span>' in page
    scripts = re.findall(r'<a href="\.\./(repro/repro-conv2d-fp16-[0-9a-f]{10}\.py)" download=', page)
    assert len(scripts) == 2
    for name in scripts:
        script = text(files, name)
        ast.parse(script)
        assert "CASE_ID = 'conv2d-fp16'" in script and "DTYPE = 'float16'" in script
        assert "# To install that stack:\n#   pip install torch==2.9.1 --index-url https://download.pytorch.org/whl/cu128" in script


def test_a_repro_the_renderer_refuses_is_said_not_a_crash() -> None:
    files = built()
    page = text(files, next(n for n in files if "cudnn-arch-mismatch" in n))
    assert ('<span class="norepro">no repro: case conv2d-fp16: params.groups: 3 does not divide the channels '
            "(8 in, 8 out)</span>") in page
    assert 'href="https://github.com/pytorch/pytorch/issues/162574"' in page  # its known issue, linked


def test_rows_from_sources_are_marked_apart_from_measured_ones() -> None:
    index = text(built(), "index.html")
    measured, published = index.split('<tbody id="sources">')
    assert "s-source" not in measured.split('<tbody id="measured">')[1]
    assert published.count('<tr class="row source"') == len(sources.load())
    row = re.search(r'<tr class="row source"[^>]*>.*?pytorch-162574.*?</tr>', published)
    assert row is not None
    assert 'href="https://github.com/pytorch/pytorch/issues/162574"' in row[0]
    assert re.findall(r'<td data-g="(\d)" class="c s-source">source</td>', row[0]) == ["0"]  # sm70, not sm90
    rows = list(csv.DictReader(io.StringIO(text(built(), "atlas.csv"))))
    assert {r["kind"] for r in rows} == {"measured", "source"}
    assert [r["column"] for r in rows if r["id"] == "conda-forge-cudnn-9-11-cuda-12-pre-turing-broken"] == ["sm70"]


def test_json_and_csv_carry_the_same_cells() -> None:
    files = built(refused=1)
    data = json.loads(files["atlas.json"])
    assert data["format"] == "convmatrix-atlas" and data["version"] == 1 and data["refused"] == 1
    split = [c for c in data["cells"] if c["status"] == "disagree"]
    assert [(f["fleet"], f["status"], f["runs"]) for f in split[0]["fleets"]] == [
        ("fleet-a", "fail", {"fail": 2, "pass": 0, "other": 0}), ("fleet-b", "pass", {"fail": 0, "pass": 1, "other": 0})]
    assert split[0]["pages"]["cudnn_not_supported"] in files
    measured = [r for r in csv.DictReader(io.StringIO(text(files, "atlas.csv"))) if r["kind"] == "measured"]
    assert len(measured) == sum(len(c["fleets"]) for c in data["cells"]) == 5
    assert "1 bundle(s) could not be read" in text(files, "index.html")


def test_every_bundle_string_is_escaped_in_every_output() -> None:
    files = built(atlaskit.fleet_a(), atlaskit.hostile())
    for name, data in files.items():
        if name.endswith(".html"):
            page = data.decode()
            if name == "index.html":  # the data block holds each row's search text as it is (JSON)
                rows = rows_of(page)
                assert all(HOSTILE not in str(row[5]) and "<img" not in str(row[5]) for row in rows)
                assert any(HOSTILE.lower() in str(row[4]) for row in rows)
                page = re.sub(r'<script type="application/json" id="rows">.*?</script>', "", page, flags=re.DOTALL)
            assert HOSTILE not in page and "<img" not in page, name
            assert page.count("<script") == (1 if name == "index.html" else 0), name
            assert "javascript:" not in page
            assert "Content-Security-Policy" in page
    page = text(files, next(n for n in files if n.startswith("pages/") and "sm80" in n))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    # the https source linked, the javascript: one a plain "[2]"
    assert '<td><a href="https://example.com/a" rel="noopener noreferrer">[1]</a> [2]</td>' in page
    assert all(re.fullmatch(r"(pages|repro)/[A-Za-z0-9_.-]+", n) for n in files if "/" in n)
    rows = list(csv.reader(io.StringIO(text(files, "atlas.csv"))))
    fleet = [r[7] for r in rows[1:] if r[0] == "measured" and "HYPERLINK" in r[7]]
    assert fleet == ["'=HYPERLINK(\"http://x\")" + HOSTILE]
    assert all(not cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row)
    assert json.loads(files["atlas.json"])["fleets"][1] == '=HYPERLINK("http://x")' + HOSTILE  # the value, as JSON
    script = next(v.decode() for n, v in files.items() if n.startswith("repro/") and b"alert(" in v)
    ast.parse(script)
    said = [line for line in script.splitlines() if "alert(" in line]
    assert said and all(line.startswith("# ") for line in said)  # free text in comments only


@pytest.mark.parametrize(("value", "shown"), [("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@SUM(A1)", "'@SUM(A1)"),
                                              ("\t=1", "'=1"), ("a\nb", "a b"), ("9.1.0", "9.1.0"), (None, "")])
def test_a_csv_cell_is_inert_in_a_spreadsheet(value: object, shown: str) -> None:
    assert site.csv_cell(value) == shown


def test_the_site_is_written_into_a_folder_of_its_own(tmp_path: Path) -> None:
    atlas = merge.merge([atlaskit.fleet_a(), atlaskit.fleet_b()])
    out = tmp_path / "site"
    count = site.publish(out, atlas, sources.load())
    assert count == len(built()) and (out / "index.html").is_file() and len(list((out / "repro").iterdir())) == 3
    stale = out / "pages" / "old.html"
    stale.write_text("left from an older atlas")
    site.publish(out, merge.merge([atlaskit.fleet_a()]), sources.load())  # a previous atlas: replaced
    assert not stale.exists() and len(list((out / "pages").iterdir())) == 1
    other = tmp_path / "documents"
    other.mkdir()
    (other / "thesis.tex").write_text("mine")
    with pytest.raises(BadInput, match=r"-o .*documents: holds files that are not an atlas"):
        site.publish(other, atlas, sources.load())
    assert [p.name for p in other.iterdir()] == ["thesis.tex"]
    link = tmp_path / "link"
    link.symlink_to(out)
    with pytest.raises(BadInput, match=r"-o .*link: cannot write the site \(.*symlink"):
        site.publish(link, atlas, sources.load())


def many(rows: int) -> Bundle:
    stacks = [dataclasses.replace(atlaskit.OLD, torch=f"2.{i // 10}.{i % 10}") for i in range(rows)]
    return Bundle(fleet="f", created="2026-12-05", tool="0.1.0", runs=(atlaskit.run(
        "r1", "2026-12-05", *(atlaskit.cell(s, atlaskit.H200, atlaskit.passed("x")) for s in stacks)),))


def test_without_js_the_table_holds_the_first_rows_and_says_how_many_more() -> None:
    index = text(built(many(site.SHOWN_ROWS + 7)), "index.html")
    table = index[index.index('<tbody id="measured">'):index.index('<tbody id="sources">')]
    assert table.count("<tr class='row measured'>") == site.SHOWN_ROWS
    assert "7 more row(s): the page lists them with JavaScript on; atlas.csv has them all" in table
    assert len(rows_of(index)) == site.SHOWN_ROWS + 7
    assert f"var SHOWN = {site.SHOWN_ROWS};" in site.asset("site.js")


# --- properties (tests/strategies.py, sections a40e and a40s) -------------------------------------
SITE_TAGS = {"a", "b", "body", "br", "button", "code", "details", "div", "h1", "h2", "head", "header", "html", "i", "input",
             "label", "li", "link", "meta", "option", "p", "script", "section", "select", "small", "span", "style",
             "summary", "table", "tbody", "td", "th", "thead", "title", "tr", "ul"}


@given(st.lists(strategies.atlas_hostile_bundles(), min_size=1, max_size=3))
def test_no_bundle_text_becomes_markup_a_formula_or_a_link(found: list[Bundle]) -> None:
    files = built(*found)
    for name, data in files.items():
        if name.endswith(".html"):
            page = data.decode()
            if name == "index.html":
                rows = rows_of(page)
                page = re.sub(r'<script type="application/json" id="rows">.*?</script>', "", page, flags=re.DOTALL)
                page += "".join(str(row[5]) for row in rows)  # the rows' html, as site.js puts it in
            assert set(re.findall(r"<([A-Za-z][A-Za-z0-9]*)", page)) - SITE_TAGS == set(), name
            assert page.count("<script") == (1 if name == "index.html" else 0), name
            tags = re.findall(r"<[A-Za-z][^>]*>", page)  # real ones: a bundle's '<' is &lt; by now
            # An in-page anchor (the conflicts section's) is the site's own; no other link may be.
            foreign = r"""\son[a-z]+\s*=|href=["'](?!https?://|pages/|\.\./|atlas\.|data:,|#[a-z-]+["'])"""
            assert not [t for t in tags if re.search(foreign, t)], name
            assert "\x1b" not in page and "\u202e" not in page, name
        elif name.endswith(".py"):
            ast.parse(data.decode())
    for row in csv.reader(io.StringIO(text(files, "atlas.csv"))):
        assert all(not cell.startswith(("=", "+", "-", "@", "\t", "\r")) and "\n" not in cell for cell in row)
    assert json.loads(files["atlas.json"])["fleets"] == list(dict.fromkeys(b.fleet for b in found))


def test_a_case_one_fleet_both_failed_and_passed_is_mixed_not_a_disagreement() -> None:
    one = Bundle(fleet="f", created="2026-12-05", tool="0.1.0", runs=(atlaskit.run(
        "r1", "2026-12-05", atlaskit.cell(atlaskit.NEW, atlaskit.H200, atlaskit.passed("x"), verdict="control"),
        atlaskit.cell(atlaskit.NEW, atlaskit.H200, atlaskit.failed("x"))),))
    files = built(one)
    page = text(files, next(n for n in files if n.startswith("pages/")))
    assert '<span class="badge s-flaky">mixed</span>' in page and "badge s-disagree" not in page


def swapped_cell(files: tuple[tuple[str, str | None, str | None], ...]) -> Any:
    from convmatrix.atlas.model import Libraries, LoadedFile

    found = Libraries(swapped=True, cudnn=tuple(LoadedFile(name=n, version=v, origin=o) for n, v, o in files))
    return dataclasses.replace(atlaskit.cell(atlaskit.NEW, atlaskit.H200, atlaskit.failed("conv2d-fp16")),
                               libraries=found)


def test_a_cells_libraries_show_where_what_loaded_differs_from_what_was_installed() -> None:
    """Issue 47: the bundle's Cell.libraries, as the report's stack line (results/libraries.stack_line)."""
    swap = swapped_cell((("libcudnn", "9.4.0", "wheel"), ("libcudnn_graph", "9.4.0", "wheel"),
                         ("libcudnn_cnn", "9.2.1", "LD_LIBRARY_PATH")))
    clean = dataclasses.replace(swap, libraries=dataclasses.replace(swap.libraries, swapped=False))
    one = Bundle(fleet="f", created="2026-12-05", tool="0.1.0", runs=(
        atlaskit.run("r1", "2026-12-04", swap), atlaskit.run("r2", "2026-12-05", clean)))
    files = built(one)
    line = "libraries: cuDNN 9.4.0 (wheel) · libcudnn_cnn 9.2.1 from LD_LIBRARY_PATH"
    index = text(files, "index.html")
    assert index.count(f"<i class='lib'>{line}<") == 2  # the table (no JS) and the rows' data block
    page = text(files, next(n for n in files if n.startswith("pages/")))
    assert f"; {line} (1 run(s))" in page
    fleet = json.loads(files["atlas.json"])["cells"][0]["fleets"][0]
    assert fleet["libraries"] == {line.removeprefix("libraries: "): ["r1r1r1r1r1r1r1r1"]}
    # A clean cell (what loaded is what was installed) says nothing.
    assert "class='lib'" not in text(built(Bundle(fleet="f", created="2026-12-05", tool="0.1.0", runs=(
        atlaskit.run("r2", "2026-12-05", clean),))), "index.html")


def test_a_cells_libraries_are_escaped_whatever_the_bundle_holds() -> None:
    """The reader keeps only stems, versions and origins of their patterns; the site, handed Bundle
    objects too, escapes what it shows all the same."""
    swap = swapped_cell((("libcudnn", HOSTILE, "wheel"), ("libcudnn_cnn", "9.2.1", HOSTILE)))
    files = built(Bundle(fleet="f", created="2026-12-05", tool="0.1.0", runs=(atlaskit.run("r1", "2026-12-04", swap),)))
    for name, data in files.items():
        if name.endswith(".html"):
            page = re.sub(r'<script type="application/json" id="rows">.*?</script>', "", data.decode(), flags=re.DOTALL)
            assert HOSTILE not in page and "<img" not in page, name
    rows = rows_of(text(files, "index.html"))
    assert all("<img" not in str(row[5]) for row in rows) and any("&lt;img" in str(row[5]) for row in rows)
