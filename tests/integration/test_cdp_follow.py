"""tests/cdp.py's Page.follow, the browser tests' way to follow a link: it must hand back the
new document, never the one that held the link (whose load event is still in the log: the CI
failure of the atlas case-page test read the old page's missing h1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import cdp
from cdp import require_chromium

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def page() -> Iterator[cdp.Page]:
    with cdp.browser(require_chromium()) as opened:
        yield opened


def pages(where: Path) -> Path:
    (where / "second.html").write_text("<!doctype html><title>2</title><h1>second</h1>")
    first = where / "first.html"
    first.write_text('<!doctype html><title>1</title><p><a id="go" href="second.html">on</a></p>')
    return first


def test_the_old_pages_load_event_is_still_in_the_log(page: cdp.Page, tmp_path: Path) -> None:
    # Why a plain click + wait_for raced: the event it waits for is already there.
    page.open(pages(tmp_path).as_uri())
    assert page.named("Page.loadEventFired")
    assert page.evaluate("document.querySelector('h1')") is None


def test_follow_hands_back_the_new_document(page: cdp.Page, tmp_path: Path) -> None:
    first = pages(tmp_path)
    for _ in range(5):  # the race lost about one run in many; a few rounds make a stale read likely
        page.open(first.as_uri())
        landed = page.follow("#go")
        assert landed == (tmp_path / "second.html").as_uri()
        assert page.evaluate("document.querySelector('h1').textContent") == "second"


def test_follow_refuses_what_is_not_a_link(page: cdp.Page, tmp_path: Path) -> None:
    page.open(pages(tmp_path).as_uri())
    with pytest.raises(LookupError, match="no link matches #nothing"):
        page.follow("#nothing")
