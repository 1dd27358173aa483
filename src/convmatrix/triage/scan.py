"""Triage: from a failed job's log to its first cause, family, collateral and remedies.

How a log is read (the same rules on every path, so that they agree):

- **Lines.** A line counts by its first ``LINE_CAP`` bytes; the rest of a longer line is read
  past, never kept (a 50 MB line costs its reading, not its memory).
- **Candidates.** Only lines with a needle (``FAMILY_NEEDLES``; also ``COLLATERAL_NEEDLES`` after
  the cause) in their kept bytes are looked at. Plain files: ripgrep (or GNU grep) lists them,
  and the lines around each are read from the file by offset (``_FileLines``). Gzip and stdin:
  ``bytes.find`` over chunks of whole lines (``_BlockLines``, ``_needle_lines``).
- **Code is not a message.** A traceback's ``File "...", line N`` lines and the source that
  Python echoes under them, and the source line under a Python warning, are skipped: a
  ``if "CUDNN_STATUS_NOT_SUPPORTED" in str(err):`` there is code, not an error.
- **Messages.** A candidate starts one message, classified once (``classify.classify``); its
  lines are consumed and never part of another message:
  a torch warning wrapped over several lines, from its first line (which may be before the
  candidate, without a needle of its own) to the line that closes it with
  ``(Triggered internally at ...)`` or ``(function ...)``: a warning on every one of its lines;
  otherwise the candidate and up to ``_JOIN`` following lines that continue it (same launcher
  tags, not indented, not the start of a new record) and carry no needle of their own, unless
  they go on with a word cut at the line end: an identifier or phrase cut by a wrap, such as
  ``CUDNN_STATUS_NOT_`` / ``SUPPORTED``.
- **Fatal** unless the message is a warning (a wrapped torch warning, or a warning marker on its
  first line). The first fatal message is the cause; the first warning before it is reported too.

Memory is bounded by the chunk, ``LINE_CAP`` times the lines kept around a candidate (``context``
before the cause, ``LOOKAHEAD`` after), and ``MAX_COLLATERAL``; the work is linear in the log.

A cell's log.txt (``first_cause``) is the cell's, not the user's: it is opened once, relative to
its directory's descriptor, never through a link or as a FIFO (``rundir.open_plain``), and only
that open file is read (``scan_open``): by offset, its first ``rundir.MAX_LOG`` bytes, and rg or
grep read a copy of those bytes through a pipe (``_copy``), never the path. Past the bound the
first bytes are triaged and a warning says the log was cut.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import heapq
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol

from convmatrix.errors import BadInput
from convmatrix.escape import one_line
from convmatrix.results import rundir
from convmatrix.results.families import classify, strip_ansi
from convmatrix.results.read import FirstCause
from convmatrix.triage import ranks, remedies

CHUNK = 4 << 20  # bytes read at a time from a stream
LINE_CAP = 16 << 10  # bytes of a line that count
DEFAULT_CONTEXT = 100
MAX_WRAP = 8  # lines one wrapped warning may span
_JOIN = 2  # following lines that may continue a message (a wrapped identifier or phrase)
LOOKAHEAD = 12  # lines after a candidate that may be read: a wrap, the elastic Root Cause fields
LOOKBACK = MAX_WRAP  # lines before a candidate that may be read: a wrap's start, a traceback frame
MAX_COLLATERAL = 50  # collateral lines kept; the rest are counted
_MIN_WRAP_WIDTH = 40  # narrower lines are not taken for a wrap's cut (as in classify)

# Every marker of every family in classify carries one of these (case-sensitive, on raw bytes).
FAMILY_NEEDLES: tuple[bytes, ...] = (
    b"CUDA",  # CUDA error: ..., CUDA out of memory, CUDA_ERROR_...
    b"CUDNN",  # CUDNN_STATUS_*, CUDNN_BACKEND_*
    b"cuDNN",
    b"CuDNN",
    b"cudnn",  # libcudnn*, cudnnException, [cudnn_frontend]
    b"cudaError",  # cudaErrorIllegalAddress, ...
    b"cuda runtime error",  # torch < 1.0
    b"NVIDIA",
    b"nvidia",
    b"nable to find",  # GET was unable to find an engine / Unable to find a valid cuDNN algorithm
    b"xecution plans",  # [cudnn_frontend] No execution plans ...
    b"umeric mismatch",
    b"out of memory",
    b"supports this GPU",
    b"PyTorch installation",
)
# Not plain "cuda": it is in every "cuda:0" of a healthy log, and each such line would be
# classified for nothing.
# Consequences of the first cause; searched only once a cause was found.
COLLATERAL_NEEDLES: tuple[bytes, ...] = (
    b"Watchdog caught",
    b"ChildFailedError",
    b"SIGABRT",
    b"exitcode",
    b"ProcessGroupNCCL",
    b"Root Cause",
    b"closing signal",
)
_ALL_NEEDLES = FAMILY_NEEDLES + COLLATERAL_NEEDLES

# A warning, not an error: these marks (led by literals, which keeps the search fast on long
# lines; "Warning:" and "WARNING" count as whole words only), or a glog warning header.
_WARNING_MARK = re.compile(
    r"Plan failed with a |UserWarning|Warning:|WARNING|\[W\d{4} "
    r"|is not compatible with the current PyTorch installation|no longer supports this GPU"
)
_GLOG_WARNING = re.compile(r"\s*W\d{4} ")
# What closes a torch warning: TORCH_WARN's origin, as Python and as glog print it. Searched in
# the wrapped lines glued together, so a cut inside it (or a dropped space) does not hide it.
_TRAILER = re.compile(r"\(\s*Triggered\s*internally\s*at\b[^)]*\)|\(\s*function\s*\w+\s*\)")
# Python's warnings format: "path.py:N: Category: message", its source line under it.
_PY_WARNING = re.compile(r"\.py:\d+: (?:[A-Za-z_]\w*\.)*\w*Warning: ")
_FRAME = re.compile(r'\s*File "[^"]*", line \d+')
# The start of a new record, which no wrapped text continues into (matched after the tags).
_LEVELS = r"(?:CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG|TRACE|NOTICE)\b"
_NEW_RECORD = re.compile(
    r"Traceback \(most recent call last\)|During handling of|The above exception"
    r"|(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Interrupt|Exit|Failure)\b"  # exception types
    r"|(?:Error|Exception|Warning)\b"
    r"|[^\s:]+:\d+(?::\d+)?: "  # path:line: (warnings, compilers)
    r"|\[[\w\s:.,-]*\]"  # [E1202 ...], [2024-...], [0]:
    r"|[IWEF]\d{4} "  # glog
    r"|" + _LEVELS + r"|\d{4}-\d\d-\d\d"  # log levels, dates
    r"|={3,}|-{3,}|\*{3,}|#"  # rules, comments
)
# A consequence of the cause (after it): a timeout, a signal, an exit (led by literals; "exitcode"
# counts as a whole word only).
_COLLATERAL = re.compile(
    r"Watchdog caught collective operation timeout|ChildFailedError|Signal \d+ \(SIG\w+\)"
    r"|exitcode|ProcessGroupNCCL.*(?:abort|Abort|timeout|Timeout|terminat|shutdown)"
    r"|closing signal SIG\w+"
)


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Lines(Protocol):
    """The log's lines, by 1-based number, around the candidate being looked at."""

    def raw(self, number: int) -> bytes | None:
        """The line's first ``LINE_CAP`` bytes without its newline; None outside the log."""
        ...


