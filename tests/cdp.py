"""Just enough of the Chrome DevTools Protocol to drive Debian's chromium, headless, from the
browser tests: start it on a throwaway profile, open a page, evaluate, click and type as a
user does (input events, not element.click()), watch for dialogs and console errors, and take
screenshots. Nothing is downloaded: the browser is the system's (`apt-get install chromium`).

Also a command, for the README's screenshot:
    python tests/cdp.py screenshot REPORT.html OUT.png [--click SELECTOR] [--width W --height H]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome")
# Chromium starts in about a second here; a CI runner whose every core runs a test worker has been seen to
# take past 60 s, so the bound is generous: it only ends a start that hangs.
START_TIMEOUT = 180.0
CALL_TIMEOUT = 30.0  # seconds a call waits for its answer
EVENTS = ("Page.enable", "Runtime.enable", "Log.enable")


def chromium() -> str | None:
    """The browser: $CONVMATRIX_CHROMIUM, else the first of NAMES on PATH."""
    given = os.environ.get("CONVMATRIX_CHROMIUM")
    return given or next((found for name in NAMES if (found := shutil.which(name))), None)


def require_chromium() -> str:
    """chromium's path for a browser test, which is skipped without it (or without websocket-client),
    except under CI, which installs both (.ci/run) and fails instead."""
    import pytest

    executable = chromium()
    problem = None if executable else "no chromium on PATH (apt-get install chromium)"
    try:
        import websocket  # noqa: F401
    except ImportError:
        problem = "websocket-client is not installed (tests/requirements.txt)"
    if problem and os.environ.get("CI"):
        pytest.fail(f"CI must run the browser tests: {problem}")
    if problem:
        pytest.skip(problem)
    assert executable is not None
    return executable


def _socket_timeouts() -> tuple[type[Exception], ...]:
    try:
        from websocket import WebSocketTimeoutException
    except ImportError:  # a scripted socket in the unit tests, without websocket-client
        return (TimeoutError,)
    return (TimeoutError, WebSocketTimeoutException)


class Page:
    """One page target over its websocket: calls wait for their answer; events are kept in order."""

    def __init__(self, ws: Any) -> None:
        # ws: a websocket-client connection (connect), or any object with send, recv, settimeout
        # and close (the unit tests' scripted browser, tests/unit/test_cdp.py).
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.next_id = 0

    @classmethod
    def connect(cls, url: str) -> Page:
        import websocket  # websocket-client (tests/requirements.txt)

        # Chromium refuses a DevTools websocket that sends an Origin it was not told to allow.
        return cls(websocket.create_connection(url, timeout=CALL_TIMEOUT, suppress_origin=True))

    def close(self) -> None:
        self.ws.close()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        """The first event of that name from now on (or already kept since the last clear)."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event["method"] == method:
                    return event
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {method} within {timeout} s")
            self.ws.settimeout(left)
            try:
                message = json.loads(self.ws.recv())
            except _socket_timeouts() as late:  # websocket-client's own is no TimeoutError
                raise TimeoutError(f"no {method} within {timeout} s") from late
            finally:
                self.ws.settimeout(CALL_TIMEOUT)  # a call after this one waits as long as ever
            if "method" in message:
                self.events.append(message)

    def named(self, method: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["method"] == method]

    def open(self, url: str) -> None:
        """Navigates and waits for the load event, with the event log started afresh."""
        for method in EVENTS:
            self.call(method)
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        done = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in done:
            raise RuntimeError(f"{expression}: {done['exceptionDetails']}")
        return done["result"].get("value")

    def center(self, selector: str) -> tuple[float, float]:
        box = self.evaluate(f"""(() => {{
            const el = document.querySelector({json.dumps(selector)});
            if (!el) return null;
            el.scrollIntoView({{block: "center"}});
            const r = el.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2];
        }})()""")
        if box is None:
            raise LookupError(f"nothing matches {selector}")
        return float(box[0]), float(box[1])

    def click(self, selector: str) -> None:
        """A real mouse click at the element's centre (what a user does, not element.click())."""
        x, y = self.center(selector)
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def follow(self, selector: str, timeout: float = 30.0) -> str:
        """Clicks a link and waits until the document it leads to has loaded; returns its URL.

        A load event alone proves nothing: the page that holds the link keeps its own
        Page.loadEventFired in the log (taken for the next page's, it made the atlas case-page
        test read the old document: a CI failure), and another document may load on the way (a
        redirect). So the log is cleared before the click, and after each load event the
        document's URL is read: until it is the link's, that event is dropped and the next awaited."""
        target = self.evaluate(f"document.querySelector({json.dumps(selector)})?.href ?? null")
        if not target:
            raise LookupError(f"no link matches {selector}")
        wanted = str(target).split("#")[0]
        deadline = time.monotonic() + timeout
        self.events.clear()
        self.click(selector)
        landed = None
        while True:
            try:
                loaded = self.wait_for("Page.loadEventFired", timeout=deadline - time.monotonic())
            except TimeoutError as late:
                raise RuntimeError(f"{selector}: followed to {landed}, not {target}") from late
            landed = str(self.evaluate("document.location.href"))
            if landed.split("#")[0] == wanted:
                return landed
            # Only that load goes: the next one may have come in with the URL's answer.
            self.events.remove(loaded)

    def type(self, selector: str, text: str) -> None:
        self.click(selector)
        self.call("Input.insertText", text=text)

    def screenshot(self, path: Path, *, full: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full:
            params["captureBeyondViewport"] = True
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))
        return path


