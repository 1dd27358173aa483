"""atlas/site.py: the grid (both generations, a MIG sub-column, fleets side by side), a page per
stack x column x family with each failing case's repro script (or why there is none), the rows from
published sources marked apart, atlas.json and atlas.csv, every bundle string escaped in every
output, and the one way the site is written (tree.Tree, into a folder of its own)."""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from pathlib import Path

import pytest

import atlaskit
from atlaskit import HOSTILE
from convmatrix.atlas import merge, site, sources
from convmatrix.errors import BadInput


def built(*bundles: object, refused: int = 0) -> dict[str, bytes]:
    atlas = merge.merge(bundles or [atlaskit.fleet_a(), atlaskit.fleet_b()])  # type: ignore[arg-type]
    return {f"{folder}/{name}" if folder else name: data
            for folder, name, data in site.files(atlas, sources.load(), refused=refused)}


def text(files: dict[str, bytes], name: str) -> str:
    return files[name].decode()


def test_the_grid_has_both_generations_and_the_mig_slice_under_its_gpu() -> None:
    index = text(built(), "index.html")
    heads = re.findall(r'<th data-g="(\d+)" class="col">([^<]+)<span class="gen">([^<]*)</span>', index)
    assert heads == [("0", "sm70", "Volta"), ("1", "sm90", "Hopper"), ("1", "sm90", "1g.18gb")]
    assert index.count('<tr class="row measured"') == 2


def test_a_disagreement_shows_each_fleet_side_by_side() -> None:
    index = text(built(), "index.html")
    cell = re.search(r'<td data-g="1" data-families="cudnn_not_supported" class="c s-disagree".*?</td>', index)
    assert cell is not None
    assert '<span class="fl s-fail"' in cell[0] and "<b>fleet-a</b> 2✗ 0✓" in cell[0]
    assert '<span class="fl s-pass"' in cell[0] and "<b>fleet-b</b> 0✗ 1✓" in cell[0]
    assert "2026-12-01 – 2026-12-05" in cell[0] and "sub-code 3002" in cell[0]
    section = index[index.index('<section id="disagreements">'):]
    assert "fleet-a</b> fail: 2 of 2 run(s) failed" in section and "fleet-b</b> pass: 0 of 1 run(s) failed" in section


def test_each_failing_family_has_a_page_with_its_cases_and_repro_scripts() -> None:
    files = built()
    pages = sorted(name for name in files if name.startswith("pages/"))
    assert [re.sub(r"-[0-9a-f]{10}\.html$", "", p) for p in pages] == [
        "pages/2.9.1-cu128-12.8-9.11.0-sm70-crash", "pages/2.9.1-cu128-12.8-9.11.0-sm70-cudnn-arch-mismatch",
        "pages/2.9.1-cu128-12.8-9.11.0-sm90-cudnn-not-supported"]
    index = text(files, "index.html")
    assert all(f'href="{p}"' in index for p in pages)
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