@dataclass(frozen=True)
class _Hit:
    family: str
    line: int
    text: str
    fatal: bool
    where: ranks.Where


@dataclass(frozen=True)
class _Collateral:
    line: int
    where: ranks.Where
    text: str


def _clean(raw: bytes) -> str:
    return strip_ansi(raw.decode("utf-8", "replace").rstrip("\r\n"))


def _indent(body: str) -> int:
    return len(body) - len(body.lstrip(" \t"))


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _is_warning(text: str) -> bool:
    if _GLOG_WARNING.match(text):
        return True
    for mark in _WARNING_MARK.finditer(text):
        start, end = mark.span()
        if mark.group(0) in ("Warning:", "WARNING"):
            if start > 0 and _is_word(text[start - 1]):
                continue
            if mark.group(0) == "WARNING" and end < len(text) and _is_word(text[end]):
                continue
        return True
    return False


def _is_collateral(text: str) -> bool:
    for mark in _COLLATERAL.finditer(text):
        start, end = mark.span()
        if mark.group(0) == "exitcode" and (
            (start > 0 and _is_word(text[start - 1])) or (end < len(text) and _is_word(text[end]))
        ):
            continue
        return True
    return False


def _family(text: str) -> str | None:
    family = classify(text)
    return None if family == "other" else family