@contextmanager
def browser(executable: str, *, width: int = 1400, height: int = 1000) -> Iterator[Page]:
    """A headless chromium on a throwaway profile, and its first page; both closed after."""
    scratch = tempfile.mkdtemp(prefix="convmatrix-chromium-")
    try:
        profile, log = Path(scratch) / "profile", Path(scratch) / "chromium.log"
        args = [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--remote-debugging-port=0",
                f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"]
        with log.open("wb") as sink:  # what chromium says, for the error when it never listens
            # A process group of its own: its renderer, utility and crash handler processes go with it.
            proc = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        page = None
        try:
            page = Page.connect(page_socket(profile, proc, log))
            yield page
        finally:
            if page is not None:
                page.close()
            stop_group(proc)
    finally:
        # Seen in a fresh clone's .ci/run: removing the profile while a child of chromium still wrote
        # into it failed with "Directory not empty: 'Default'". The group is gone now; a process
        # that left it (a crash handler that made a session of its own) gets a bounded retry.
        for attempt in range(5):
            try:
                shutil.rmtree(scratch)
                break
            except FileNotFoundError:
                break
            except OSError:
                if attempt == 4:
                    raise
                time.sleep(0.2)


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """chromium and every process of its group ended: TERM, then KILL after timeout, then waited
    for until none is left (bounded), so nothing writes into its profile after."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)  # anyone left in the group?
            except ProcessLookupError:
                return
            time.sleep(0.05)
    proc.kill()
    proc.wait()


def said(log: Path) -> str:
    """The last lines chromium wrote (bounded: a chatty browser must not flood the error)."""
    with log.open("rb") as stream:
        stream.seek(max(0, log.stat().st_size - 2000))
        return stream.read().decode("utf-8", "replace")


def page_socket(profile: Path, proc: subprocess.Popen[bytes], log: Path) -> str:
    """The first page's DevTools websocket, once chromium has written its port."""
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before it listened:\n{said(log)}")
        lines = port_file.read_text().split() if port_file.exists() else []
        if lines:
            with urllib.request.urlopen(f"http://127.0.0.1:{lines[0]}/json/list", timeout=10) as answer:
                targets = json.load(answer)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
        time.sleep(0.1)
    raise TimeoutError(f"chromium did not listen within {START_TIMEOUT} s:\n{said(log)}")


def main() -> None:
    top = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)
    shot = sub.add_parser("screenshot", help="a png of an html file, as chromium renders it")
    shot.add_argument("html", type=Path)
    shot.add_argument("png", type=Path)
    shot.add_argument("--click", help="a selector to click first (say, a grid cell)")
    shot.add_argument("--width", type=int, default=1400)
    shot.add_argument("--height", type=int, default=1000)
    args = top.parse_args()
    executable = chromium()
    if executable is None:
        raise SystemExit("no chromium here (apt-get install chromium)")
    with browser(executable, width=args.width, height=args.height) as page:
        page.open(args.html.resolve().as_uri())
        if args.click:
            page.click(args.click)
            page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(args.png)
    print(args.png)


if __name__ == "__main__":
    main()
