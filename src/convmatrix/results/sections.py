"""Each case's section of a cell's log.txt, defined once: where its run starts (its pytest -v
line, `…::test_conv[<case>] …`) and its failure block (pytest's `____ test_conv[<case>] ____`
header, up to the next block or the summary), so that whatever looks for a case's failure in
the log (its evidence, its diagnosis) finds its own and not another case's with the same message.

One pass over the log, holding only line numbers: a log may be gigabytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# `suites/test_conv.py::test_conv[<case>] PASSED [ 11%]`, as pytest -v prints a case it starts
# (the status follows on the same line when the case ends). Not the summary's `FAILED <nodeid> - …`.
_STARTS = re.compile(r"^(?!(?:FAILED|ERROR|PASSED|SKIPPED|XFAIL|XPASS) )\S*::test_conv\[(?P<case>[^\]\s]+)\](?: |$)")
# `_________ test_conv[<case>] _________`: pytest's header of a failure block.
_BLOCK = re.compile(r"^_{3,} (?:\S+::)?test_conv\[(?P<case>[^\]\s]+)\] _{3,}$")
# What ends a failure block: the next block's header (any test), or a `===` section line.
_ENDS = re.compile(r"^(?:_{3,} \S.* _{3,}|={3,}.*)$")
SESSION = "test session starts"  # a --continue-run round is a fresh pytest session in the same log


@dataclass(kw_only=True)
class Section:
    """1-based line numbers in log.txt of one case's part of it."""

    case: str
    started: int | None = None  # its first -v line
    ended: int | None = None  # the last line of the pytest session it started in
    block: tuple[int, int] | None = None  # its first failure block: header line, last line


def sections(lines: Iterable[str], cases: Iterable[str] | None = None) -> dict[str, Section]:
    """Every case's section (only those named in `cases`, when given)."""
    wanted = set(cases) if cases is not None else None
    found: dict[str, Section] = {}
    running: list[Section] = []  # started in the current pytest session, not yet ended
    block: Section | None = None
    number = 0
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if block is not None and _ENDS.match(line):
            assert block.block is not None
            block.block = (block.block[0], number - 1)
            block = None
        if SESSION in line and line.startswith("="):
            for section in running:
                section.ended = number - 1
            running = []
        header = _BLOCK.match(line)
        if header:
            failed = _section(found, header["case"], wanted)
            if failed is not None and failed.block is None:
                failed.block = (number, number)
                block = failed
            continue
        start = _STARTS.match(line)
        if start:
            begun = _section(found, start["case"], wanted)
            if begun is not None and begun.started is None:
                begun.started = number
                running.append(begun)
    if block is not None and block.block is not None:
        block.block = (block.block[0], number)
    for section in running:
        section.ended = number
    return found


def _section(found: dict[str, Section], case: str, wanted: set[str] | None) -> Section | None:
    if wanted is not None and case not in wanted:
        return None
    return found.setdefault(case, Section(case=case))