# -- the scanner: candidates to messages to hits ----------------------------------------------------
class _Scanner:
    """Turns candidate lines, given in order, into the cause, warnings, families and collateral."""

    def __init__(self, context: int, lines: _Lines) -> None:
        self.context = context
        self.lines = lines
        self.consumed = 0  # the last line that belongs to a message already classified
        self.cause: _Hit | None = None
        self.first_warning: _Hit | None = None
        self.context_before: list[str] = []
        self.families: dict[str, _Hit] = {}
        self.collateral: list[_Collateral] = []
        self.collateral_omitted = 0
        self.root_cause: dict[str, str] = {}
        self._texts: dict[int, str | None] = {}
        self._warnings: dict[int, bool] = {}

    def needles(self) -> tuple[bytes, ...]:
        return FAMILY_NEEDLES if self.cause is None else _ALL_NEEDLES

    def text(self, number: int) -> str | None:
        if number not in self._texts:
            raw = self.lines.raw(number) if number >= 1 else None
            self._texts[number] = None if raw is None else _clean(raw)
        return self._texts[number]

    def warned(self, number: int) -> bool:
        """Line ``number`` carries a warning mark."""
        if number not in self._warnings:
            self._warnings[number] = _is_warning(self.text(number) or "")
        return self._warnings[number]

    def _split(self, number: int) -> tuple[str, str] | None:
        text = self.text(number)
        return None if text is None else ranks.split_prefix(text)

    def candidate(self, number: int) -> None:
        """Line ``number`` has a needle: classify the message it starts, unless already done."""
        if number <= self.consumed:
            return
        if len(self._texts) > 4 * (LOOKAHEAD + LOOKBACK):
            self._texts = {n: t for n, t in self._texts.items() if n >= number - LOOKBACK}
            self._warnings = {n: w for n, w in self._warnings.items() if n >= number - LOOKBACK}
        text = self.text(number)
        if text is None:
            return
        tags, body = ranks.split_prefix(text)
        if self._is_code(number, tags, body):
            return
        if self.cause is not None:
            self._after_cause(number, text)
        first, last, wrapped = self._message(number)
        texts = [self.text(n) or "" for n in range(first, last + 1)]
        family = _family("\n".join(texts))
        self.consumed = last
        first_tags, _ = ranks.split_prefix(texts[0])
        glued = "".join(ranks.split_prefix(line)[1] for line in texts)
        if wrapped and _PY_WARNING.search(glued) and self._is_indented(last + 1, first_tags):
            self.consumed = last + 1  # the warning's source line
        if family is not None:
            fatal = not wrapped and not self.warned(first)
            self._hit(family, first, texts[0], fatal)

    # -- code ---------------------------------------------------------------------------------------
    def _is_code(self, number: int, tags: str, body: str) -> bool:
        """A traceback's frame line or the source echoed under it, or a warning's source line."""
        if _FRAME.match(body):
            return True
        indent = _indent(body)
        if indent == 0:
            return False
        lowest = indent
        for above in range(number - 1, number - 1 - LOOKBACK, -1):
            split = self._split(above)
            if split is None or split[0] != tags or not split[1].strip():
                return False
            line_indent = _indent(split[1])
            if _FRAME.match(split[1]):
                return line_indent < lowest
            if line_indent == 0:
                # Python's warnings format puts the source line right under the warning.
                return above == number - 1 and indent >= 2 and _PY_WARNING.search(split[1]) is not None
            lowest = min(lowest, line_indent)
        return False

    def _is_indented(self, number: int, tags: str) -> bool:
        split = self._split(number)
        return split is not None and split[0] == tags and _indent(split[1]) >= 2 and bool(split[1].strip())

    # -- messages -----------------------------------------------------------------------------------
    def _continues(self, number: int, *, cut: bool = False) -> bool:
        """Line ``number`` can continue the text of the line above it: the same launcher tags (or
        none: a viewer that wraps a tagged line repeats no tags), not indented, not blank, and not
        the start of a new record (whatever it starts with, if the line above was ``cut`` at a
        fixed width)."""
        split, above = self._split(number), self._split(number - 1)
        if split is None or above is None or split[0] not in ("", above[0]):
            return False
        body = split[1]
        if not body.strip() or _indent(body) > 1:
            return False
        return cut or _NEW_RECORD.match(body.lstrip()) is None

    def _message(self, number: int) -> tuple[int, int, bool]:
        """``(first, last, wrapped warning)``: the lines of the message that line ``number`` is in."""
        start = self._wrapped_warning_start(number)
        if start is None and self.warned(number):
            start = number
        end = None if start is None else self._wrapped_warning_end(start)
        if start is not None and end is not None:
            # Pieces of one width before the marker's piece are the same line, cut by a viewer.
            width = len(self.text(start) or "")
            while (
                start < end
                and start - 1 > max(self.consumed, end - MAX_WRAP)
                and len(self.text(start - 1) or "") == width
                and self._continues(start, cut=True)
            ):
                start -= 1
            return start, end, True
        last = number
        needles = self.needles()
        for following in range(number + 1, number + 1 + _JOIN):
            if not self._continues(following):
                break
            # A line with a needle is a message of its own, unless it is the rest of a word.
            raw = self.lines.raw(following) or b""
            if any(needle in raw for needle in needles) and not self._cut_mid_word(following):
                break
            last = following
        return number, last, False

    def _cut_mid_word(self, number: int) -> bool:
        """The line above, as long as a wrap makes lines, ends in a word that line ``number`` goes
        on with (a cut, not a break)."""
        above, split = self.text(number - 1), self._split(number)
        if above is None or len(above) < _MIN_WRAP_WIDTH or split is None or not split[1]:
            return False
        head = split[1][0]
        return _is_word(above[-1]) and (head.islower() or head.isdigit() or head == "_")

    def _wrapped_warning_end(self, start: int) -> int | None:
        """The line that closes the torch warning opened at ``start``; None if none does."""
        glued = ""
        for number in range(start, start + MAX_WRAP):
            split = self._split(number)
            if split is None or (number > start and not self._continues(number)):
                return None
            glued += split[1]
            if _TRAILER.search(glued):
                return number
        return None

    def _wrapped_warning_start(self, number: int) -> int | None:
        """The first line of a wrapped torch warning that line ``number`` continues, if any."""
        below = number
        while below - 1 > max(self.consumed, number - MAX_WRAP):
            if not self._continues(below):
                return None
            above = below - 1
            if self.warned(above):
                end = self._wrapped_warning_end(above)
                return above if end is not None and end >= number else None
            below = above
        return None

    # -- hits and what follows the cause --------------------------------------------------------------
    def _hit(self, family: str, line: int, text: str, fatal: bool) -> None:
        hit = _Hit(family, line, text, fatal, ranks.of_line(text))
        self.families.setdefault(family, hit)
        if self.cause is not None:
            return
        if fatal:
            self.cause = hit
            first = max(1, line - self.context)
            self.context_before = [self.text(n) or "" for n in range(first, line)]
        elif self.first_warning is None:
            self.first_warning = hit

    def _after_cause(self, number: int, text: str) -> None:
        if _is_collateral(text):
            if len(self.collateral) < MAX_COLLATERAL:
                where = ranks.of_collateral(text, self.text(number - 1) or "")
                self.collateral.append(_Collateral(number, where, text))
            else:
                self.collateral_omitted += 1
        if "Root Cause" in text:
            for following in range(number + 1, number + LOOKAHEAD):
                field_text = self.text(following)
                if field_text is None:
                    break
                found = ranks.root_cause_field(field_text)
                if found is not None:
                    self.root_cause.setdefault(*found)

    # -- the result -------------------------------------------------------------------------------------
    def result(self, warnings: list[str]) -> dict[str, Any]:
        """What ``--format json`` prints (built from the scanner's state, which it leaves as is)."""
        fatal = self.cause is not None
        cause = self.cause if self.cause is not None else self.first_warning
        where = ranks.resolve(cause.where, self.root_cause) if cause is not None else ranks.Where()
        family = cause.family if cause is not None else None
        warning = self.first_warning if fatal else None
        return {
            "family": family,
            "line": cause.line if cause is not None else None,
            "text": cause.text if cause is not None else None,
            "rank": where.rank,
            "rank_source": where.rank_source,
            "node": where.node,
            "device": where.device,
            "fatal": fatal,
            "context_before": list(self.context_before) if fatal else [],
            "first_warning": (
                {"line": warning.line, "family": warning.family, "text": warning.text} if warning else None
            ),
            "families": [
                {"family": h.family, "line": h.line, "rank": h.where.rank, "fatal": h.fatal, "text": h.text}
                for h in sorted(self.families.values(), key=lambda h: h.line)
            ],
            "collateral": [
                {"line": c.line, "rank": c.where.rank, "node": c.where.node, "text": c.text, "collateral": True}
                for c in self.collateral
            ],
            "collateral_omitted": self.collateral_omitted,
            "root_cause": dict(self.root_cause) or None,
            "remedies": remedies.remedies_for(family),
            "verify": remedies.verify_commands(family),
            "warnings": warnings,
        }


