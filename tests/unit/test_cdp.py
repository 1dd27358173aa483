"""tests/cdp.py's Page.follow against a scripted browser: whatever the page's event log already
holds (its own Page.loadEventFired included), whatever other document loads on the way, and
however Chromium interleaves the events after a click with the answers to calls, follow hands
back the document the link leads to, never the one that held it. The stale load event once made
the atlas case-page test read the old page (a CI failure); tests/integration/test_cdp_follow.py
shows the same in a real chromium."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import cdp
from strategies import devtools_logs

OLD = "file:///site/index.html"
TARGET = "file:///site/pages/sm90-conv.html"
ON_THE_WAY = "file:///site/redirect.html"
STALE_LOAD = {"method": "Page.loadEventFired", "params": {}}


class Scripted:
    """A DevTools socket: answers follow's calls in order, and after the click's release sends
    `after` then the new document's load event, `split` of them before that call's answer. The
    document is the old one until a load event has been read: one of `after`'s is a document on
    the way (ON_THE_WAY), the last one the document the click lands on."""

    def __init__(self, after: list[dict[str, Any]], split: int, lands_on: str = TARGET) -> None:
        self.url, self.lands_on = OLD, lands_on
        self.load: dict[str, Any] = {"method": "Page.loadEventFired", "params": {"new": True}}
        self.after, self.split = [*after, self.load], split
        self.queue: list[dict[str, Any]] = []

    def send(self, text: str) -> None:
        message = json.loads(text)
        answer = {"id": message["id"], "result": self.result(message)}
        if message["params"].get("type") == "mouseReleased":
            cut = min(self.split, len(self.after))
            self.queue += [*self.after[:cut], answer, *self.after[cut:]]
        else:
            self.queue.append(answer)

    def result(self, message: dict[str, Any]) -> dict[str, Any]:
        if message["method"] != "Runtime.evaluate":
            return {}
        expression = message["params"]["expression"]
        if expression == "document.location.href":
            return {"result": {"value": self.url}}
        if ".href" in expression:
            return {"result": {"value": TARGET}}
        return {"result": {"value": [10.0, 20.0]}}  # the link's centre

    def recv(self) -> str:
        if not self.queue:
            raise TimeoutError("the scripted browser has nothing more to send")
        message = self.queue.pop(0)
        if message is self.load:
            self.url = self.lands_on
        elif message.get("method") == "Page.loadEventFired":
            self.url = ON_THE_WAY
        return json.dumps(message)

    def settimeout(self, timeout: float) -> None:
        pass

    def close(self) -> None:
        pass


def page_with(log: list[dict[str, Any]], ws: Scripted) -> cdp.Page:
    page = cdp.Page(ws)
    page.events = [dict(e) for e in log]
    return page


@pytest.mark.properties
@given(log=devtools_logs, after=devtools_logs, split=st.integers(0, 9))
@example(log=[STALE_LOAD], after=[], split=0)  # the CI failure: the old page's load, the new one still to come
def test_follow_hands_back_the_new_document_whatever_the_log_held(log: list[dict[str, Any]],
                                                                  after: list[dict[str, Any]], split: int) -> None:
    ws = Scripted(after, split)
    page = page_with(log, ws)
    assert page.follow("td a") == TARGET
    assert ws.load in page.events  # it waited for the new load (a decoded copy of it)


def test_a_plain_click_and_wait_takes_the_old_pages_load() -> None:
    # Why follow exists: this is what the atlas test did, and it reads the old document.
    page = page_with([STALE_LOAD], Scripted([], split=0))
    page.click("td a")
    assert page.wait_for("Page.loadEventFired") == STALE_LOAD
    assert page.evaluate("document.location.href") == OLD


def test_follow_refuses_a_load_of_another_document() -> None:
    page = page_with([], Scripted([], split=0, lands_on="file:///site/elsewhere.html"))
    with pytest.raises(RuntimeError, match="followed to file:///site/elsewhere.html, not " + TARGET):
        page.follow("td a")


def test_stop_group_ends_every_process_of_the_browsers_group() -> None:
    """Seen on CI: chromium's main process ended, one of its children still wrote into the profile,
    and removing it failed ("Directory not empty: 'Default'"). A child that outlives its parent's
    TERM (as a renderer can) is ended too, and stop_group returns only when none is left."""
    import os
    import subprocess
    import time

    proc = subprocess.Popen(["sh", "-c", "sh -c 'trap \"\" TERM; sleep 60' & sleep 60"], start_new_session=True)
    time.sleep(0.3)  # both started
    started = time.monotonic()
    cdp.stop_group(proc, timeout=2.0)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
    assert proc.returncode is not None and time.monotonic() - started < 10
