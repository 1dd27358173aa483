"""Evidence for a failing case: the first occurrence of its failure in its own section of the
cell's log.txt (results/sections.py: its pytest -v line and its failure block), with the 100
lines before it, saved beside the results (evidence/<case>.txt) for the report to link. Four
cases failing with one message get four windows, each its own.

log.txt is the cell's: it is opened once, relative to the cell directory's descriptor and never
through a link or as a FIFO (rundir.open_plain), and every pass below reads that one open file by
offset, no further than rundir.MAX_LOG bytes (rundir.window); a process the cell left behind that
swaps log.txt for a link meanwhile changes nothing read here. A line is kept to its first KEEP
characters (the rest counted, for the window's `… [N more characters]`).

Stdlib only (the runner calls it from nox's interpreter); classify is stdlib-only too.
"""

from __future__ import annotations

import io
import os
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from convmatrix import jsonread
from convmatrix.results import families, rundir, sections

BEFORE = 100  # lines kept before the first occurrence: the triage procedure asks for at least 100
AFTER = 20
LINE = 4096  # characters kept of each line of a window: an evidence file stays ~0.5 MB at most
KEEP = 16 * LINE  # characters of a line read as text; the rest of a longer one is only counted
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
        text = rundir.read_plain(results_jsonl, rundir.MAX_RESULTS).decode("utf-8", errors="replace")
    except OSError:
        return []
    lines = text.splitlines()
    if len(lines) > rundir.MAX_LINES:
        return []  # past the bound: the report makes the cell INVALID and says so
    for line in lines:
        try:
            record = jsonread.loads(line)
        except ValueError:
            continue  # the report names corrupt lines and lines past a bound; evidence just skips them
        if isinstance(record, dict) and isinstance(record.get("case"), str) and rundir.records.CASE_ID.fullmatch(
                record["case"]):  # a case id that could name a path elsewhere is the report's to name, not a file
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
        line = bounded(_strip(line))
        if hit is not None:
            hit.lines.append(line)
            if len(hit.lines) >= hit.line - hit.first + 1 + AFTER:
                break
            continue
        if any(text in line for text in wanted):
            hit = Occurrence(line=number, lines=[*window, line], first=number - len(window))
        window.append(line)
    return hit


class _Long(str):
    """The first KEEP characters of a longer line (without its newline); chars: the line's length."""

    chars: int

    def __new__(cls, text: str, chars: int) -> _Long:
        made = super().__new__(cls, text)
        made.chars = chars
        return made


def lines_of(log: BinaryIO) -> Iterator[str]:
    """One pass over log.txt's lines, as open(encoding="utf-8", errors="replace") reads them, from
    its first rundir.MAX_LOG bytes, through log's descriptor by offset (its own offset untouched): a
    line longer than KEEP characters comes as a _Long of its first KEEP."""
    with io.TextIOWrapper(rundir.window(log, rundir.MAX_LOG), encoding="utf-8", errors="replace") as text:
        readline = text.readline
        while line := readline(KEEP):
            if len(line) < KEEP or line[-1] == "\n":
                yield line
                continue
            chars = len(line)
            while piece := readline(KEEP):
                if piece.endswith("\n"):
                    chars += len(piece) - 1
                    break
                chars += len(piece)
            yield _Long(line, chars)


def cut(log: BinaryIO) -> bool:
    """log.txt goes on past what is read of it (rundir.MAX_LOG)."""
    return os.fstat(log.fileno()).st_size > rundir.MAX_LOG


def targets(log: BinaryIO, failing: list[Failure]) -> dict[str, int]:
    """Each failing case's line in the log: the first line of its own failure block holding its
    message (else the block's header); for a case that died with its process, the last line of
    that process's session; 0 for a case the log does not name (then the whole log is searched)."""
    parts = sections.sections(lines_of(log), [f.case for f in failing])
    found: dict[str, int] = {}
    searching: dict[str, tuple[str, int, int]] = {}
    for failure in failing:
        part = parts.get(failure.case)
        if part is not None and part.block is not None:
            first, last = part.block
            found[failure.case] = first  # the header, unless the message shows below it
            if needles(failure)[0] != f"[{failure.case}]":
                searching[failure.case] = (needles(failure)[0], first, last)
        elif part is not None and part.started is not None:
            dead = failure.status in ("crashed", "timeout")
            found[failure.case] = (part.ended or part.started) if dead else part.started
        else:
            found[failure.case] = 0
    if searching:
        for number, line in enumerate(lines_of(log), 1):
            for case, (needle, first, last) in list(searching.items()):
                if number > last:
                    del searching[case]
                elif number >= first and needle in line:
                    found[case] = number
                    del searching[case]
            if not searching:
                break
    return found