# -- streams (gzip, stdin, files without grep): chunks of whole lines ---------------------------------
class _BlockLines:
    """A stream's current block of whole lines, and the kept bytes of the lines before it."""

    def __init__(self, keep: int) -> None:
        self.data = b""
        self.first = 1  # the number of the block's first line
        self.before: deque[bytes] = deque(maxlen=keep)
        self._anchor = (1, 0)
        self._starts: dict[int, int] = {}

    def load(self, data: bytes) -> None:
        self.data = data
        self._anchor = (self.first, 0)
        self._starts = {}

    def anchor(self, number: int, start: int) -> None:
        """Line ``number`` starts at ``start``: the lines around it are found from there."""
        if len(self._starts) > 4 * (LOOKAHEAD + LOOKBACK):
            self._starts = {}
        self._anchor = (number, start)

    def raw(self, number: int) -> bytes | None:
        if number < self.first:
            back = self.first - number
            return self.before[-back] if back <= len(self.before) else None
        start = self._start(number)
        if start is None:
            return None
        end = self.data.find(b"\n", start, start + LINE_CAP)
        return self.data[start : end if end >= 0 else start + LINE_CAP]

    def _start(self, number: int) -> int | None:
        if number in self._starts:
            return self._starts[number]
        known, pos = self._anchor
        step = 1 if number > known else -1
        for current in range(known + step, number + step, step):
            if step > 0:
                newline = self.data.find(b"\n", pos)
                if newline < 0 or newline + 1 >= len(self.data):
                    return None
                pos = newline + 1
            else:
                pos = self.data.rfind(b"\n", 0, pos - 1) + 1
            self._starts[current] = pos
        return pos

    def advance(self, cut: int, keep: int) -> None:
        """The lines of ``data[:cut]`` are done: keep the last ``keep`` of them as the lines before."""
        lines: list[bytes] = []
        end = cut
        while len(lines) < keep and end > 0:
            start = self.data.rfind(b"\n", 0, end - 1) + 1
            lines.append(self.data[start : min(end - 1, start + LINE_CAP)])
            end = start
        if end > 0:
            self.before.clear()  # older lines would not be contiguous with these
        self.before.extend(reversed(lines))
        self.first += self.data.count(b"\n", 0, cut)


def _lines_with(data: bytes, needle: bytes, begin: int, end: int) -> Iterator[int]:
    """Starts of the lines in data[begin:end] (begin a line start) with ``needle`` in their first
    ``LINE_CAP`` bytes, in order."""
    pos = data.find(needle, begin, end)
    while pos >= 0:
        lowest = pos + len(needle) - LINE_CAP - 1  # a newline here or later starts a line that keeps it
        newline = data.rfind(b"\n", max(begin, lowest), pos)
        if newline >= 0:
            yield newline + 1
        elif lowest < begin:
            yield begin
        newline = data.find(b"\n", pos + len(needle), end)
        if newline < 0:
            return
        pos = data.find(needle, newline + 1, end)


