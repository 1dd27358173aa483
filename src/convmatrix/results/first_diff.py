"""The first line of a failing case's part of its log that the control's part for the same case
does not have: the triage page's decisive evidence, found by comparing two runs of one case.

Each side is the case's section (results/sections.py: its -v line, its failure block); pytest's
own framing (block headers, the echoed test source, `file.py:123:` location lines, separators,
the traceback's `name = repr` dumps of arguments and locals) is no evidence and is left out.
Lines are compared after normalising what differs between any two runs: timestamps, hex
addresses, pids and thread ids, and every other number (sizes and timings differ run to run, as
do the cuDNN versions the two sides load, which the stacks already name). The first line of the
failing side whose normal form the control's side lacks is the answer, with its line number in
the failing cell's log.txt.

Both logs are read once for all of a cell's failing cases, as regular files, each line cut at
LINE_CAP characters; at most MAX_CASES cases a cell.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from convmatrix.results import rundir, sections

LINE_CAP = 4096
SHOWN = 500  # characters of the line kept for the report
MAX_CASES = 200
MAX_LINES = 2000  # lines of one case's section compared (a failure block is a few hundred at most)
LOG_LIMIT = 64 << 20  # bytes of a log read: a case's section is found within them or not at all

_STAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_IDS = re.compile(r"\b(pid|tid|Process|Thread|PID|TID)([=: ]+)\d+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# pytest's framing of a failure block: no evidence of what went wrong. Location lines end an entry
# with the exception's name ("x.py:120: RuntimeError") or, between entries of a long traceback, name
# the function ("x.py:469: in run_on_device").
_FRAMING = re.compile(r"^(?:_{3,} .* _{3,}|_ _ _.*|={3,}.*|-{3,} .*|[\w./\\-]+\.py:\d+: (?:in \w+|\w*)|>.*|\s+.*|)$")
# In a traceback pytest prints each entry's arguments as "name = repr[, name = repr]" (ReprFuncArgs)
# and, with --showlocals, its locals as "name       = repr" (ReprLocals pads names to 10): the
# parameters of the case (`case = Case(op='conv1d', ...)`), never a line the failing code wrote.
# Only before the block's first "Captured ..." section: what the code printed there is evidence.
_ARGUMENTS = re.compile(r"^[A-Za-z_]\w* *= ")
_CAPTURED = re.compile(r"^-{3,} Captured .*-{3,}$")


@dataclass(frozen=True, kw_only=True)
class Difference:
    line: int  # 1-based, in the failing cell's log.txt
    text: str  # the line as printed (cut at SHOWN characters)


def normalise(line: str) -> str:
    """A line with what differs between any two runs of one case put to placeholders."""
    line = _STAMP.sub("<time>", line)
    line = _HEX.sub("<addr>", line)
    line = _IDS.sub(r"\1\2<id>", line)
    return _NUMBER.sub("<n>", line).strip()


def evidence_lines(lines: list[str], section: sections.Section) -> Iterator[tuple[int, str]]:
    """(line number, text) of a case's section that are not pytest's framing."""
    spans = []
    if section.started is not None:
        spans.append((section.started, section.started))
    if section.block is not None:
        spans.append(section.block)
    for first, last in spans:
        traceback = True  # the block starts with the traceback; its Captured sections follow
        for number in range(first, min(last, first + MAX_LINES) + 1):
            text = lines[number - 1] if number - 1 < len(lines) else ""
            if number == section.started:
                text = text.split("]", 1)[-1]  # the -v line: what follows the node id (its status, its output)
            elif _CAPTURED.match(text):
                traceback = False
            if not text.strip() or _FRAMING.match(text) or (traceback and _ARGUMENTS.match(text)):
                continue
            yield number, text


def _read(log: Path) -> list[str]:
    """log.txt's lines, each cut at LINE_CAP characters, from its first LOG_LIMIT bytes (a regular
    file inside its directory only: what a cell wrote is untrusted)."""
    lines = []
    read = 0
    with rundir.open_plain(log, log.parent) as handle:
        # readline with a size, never a bare one: a line of gigabytes without a break is read a
        # capped piece at a time, its first LINE_CAP bytes kept and the rest passed over.
        while read < LOG_LIMIT:
            raw = handle.readline(min(LINE_CAP, LOG_LIMIT - read))
            if not raw:
                break
            read += len(raw)
            lines.append(raw.decode("utf-8", "replace").rstrip("\r\n"))
            while not raw.endswith(b"\n") and read < LOG_LIMIT:
                raw = handle.readline(min(1 << 20, LOG_LIMIT - read))  # the rest of a long line
                if not raw:
                    break
                read += len(raw)
    return lines


def first_differences(case_log: Path, control_log: Path, cases: list[str]) -> dict[str, Difference]:
    """For each of a cell's failing cases, the first line of its section that the control's
    section of the same case lacks (after normalise); none where every line is the control's, a
    log cannot be read, or either side never ran the case."""
    wanted = cases[:MAX_CASES]
    if not wanted:
        return {}
    try:
        mine, theirs = _read(case_log), _read(control_log)
    except (OSError, rundir.NotPlain):
        return {}
    own, control = sections.sections(mine, wanted), sections.sections(theirs, wanted)
    found: dict[str, Difference] = {}
    for case in wanted:
        if case not in own or case not in control:
            continue
        known = {normalise(text) for _, text in evidence_lines(theirs, control[case])}
        for number, text in evidence_lines(mine, own[case]):
            if normalise(text) not in known:
                found[case] = Difference(line=number, text=text[:SHOWN])
                break
    return found
