"""The atlas site in a real browser (Debian's chromium, headless, over the DevTools protocol:
tests/cdp.py), opened from disk: the grid shows both GPU generations and the MIG slice, the rows
from sources are marked, the filters (GPU generation, torch, cuDNN range, family) and the search
hide what does not match, a case page offers its repro script, and a hostile bundle's strings stay
text (no dialog, no console error, no image). Skipped where chromium is missing, except under CI.
With CONVMATRIX_SCREENSHOT=docs/atlas.png it keeps the picture of the grid."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import atlaskit
import cdp
from cdp import require_chromium
from convmatrix.atlas import merge, sources
from convmatrix.atlas import site as atlas_site
from convmatrix.atlas.model import Bundle

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    where = tmp_path_factory.mktemp("atlas")
    bundles = [atlaskit.write(where / "a.json", atlaskit.fleet_a()), atlaskit.write(where / "b.json", atlaskit.fleet_b()),
               atlaskit.write(where / "h.json", atlaskit.hostile(readable=True))]
    garbage = where / "garbage.json"
    garbage.write_text('{"format": "convmatrix-bundle", "version": 1, "bundle": ' + "[" * 5000)
    done = subprocess.run([sys.executable, "-m", "convmatrix", "atlas", *map(str, bundles), str(garbage),
                           "-o", str(where / "site")], capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"convmatrix: refused: {garbage}: nested 5,001 levels deep, more than 12; "
                                        "not read"]
    return where / "site"


@pytest.fixture(scope="module")
def browser() -> Iterator[cdp.Page]:
    with cdp.browser(require_chromium()) as page:
        yield page


@pytest.fixture
def page(browser: cdp.Page, site: Path) -> cdp.Page:
    browser.open((site / "index.html").as_uri())
    return browser


def shown_rows(page: cdp.Page) -> list[str]:
    return list(page.evaluate("[...document.querySelectorAll('tr.row')].filter(r => r.checkVisibility())"
                         ".map(r => r.querySelector('th').textContent.trim())"))


def shown_columns(page: cdp.Page) -> list[str]:
    return list(page.evaluate("[...document.querySelectorAll('thead th.col')].filter(t => t.checkVisibility())"
                         ".map(t => t.textContent)"))


def choose(page: cdp.Page, select: str, value: str) -> None:
    page.evaluate(f"(() => {{ const s = document.getElementById({json.dumps(select)}); s.value = {json.dumps(value)};"
                  " s.dispatchEvent(new Event('change')); })()")


def fill(page: cdp.Page, box: str, text: str) -> None:
    page.evaluate(f"(() => {{ const b = document.getElementById({json.dumps(box)}); b.value = '';"
                  " b.dispatchEvent(new Event('input')); })()")
    if text:
        page.type(f"#{box}", text)


def test_the_grid_shows_both_generations_and_the_sources_apart(page: cdp.Page) -> None:
    assert shown_columns(page) == ["sm70Volta", "sm80Ampere", "sm90Hopper", "sm901g.18gb"]
    measured = page.evaluate("document.querySelectorAll('tr.row.measured').length")
    published = page.evaluate("document.querySelectorAll('tr.row.source').length")
    assert (measured, published) == (2, 15)
    assert page.evaluate("document.getElementById('shown').textContent") == "17"
    colour = page.evaluate("getComputedStyle(document.querySelector('td.s-disagree')).outlineStyle")
    assert colour == "dashed"
    fail = page.evaluate("getComputedStyle(document.querySelector('td.c.s-fail')).backgroundColor")
    red, green, blue = (int(v) for v in fail[fail.index("(") + 1:fail.index(")")].split(",")[:3])
    assert red > green + 60 and red > blue + 60


def test_the_filters_and_the_search_hide_what_does_not_match(page: cdp.Page) -> None:
    choose(page, "f-gen", "0")  # sm70
    assert shown_columns(page) == ["sm70Volta"]
    rows = shown_rows(page)
    assert rows[0] == "torch 2.9.1+cu128 · CUDA 12.8 · cuDNN 9.11.0" and not any("2.5.1" in r for r in rows)
    assert any("pytorch-162574" in r for r in rows) and not any("conv3d-tf32" in r for r in rows)  # sm80+ only
    choose(page, "f-gen", "")
    choose(page, "f-torch", "2.5.1+cu124")
    rows = shown_rows(page)
    assert rows[0] == "torch 2.5.1+cu124 · CUDA 12.4 · cuDNN 9.1.0" and not any("2.9.1+" in r for r in rows)
    assert not any("plan-failed-warning-torch-2-3-0" in r for r in rows)  # its range is torch [2.3.0, 2.3.1)
    assert any("depthwise-int32-no-split-native-kernel" in r for r in rows)  # torch < 2.8.0
    choose(page, "f-torch", "")
    fill(page, "f-cudnn-min", "9.11")
    rows = shown_rows(page)
    assert [r for r in rows if r.startswith("torch")] == ["torch 2.9.1+cu128 · CUDA 12.8 · cuDNN 9.11.0"]
    assert not any("int32-no-split-before-cudnn-9-3" in r for r in rows)  # cuDNN < 9.3
    fill(page, "f-cudnn-max", "9.10")
    assert [r for r in shown_rows(page) if r.startswith("torch")] == []
    fill(page, "f-cudnn-min", "9.1")
    assert [r for r in shown_rows(page) if r.startswith("torch")] == ["torch 2.5.1+cu124 · CUDA 12.4 · cuDNN 9.1.0"]
    fill(page, "f-cudnn-min", "")
    fill(page, "f-cudnn-max", "")
    choose(page, "f-family", "cudnn_arch_mismatch")
    assert [r for r in shown_rows(page) if r.startswith("torch")] == ["torch 2.9.1+cu128 · CUDA 12.8 · cuDNN 9.11.0"]
    choose(page, "f-family", "")
    fill(page, "f-search", "fleet-b 3002")
    assert shown_rows(page) == ["torch 2.9.1+cu128 · CUDA 12.8 · cuDNN 9.11.0"]
    fill(page, "f-search", "conda-forge")
    assert len(shown_rows(page)) == 1 and "conda-forge-cudnn-9-11" in shown_rows(page)[0]
    assert page.evaluate("document.getElementById('shown').textContent") == "1"


def test_a_case_page_offers_its_repro_script(page: cdp.Page, site: Path) -> None:
    page.follow("td.s-disagree a")
    assert "on sm90: cudnn_not_supported" in page.evaluate("document.querySelector('h1').textContent")
    links = page.evaluate("[...document.querySelectorAll('a[download]')].map(a => a.getAttribute('href'))")
    assert len(links) == 2
    script = (site / "pages" / links[0]).resolve()
    assert script.is_file() and "CASE_ID = 'conv2d-fp16'" in script.read_text()
    assert page.evaluate("document.querySelector('th.split .badge').textContent") == "disagree"


def test_a_hostile_bundle_stays_text(page: cdp.Page, site: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    for path in [site / "index.html", *sorted((site / "pages").iterdir())]:
        page.open(path.as_uri())
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        time.sleep(0.2)  # an onerror or a script would have fired by now
        page.evaluate("1")
        assert page.named("Page.javascriptDialogOpening") == [], path
        assert page.named("Runtime.exceptionThrown") == [], path
        errors = [e for e in page.named("Runtime.consoleAPICalled") if e["params"]["type"] in ("error", "assert")]
        errors += [e for e in page.named("Log.entryAdded") if e["params"]["entry"]["level"] == "error"]
        assert errors == [], path
        assert page.evaluate("document.images.length") == 0, path
    page.open(next(p for p in (site / "pages").iterdir() if p.name.startswith("sm80-")).as_uri())
    reasons = page.evaluate("[...document.querySelectorAll('table.cases td')].map(td => td.textContent)")
    assert atlaskit.HOSTILE in reasons
    assert time.monotonic() - started < 60


def test_the_screenshot(browser: cdp.Page, site: Path, tmp_path: Path) -> None:
    browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False)
    browser.open((site / "index.html").as_uri())
    shot = browser.screenshot(tmp_path / "atlas.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if os.environ.get("CONVMATRIX_SCREENSHOT"):  # docs/atlas.png: CONVMATRIX_SCREENSHOT=docs/atlas.png
        browser.screenshot(Path(os.environ["CONVMATRIX_SCREENSHOT"]))
    browser.call("Emulation.clearDeviceMetricsOverride")


def test_a_long_atlas_lists_its_first_rows_and_shows_more_on_request(browser: cdp.Page, tmp_path: Path) -> None:
    stacks = [dataclasses.replace(atlaskit.OLD, torch=f"2.{i // 10}.{i % 10}") for i in range(400)]
    bundle = Bundle(fleet="f", created="2026-12-05", tool="0.1.0", runs=(atlaskit.run(
        "r1", "2026-12-05", *(atlaskit.cell(s, atlaskit.H200, atlaskit.failed("x") if i % 4 == 0
                                            else atlaskit.passed("x")) for i, s in enumerate(stacks))),))
    atlas_site.publish(tmp_path / "site", merge.merge([bundle]), sources.load())
    browser.open((tmp_path / "site" / "index.html").as_uri())
    listed = "document.querySelectorAll('tr.row.measured').length"
    assert browser.evaluate(listed) == atlas_site.SHOWN_ROWS
    assert browser.evaluate("document.querySelectorAll('#measured tr.group').length") == 0  # the no-JS line gone
    assert browser.evaluate("document.getElementById('more').textContent") == "show 150 more (250 not listed)"
    browser.click("#more")
    assert browser.evaluate(listed) == 300
    browser.click("#more")
    assert browser.evaluate(listed) == 400 and browser.evaluate("document.getElementById('more').hidden")
    choose(browser, "f-family", "cudnn_not_supported")
    assert browser.evaluate(listed) == 100 and browser.evaluate("document.getElementById('more').hidden")