def windows(log: BinaryIO, lines: dict[str, int]) -> dict[str, Occurrence]:
    """The BEFORE lines before each target line, the line and AFTER after, in one pass."""
    wanted: dict[int, list[str]] = {}
    for case, number in lines.items():
        wanted.setdefault(number, []).append(case)
    window: deque[str] = deque(maxlen=BEFORE)
    open_: list[Occurrence] = []
    made: dict[str, Occurrence] = {}
    last = max(wanted, default=0)
    for number, raw in enumerate(lines_of(log), 1):
        line = bounded(_strip(raw))
        for hit in open_:
            hit.lines.append(line)
        open_ = [h for h in open_ if len(h.lines) < h.line - h.first + 1 + AFTER]
        for case in wanted.get(number, []):
            made[case] = Occurrence(line=number, lines=[*window, line], first=number - len(window))
            open_.append(made[case])
        window.append(line)
        if number > last and not open_:
            break
    return made


def bounded(line: str) -> str:
    size = line.chars if isinstance(line, _Long) else len(line)
    return line if size <= LINE else f"{line[:LINE]} … [{size - LINE:,} more characters]"


def _strip(line: str) -> str:
    """line without its newline (a _Long has none, and keeps its length)."""
    return line if isinstance(line, _Long) else line.rstrip("\n")


def tail(log: BinaryIO) -> Occurrence | None:
    total = 0
    window: deque[str] = deque(maxlen=BEFORE + 1)
    for total, line in enumerate(lines_of(log), 1):  # noqa: B007  (total is the line count afterwards)
        window.append(bounded(_strip(line)))
    lines = list(window)
    if not lines:
        return None
    return Occurrence(line=total, lines=lines, first=total - len(lines) + 1)


def occurrences(log: BinaryIO, failing: list[Failure]) -> dict[str, Occurrence]:
    """Each failing case's evidence: its own part of the log (sections), else, for a log that does
    not name the case, the first line anywhere holding its message or id, else, for a case that
    died, the end of the log (none when the log goes on past what is read of it: its end is not
    the end). log: log.txt open for reading (rundir.open_plain); each pass reads it by offset."""
    lines = targets(log, failing)
    found = windows(log, {case: line for case, line in lines.items() if line})
    for failure in failing:
        if lines.get(failure.case):
            continue
        occurrence = None
        for needle in needles(failure):
            occurrence = find(lines_of(log), [needle])
            if occurrence is not None:
                break
        if occurrence is None and failure.status in ("crashed", "timeout") and not cut(log):
            occurrence = tail(log)  # a dead process's last words are the evidence
        if occurrence is not None:
            found[failure.case] = occurrence
    return found


def write(results_dir: Path, failing: list[Failure] | None = None) -> dict[str, str]:
    """Save evidence/<case>.txt for each failing case found in log.txt; returns case -> file.
    failing: the cell's failures when the caller has read them already (failures())."""
    saved: dict[str, str] = {}
    try:  # a log.txt the suite made a symlink or a FIFO is not read (it would read elsewhere, or hang);
        # this one open file is what every pass reads, whatever is put in log.txt's place meanwhile
        log = rundir.open_plain(results_dir / rundir.LOG, results_dir)
    except OSError:
        return saved
    with log:
        failing = failures(results_dir / rundir.RESULTS) if failing is None else failing
        found = occurrences(log, failing) if failing else {}
    for failure in failing:
        occurrence = found.get(failure.case)
        if occurrence is None:
            continue
        path = results_dir / rundir.EVIDENCE / f"{failure.case}.txt"
        family = families.classify(failure.message, status=failure.status)
        header = (f"# {failure.case}: {failure.status} ({family}); first occurrence at log.txt line "
                  f"{occurrence.line}, lines {occurrence.first}-{occurrence.first + len(occurrence.lines) - 1}\n")
        body = "".join(f"{occurrence.first + i:>7}{'>' if occurrence.first + i == occurrence.line else ' '} {text}\n"
                       for i, text in enumerate(occurrence.lines))
        rundir.write_plain(path, (header + body).encode("utf-8"), results_dir)
        saved[failure.case] = str(path.relative_to(results_dir))
    return saved