def _needle_lines(data: bytes, needles: tuple[bytes, ...], begin: int, end: int) -> Iterator[int]:
    """Starts of the lines in data[begin:end] with any of ``needles``, in order, each once."""
    last = -1
    for start in heapq.merge(*(_lines_with(data, needle, begin, end) for needle in needles)):
        if start != last:
            yield start
            last = start


def _search_block(scanner: _Scanner, lines: _BlockLines, cut: int) -> None:
    """Hand the candidates of data[:cut] to the scanner, in order."""
    data = lines.data
    begin, counted, number = 0, 0, lines.first
    while begin < cut:
        had_cause = scanner.cause is not None
        for start in _needle_lines(data, scanner.needles(), begin, cut):
            number += data.count(b"\n", counted, start)
            counted = start
            lines.anchor(number, start)
            scanner.candidate(number)
            if scanner.cause is not None and not had_cause:
                # The collateral needles apply from the next line on.
                newline = data.find(b"\n", start, cut)
                if newline < 0:
                    return
                begin = newline + 1
                break
        else:
            return


def _nth_newline_from_end(buf: bytes, n: int) -> int:
    """Position just after the n-th newline from the end, or -1 if there are not that many."""
    pos = len(buf)
    for _ in range(n):
        pos = buf.rfind(b"\n", 0, pos)
        if pos < 0:
            return -1
    return pos + 1


def _capped(data: bytes) -> bytes:
    """``data`` with each line cut to ``LINE_CAP`` bytes, where that makes a difference."""
    if len(data) <= (LOOKAHEAD + 2) * (LINE_CAP + 1):
        return data
    return b"\n".join(line[:LINE_CAP] for line in data.split(b"\n"))


def _read(stream: Readable, size: int, name: str) -> bytes:
    try:
        return stream.read(size)
    except (OSError, EOFError, ValueError) as exc:
        raise BadInput(f"{name}: {exc}") from None


def _blocks(stream: Readable, name: str) -> Iterator[tuple[bytes, int]]:
    """``(data, cut)``: data[:cut] is whole lines to search, data[cut:] the lines after them
    (``LOOKAHEAD`` of them, or the rest at the end), searched with the next block."""
    carry = b""
    skipping = False  # inside a line longer than LINE_CAP, whose kept bytes are in carry
    while True:
        chunk = _read(stream, CHUNK, name)
        if skipping and chunk:
            newline = chunk.find(b"\n")
            if newline < 0:
                continue
            chunk, skipping = chunk[newline:], False
        if not chunk:
            if carry:
                yield carry, len(carry)
            return
        data = carry + chunk if carry else chunk
        unfinished = data.rfind(b"\n") + 1
        if len(data) - unfinished > LINE_CAP:
            data, skipping = data[: unfinished + LINE_CAP], True
        cut = _nth_newline_from_end(data, LOOKAHEAD + 1)
        if cut > 0:
            yield data, cut
        carry = _capped(data[max(cut, 0) :])


# Triage's time bound, by the size of its input: a 5.5 MB gzip of 20 million matching lines kept
# it busy past 300 s. Past the bound it stops, says where, and reports what it found so far.
TIME_BASE_S = 60.0
TIME_PER_MB_S = 2.0
UNSIZED_MAX_S = 600.0  # an input of unknown size (stdin, a pipe, a device): its bound grows with
# what was read, up to this (/dev/zero would otherwise be read forever)


def time_bound(size: int) -> float:
    return TIME_BASE_S + TIME_PER_MB_S * size / 1e6


