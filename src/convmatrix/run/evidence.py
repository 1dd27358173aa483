"""Evidence for a failing case: the first occurrence of its failure in the cell's log.txt,
with the lines before it, saved beside the results (evidence/<case>.txt) for the report to link.

Stdlib only (the runner calls it from nox's interpreter); classify is stdlib-only too.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from convmatrix.results import families, rundir

BEFORE = 100  # lines kept before the first occurrence: the triage procedure asks for at least 100
AFTER = 20
FAILING = ("failed", "error", "crashed", "timeout")


@dataclass(frozen=True, kw_only=True)
class Failure:
    case: str
    status: str
    message: str
    nodeid: str  # from the repository root: suites/test_conv.py::test_conv[<case>]


@dataclass(frozen=True, kw_only=True)
class Occurrence:
    line: int  # 1-based line in log.txt
    lines: list[str]  # the window: up to BEFORE lines, the line itself, up to AFTER lines
    first: int  # 1-based line number of lines[0]


def failures(results_jsonl: Path) -> list[Failure]:
    """The failing cases of a results file, last line per case winning (as the report reads it)."""
    latest: dict[str, Failure] = {}
    try:
        lines = results_jsonl.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the report names corrupt lines; evidence just skips them
        if isinstance(record, dict) and isinstance(record.get("case"), str):
            latest[record["case"]] = Failure(case=record["case"], status=str(record.get("status")),
                                             message=str(record.get("message") or ""),
                                             nodeid=str(record.get("nodeid") or ""))
    return [f for f in latest.values() if f.status in FAILING]


def needles(failure: Failure) -> list[str]:
    """What the failure looks like in the log, best first: its message's first line, then the
    case's pytest -v line (`test_conv[<case>]`; a bare id would also match the command line)."""
    first = next((ln.strip() for ln in failure.message.splitlines() if ln.strip()), "")
    return [text for text in (first[:200], f"[{failure.case}]") if text]


def find(log_lines: Iterable[str], wanted: list[str]) -> Occurrence | None:
    """The first line containing any wanted text, with BEFORE lines before and AFTER after it."""
    window: deque[str] = deque(maxlen=BEFORE)
    hit: Occurrence | None = None
    for number, line in enumerate(log_lines, 1):
        line = line.rstrip("\n")
        if hit is not None:
            hit.lines.append(line)
            if len(hit.lines) >= hit.line - hit.first + 1 + AFTER:
                break
            continue
        if any(text in line for text in wanted):
            hit = Occurrence(line=number, lines=[*window, line], first=number - len(window))
        window.append(line)
    return hit


def tail(log: Path) -> Occurrence | None:
    total = 0
    window: deque[str] = deque(maxlen=BEFORE + 1)
    with log.open(encoding="utf-8", errors="replace") as fh:
        for total, line in enumerate(fh, 1):  # noqa: B007  (total is the line count afterwards)
            window.append(line.rstrip("\n"))
    lines = list(window)
    if not lines:
        return None
    return Occurrence(line=total, lines=lines, first=total - len(lines) + 1)


def write(results_dir: Path) -> dict[str, str]:
    """Save evidence/<case>.txt for each failing case found in log.txt; returns case -> file."""
    log = results_dir / rundir.LOG
    saved: dict[str, str] = {}
    if not log.exists():
        return saved
    for failure in failures(results_dir / rundir.RESULTS):
        occurrence = None
        for needle in needles(failure):
            with log.open(encoding="utf-8", errors="replace") as fh:
                occurrence = find(fh, [needle])
            if occurrence is not None:
                break
        if occurrence is None and failure.status in ("crashed", "timeout"):
            occurrence = tail(log)  # a dead process's last words are the evidence
        if occurrence is None:
            continue
        path = results_dir / rundir.EVIDENCE / f"{failure.case}.txt"
        path.parent.mkdir(exist_ok=True)
        family = families.classify(failure.message, status=failure.status)
        header = (f"# {failure.case}: {failure.status} ({family}); first occurrence at log.txt line "
                  f"{occurrence.line}, lines {occurrence.first}-{occurrence.first + len(occurrence.lines) - 1}\n")
        body = "".join(f"{occurrence.first + i:>7}{'>' if occurrence.first + i == occurrence.line else ' '} {text}\n"
                       for i, text in enumerate(occurrence.lines))
        path.write_text(header + body, encoding="utf-8")
        saved[failure.case] = str(path.relative_to(results_dir))
    return saved
