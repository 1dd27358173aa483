"""Evidence for a failing case: the first occurrence of its failure in its own section of the
cell's log.txt (results/sections.py: its pytest -v line and its failure block), with the 100
lines before it, saved beside the results (evidence/<case>.txt) for the report to link. Four
cases failing with one message get four windows, each its own.

Stdlib only (the runner calls it from nox's interpreter); classify is stdlib-only too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from convmatrix import jsonread
from convmatrix.results import families, rundir, sections

BEFORE = 100  # lines kept before the first occurrence: the triage procedure asks for at least 100
AFTER = 20
LINE = 4096  # characters kept of each line of a window: an evidence file stays ~0.5 MB at most
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
        line = bounded(line.rstrip("\n"))
        if hit is not None:
            hit.lines.append(line)
            if len(hit.lines) >= hit.line - hit.first + 1 + AFTER:
                break
            continue
        if any(text in line for text in wanted):
            hit = Occurrence(line=number, lines=[*window, line], first=number - len(window))
        window.append(line)
    return hit


def targets(log: Path, failing: list[Failure]) -> dict[str, int]:
    """Each failing case's line in the log: the first line of its own failure block holding its
    message (else the block's header); for a case that died with its process, the last line of
    that process's session; 0 for a case the log does not name (then the whole log is searched)."""
    with log.open(encoding="utf-8", errors="replace") as fh:
        parts = sections.sections(fh, [f.case for f in failing])
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
        with log.open(encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                for case, (needle, first, last) in list(searching.items()):
                    if number > last:
                        del searching[case]
                    elif number >= first and needle in line:
                        found[case] = number
                        del searching[case]
                if not searching:
                    break
    return found


def windows(log: Path, lines: dict[str, int]) -> dict[str, Occurrence]:
    """The BEFORE lines before each target line, the line and AFTER after, in one pass."""
    wanted: dict[int, list[str]] = {}
    for case, number in lines.items():
        wanted.setdefault(number, []).append(case)
    window: deque[str] = deque(maxlen=BEFORE)
    open_: list[Occurrence] = []
    made: dict[str, Occurrence] = {}
    last = max(wanted, default=0)
    with log.open(encoding="utf-8", errors="replace") as fh:
        for number, raw in enumerate(fh, 1):
            line = bounded(raw.rstrip("\n"))
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
    return line if len(line) <= LINE else f"{line[:LINE]} … [{len(line) - LINE:,} more characters]"


def tail(log: Path) -> Occurrence | None:
    total = 0
    window: deque[str] = deque(maxlen=BEFORE + 1)
    with log.open(encoding="utf-8", errors="replace") as fh:
        for total, line in enumerate(fh, 1):  # noqa: B007  (total is the line count afterwards)
            window.append(bounded(line.rstrip("\n")))
    lines = list(window)
    if not lines:
        return None
    return Occurrence(line=total, lines=lines, first=total - len(lines) + 1)


def occurrences(log: Path, failing: list[Failure]) -> dict[str, Occurrence]:
    """Each failing case's evidence: its own part of the log (sections), else, for a log that does
    not name the case, the first line anywhere holding its message or id, else, for a case that
    died, the end of the log."""
    lines = targets(log, failing)
    found = windows(log, {case: line for case, line in lines.items() if line})
    for failure in failing:
        if lines.get(failure.case):
            continue
        occurrence = None
        for needle in needles(failure):
            with log.open(encoding="utf-8", errors="replace") as fh:
                occurrence = find(fh, [needle])
            if occurrence is not None:
                break
        if occurrence is None and failure.status in ("crashed", "timeout"):
            occurrence = tail(log)  # a dead process's last words are the evidence
        if occurrence is not None:
            found[failure.case] = occurrence
    return found


def write(results_dir: Path, failing: list[Failure] | None = None) -> dict[str, str]:
    """Save evidence/<case>.txt for each failing case found in log.txt; returns case -> file.
    failing: the cell's failures when the caller has read them already (failures())."""
    log = results_dir / rundir.LOG
    saved: dict[str, str] = {}
    try:  # a log.txt the suite made a symlink or a FIFO is not read (it would read elsewhere, or hang)
        rundir.open_plain(log, results_dir).close()
    except OSError:
        return saved
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