def input_size(stream: object) -> int | None:
    """The bytes of a stream's file (compressed, for a gzip), when it is a regular file."""
    try:
        info = os.fstat(stream.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _scan_stream(stream: Readable, context: int, name: str,
                 size: int | None = None) -> tuple[_Scanner, int, str | None]:
    """The scanner after the stream (or as far as the time bound let it read), the number of lines
    read, and, when it stopped early, the line that says so. size: the input's bytes when known
    (else the bound grows with what was read)."""
    lines = _BlockLines(keep=max(context, LOOKBACK))
    scanner = _Scanner(context, lines)
    started, read = time.monotonic(), 0
    for data, cut in _blocks(stream, name):
        lines.load(data)
        _search_block(scanner, lines, cut)
        lines.advance(cut, keep=max(context, LOOKBACK) if scanner.cause is None else LOOKBACK)
        read += cut
        took = time.monotonic() - started
        bound = time_bound(size) if size is not None else min(time_bound(read), UNSIZED_MAX_S)
        if took > bound:
            return scanner, lines.first - 1, (
                f"{name}: stopped after {took:.0f} s at line {lines.first - 1}: triage's time bound for this input "
                f"({bound:.0f} s: {TIME_BASE_S:.0f} s and {TIME_PER_MB_S:.0f} s a MB); the rest was not read")
    return scanner, lines.first - 1, None


def scan(stream: Readable, context: int = DEFAULT_CONTEXT, *, name: str = "-") -> dict[str, Any]:
    """Triage a binary stream of plain text; the result is what ``--format json`` prints."""
    _check_context(context, name)
    scanner, _, stopped = _scan_stream(stream, context, name, input_size(stream))
    return scanner.result([stopped] if stopped else [])


# -- gzip ----------------------------------------------------------------------------------------------
_GZIP_MAGIC = b"\x1f\x8b"


class _Gunzip:
    """A gzip stream (one or more members) decompressed as it is read.

    A stream cut short or corrupt ends where it stops making sense, with ``problem`` saying why,
    so that what came before it is still triaged.
    """

    def __init__(self, raw: Readable, name: str) -> None:
        self._raw = raw
        self._name = name
        self._unzip = zlib.decompressobj(wbits=31)
        self._input = b""
        self._in_member = False
        self._done = False
        self.problem: str | None = None
        self.produced = 0

    def read(self, size: int = -1, /) -> bytes:
        limit = size if size > 0 else CHUNK
        pieces: list[bytes] = []
        got = 0
        while got < limit and not self._done:
            if self._unzip.eof:  # a member ended; another may follow
                self._input = self._unzip.unused_data + self._input
                self._unzip = zlib.decompressobj(wbits=31)
                self._in_member = False
            if not self._input:
                self._input = _read(self._raw, 1 << 16, self._name)
                if not self._input:
                    if self._in_member:
                        rest = self._unzip.flush()  # output zlib still holds
                        pieces.append(rest)
                        got += len(rest)
                        if not self._unzip.eof:
                            self.problem = "truncated gzip: the stream ends before its end-of-stream marker"
                    self._done = True
                    break
            if not self._in_member and not self._input.strip(b"\0"):
                self._input = b""  # zero padding after the last member
                continue
            self._in_member = True
            try:
                piece = self._unzip.decompress(self._input, limit - got)
            except zlib.error as exc:
                self.problem = f"corrupt gzip data ({exc})"
                self._done = True
                break
            self._input = self._unzip.unconsumed_tail
            pieces.append(piece)
            got += len(piece)
        self.produced += got
        return b"".join(pieces)


class _Capped:
    """At most ``limit`` bytes of a stream; ``cut`` once there was more."""

    def __init__(self, stream: Readable, limit: int) -> None:
        self._stream = stream
        self.limit = limit
        self.given = 0
        self.cut = False

    def read(self, size: int = -1, /) -> bytes:
        left = self.limit - self.given
        if left <= 0:
            self.cut = self.cut or bool(self._stream.read(1))
            return b""
        data = self._stream.read(min(size if size > 0 else CHUNK, left))
        self.given += len(data)
        return data


def _scan_gzip(raw: Readable, context: int, name: str, limit: int | None = None) -> dict[str, Any]:
    """limit: bytes of decompressed text triaged at most (a cell's log: rundir.MAX_LOG)."""
    unzip = _Gunzip(raw, name)
    text: Readable = unzip if limit is None else _Capped(unzip, limit)
    scanner, count, stopped = _scan_stream(text, context, name, input_size(raw))
    said = [stopped] if stopped else []
    if isinstance(text, _Capped) and text.cut:
        said.append(f"{name}: more than {text.limit:,} bytes decompressed; only those were triaged, not the rest")
    if unzip.problem is None:
        return scanner.result(said)
    if unzip.produced == 0:
        raise BadInput(f"{name}: {unzip.problem}")
    return scanner.result([*said, f"{name}: {unzip.problem}; triaged the {count} lines before it"])


# -- plain files: the grep prefilter -------------------------------------------------------------------
class _FileLines:
    """Lines of a plain file, read by offset around the prefilter's hits (each line once)."""

    BACK_BLOCK = 1 << 16  # bytes read at a time when looking backwards for a line's start

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._kept: dict[int, bytes | None] = {}
        self._starts: dict[int, int] = {1: 0}
        self._anchor = 1

    def anchor(self, number: int, offset: int) -> None:
        """A hit: line ``number`` starts at ``offset``; the lines around it are read from there."""
        if len(self._kept) > 4 * (LOOKAHEAD + LOOKBACK):
            self._kept = {n: raw for n, raw in self._kept.items() if n >= number - LOOKBACK}
            self._starts = {n: off for n, off in self._starts.items() if n >= number - LOOKBACK}
        self._starts[number] = offset
        self._anchor = number

    def raw(self, number: int) -> bytes | None:
        if number < 1:
            return None
        if number not in self._kept:
            # Walk to the nearest known line start; the anchor's is always known.
            step = -1 if number >= self._anchor else 1
            known = number
            while known not in self._starts:
                known += step
            if known <= number:
                self._read_forward(known, number)
            else:
                self._read_backward(known, number)
        return self._kept.get(number)

    def _read_forward(self, known: int, number: int) -> None:
        handle = self._handle
        handle.seek(self._starts[known])
        for current in range(known, number + 1):
            line = handle.readline(LINE_CAP)
            if len(line) == LINE_CAP and not line.endswith(b"\n"):
                while (rest := handle.readline(1 << 16)) and not rest.endswith(b"\n"):
                    pass  # the part of a long line that does not count
            if not line:
                self._kept[current] = None
                return
            self._kept[current] = line[:-1] if line.endswith(b"\n") else line
            self._starts[current + 1] = handle.tell()

    def _read_backward(self, known: int, number: int) -> None:
        for current in range(known - 1, number - 1, -1):
            end = self._starts[current + 1] - 1  # the newline that ends line ``current``
            start = self._line_start(end)
            self._handle.seek(start)
            self._starts[current] = start
            self._kept[current] = self._handle.read(min(LINE_CAP, end - start))

    def _line_start(self, end: int) -> int:
        """The start of the line whose newline is at offset ``end``."""
        low = end
        while low > 0:
            high, low = low, max(0, low - self.BACK_BLOCK)
            self._handle.seek(low)
            newline = self._handle.read(high - low).rfind(b"\n")
            if newline >= 0:
                return low + newline + 1
        return 0


def _prefilter_hits(pipe: IO[bytes]) -> Iterator[tuple[int, int]]:
    """``(line number, line offset)`` of each line grep prints, without keeping the lines."""
    at_start = True
    while piece := pipe.readline(1 << 16):
        if at_start:
            number, offset, _ = piece.split(b":", 2)
            yield int(number), int(offset)
        at_start = piece.endswith(b"\n")


def _grep_needles() -> list[str]:
    args: list[str] = []
    for needle in _ALL_NEEDLES:
        args += ["-e", needle.decode()]
    return args


def ripgrep() -> str | None:
    """The `rg` the `ripgrep` wheel (a dependency) put beside this interpreter, which is on PATH only
    when its venv is activated, else one on PATH (a system package), else None."""
    beside = Path(sys.executable).parent / "rg"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("rg")


def _prefilter(source: str) -> list[str] | None:
    """The prefilter's command reading source (a path, or "-": its standard input); None when
    it is turned off (CONVMATRIX_TRIAGE_GREP=0) or there is neither rg nor grep."""
    if os.environ.get("CONVMATRIX_TRIAGE_GREP", "1") == "0":
        return None
    # ripgrep's SIMD multi-literal search keeps its speed with many needles; GNU grep's does not.
    rg, grep = ripgrep(), shutil.which("grep")
    if rg is not None:
        cmd = [rg, "--no-config", "--no-heading", "--no-mmap", f"--max-columns={LINE_CAP}", "-a", "-n", "-b", "-F"]
        return [*cmd, *_grep_needles(), "--", source]
    if grep is not None:
        return [grep, "-a", "-n", "-b", "-F", *_grep_needles(), "--", source]
    return None


def _scan_hits(cmd: list[str], handle: IO[bytes], context: int, stdin: int | None = None) -> dict[str, Any] | None:
    """Triage handle's lines at the hits cmd prints; None if cmd failed. stdin: a pipe's read end
    for cmd, closed here once cmd has it."""
    lines = _FileLines(handle)
    scanner = _Scanner(context, lines)
    try:
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env={**os.environ, "LC_ALL": "C"})
    finally:
        if stdin is not None:
            os.close(stdin)  # the child's copy is its own: the writer sees EPIPE once the child is gone
    assert proc.stdout is not None
    with proc:
        for number, offset in _prefilter_hits(proc.stdout):
            lines.anchor(number, offset)
            raw = lines.raw(number)
            if raw is not None and any(needle in raw for needle in scanner.needles()):
                scanner.candidate(number)
    if proc.returncode not in (0, 1):
        return None
    return scanner.result([])


def _scan_with_grep(path: str, context: int) -> dict[str, Any] | None:
    """Triage a plain file with grep as the prefilter (several times faster); None if grep failed."""
    cmd = _prefilter(path)
    if cmd is None:
        return None
    with open(path, "rb") as handle:
        return _scan_hits(cmd, handle, context)


_PIPE_SIZE = 1 << 20  # the copy's pipe: Linux's largest for anyone (/proc/sys/fs/pipe-max-size)


def _copy(source: int, pipe: int, limit: int) -> None:
    """source's first limit bytes into pipe, by offset (the kernel's sendfile where it can; the
    descriptor's own offset is not moved), then the pipe closed. A reader gone (EPIPE) ends it."""
    offset = 0
    try:
        while offset < limit:
            want = min(_PIPE_SIZE, limit - offset)
            try:
                sent = os.sendfile(pipe, source, offset, want)
            except OSError as exc:
                if isinstance(exc, BrokenPipeError):
                    raise
                data = os.pread(source, want, offset)  # no sendfile from this file to a pipe here
                sent = 0
                while sent < len(data):
                    sent += os.write(pipe, data[sent:])
            if sent == 0:
                break
            offset += sent
    except BrokenPipeError:
        pass
    finally:
        os.close(pipe)


def _scan_fd_with_grep(handle: BinaryIO, context: int, limit: int) -> dict[str, Any] | None:
    """_scan_with_grep for an open file: the prefilter reads a copy of its first limit bytes
    through a pipe (a thread feeds it: _copy), never its path; the lines around each hit are read
    from the same open file by offset, within the same bytes. None if grep failed or is off."""
    cmd = _prefilter("-")
    if cmd is None:
        return None
    read_end, write_end = os.pipe()
    with contextlib.suppress(AttributeError, OSError):  # F_SETPIPE_SZ is Linux's; a smaller pipe works too
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    feeder = threading.Thread(target=_copy, args=(handle.fileno(), write_end, limit), daemon=True)
    try:
        feeder.start()
    except BaseException:
        os.close(write_end)
        os.close(read_end)
        raise
    try:
        with rundir.window(handle, limit) as lines:
            return _scan_hits(cmd, lines, context, stdin=read_end)
    finally:
        feeder.join()


# -- entry point -------------------------------------------------------------------------------------
def _check_context(context: int, name: str) -> None:
    if context < 0:
        raise BadInput(f"{name}: --context must be >= 0, got {context}")


def _stdin() -> Any:
    stream = sys.stdin
    if stream is None:
        raise BadInput("<stdin>: standard input is closed")
    return getattr(stream, "buffer", stream)


def scan_path(path: str, context: int = DEFAULT_CONTEXT) -> dict[str, Any]:
    """Triage a file (``-`` for stdin; gzip is detected by its magic bytes or a ``.gz`` name)."""
    _check_context(context, path)
    if path == "-":
        name = "<stdin>"
        raw = _stdin()
        try:
            peek = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
        except (OSError, ValueError) as exc:
            raise BadInput(f"{name}: {exc}") from None
        if peek == _GZIP_MAGIC:
            return _scan_gzip(raw, context, name)
        return scan(raw, context, name=name)
    with open_log(path) as (handle, kind):
        if kind == "gzip":
            return _scan_gzip(handle, context, path)
        if kind == "utf16":
            return scan(utf16_as_utf8(handle), context, name=path)
        if os.path.isfile(path):
            result = _scan_with_grep(path, context)
            if result is not None:
                return result
        return scan(handle, context, name=path)


_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


@contextlib.contextmanager
def open_log(path: str) -> Iterator[tuple[IO[bytes], str]]:
    """A log file open for reading, and what it holds: "gzip" (by its magic bytes), "utf16" (a
    BOM), else "plain". One line (BadInput) for a file that cannot be read or a `.gz` name that is
    no gzip. Every reader of a log path (triage, the snippet reader) opens it here."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror or exc}") from None
    with handle:
        try:
            magic = handle.read(2)
            handle.seek(0)
        except OSError as exc:
            raise BadInput(f"{path}: {exc.strerror or exc}") from None
        if magic == _GZIP_MAGIC:
            kind = "gzip"
        elif path.endswith(".gz"):
            raise BadInput(f"{path}: not a gzip file")
        else:
            kind = "utf16" if magic in _UTF16_BOMS else "plain"
        yield handle, kind


def utf16_as_utf8(handle: IO[bytes]) -> Readable:
    """A log saved by a Windows tool (UTF-16, a BOM, CRLF), read as the text it is: re-encoded as
    UTF-8 a piece at a time, in constant memory like any other."""
    return codecs.EncodedFile(handle, "utf-8", "utf-16")


def scan_open(handle: BinaryIO, context: int = DEFAULT_CONTEXT, *, name: str, limit: int) -> dict[str, Any]:
    """Triage an open regular file through its descriptor, its first limit bytes only (gzip: as
    many decompressed), read by offset: nothing opens it again by a path, and its own offset is
    not used. Past limit, a warning says the file was cut."""
    _check_context(context, name)
    fd = handle.fileno()
    magic = os.pread(fd, 2, 0)
    if magic == _GZIP_MAGIC:
        with rundir.window(handle, limit) as raw:
            result = _scan_gzip(raw, context, name, limit)
    elif magic in _UTF16_BOMS:
        with rundir.window(handle, limit) as raw:
            result = scan(_Capped(utf16_as_utf8(raw), limit), context, name=name)
    else:
        found = _scan_fd_with_grep(handle, context, limit)
        if found is None:
            with rundir.window(handle, limit) as raw:
                found = scan(raw, context, name=name)
        result = found
    size = os.fstat(fd).st_size
    if size > limit:
        result["warnings"] = [rundir.log_cut(name, size, limit), *result["warnings"]]
    return result


def first_cause(log: Path, notes: list[str] | None = None) -> FirstCause | None:
    """A cell's log.txt to its first cause, as results.read holds it (None: no log, or no failure
    named in what was read of it). The harness stores it when the cell finishes; the cli asks for
    it only for a results directory that has none. log.txt is opened once, relative to its
    directory's descriptor (a symlink would read elsewhere, a FIFO hang: neither is read), and
    read through that open file only, no further than rundir.MAX_LOG bytes (scan_open). notes:
    given a list, what the reader should know (the log was cut at the bound, triage stopped at its
    time bound) is added to it, each one line."""
    try:
        handle = rundir.open_plain(log)
    except (rundir.NotPlain, FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise BadInput(f"{log}: {exc.strerror or exc}") from None
    with handle:
        found = scan_open(handle, context=0, name=str(log), limit=rundir.MAX_LOG)
    if notes is not None:
        notes.extend(one_line(warning) for warning in found["warnings"])
    if found["family"] is None:
        return None
    return FirstCause(log=str(log), family=found["family"], line=found["line"], rank=found["rank"],
                      fatal=bool(found["fatal"]))
