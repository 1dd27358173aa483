"""Triage: from a failed job's log to its first cause, family, collateral and remedies.

The log is streamed in large binary chunks in constant memory. A chunk is searched with
``bytes.find`` for a few needles that every family marker carries ("cud", "CUD", "NVIDIA",
"unable to find", ...); only the lines around a hit are decoded and handed to
``classify.classify`` (with the next lines, for identifiers broken across lines). Line numbers
come from counting newlines; the last ``context`` lines are kept for the lines before the cause.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import subprocess
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from convmatrix import remedies
from convmatrix.classify import classify, normalize, strip_ansi
from convmatrix.errors import BadInput

CHUNK = 8 << 20
DEFAULT_CONTEXT = 100
# Lines after a hit that must be in memory with it (joins, elastic "Root Cause" fields).
_LOOKAHEAD = 12

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
# classified (with its neighbours, for broken identifiers) for nothing.
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

_RANK_PREFIX = re.compile(r"\[(?:rank|default)(\d+)\]:")
_HOST_PREFIX = re.compile(r"^([a-z][a-z0-9-]*\d[a-z0-9.-]*):\s")
_RANK_ENV = re.compile(r"\bRANK=(\d+)")
_LOCAL_RANK_ENV = re.compile(r"\bLOCAL_RANK=(\d+)")
_PG_RANK = re.compile(r"\[PG [^\]]*?Rank (\d+)\]|\bRank (\d+)\b")
_CUDA_DEVICE = re.compile(r"\bcuda:(\d+)")
_GPU_DEVICE = re.compile(r"\bGPU ?(\d+)\b")
_WARNING = re.compile(
    r"Plan failed with a |UserWarning|\bWarning:|\bWARNING\b|\[W\d{4} |^\s*W\d{4} "
    r"|is not compatible with the current PyTorch installation|no longer supports this GPU"
)
_COLLATERAL = re.compile(
    r"Watchdog caught collective operation timeout|ChildFailedError|Signal \d+ \(SIG\w+\)"
    r"|\bexitcode\b|ProcessGroupNCCL.*(?:abort|Abort|timeout|Timeout|terminat|shutdown)"
    r"|closing signal SIG\w+"
)
_FIELD = re.compile(r"^\s*(host|rank|local_rank|exitcode)\s*:\s*(\S+)")
_LOCAL_RANK_FIELD = re.compile(r"local_rank:?\s*(\d+)")


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass
class _Where:
    rank: int | None = None
    rank_source: str | None = None
    node: str | None = None
    device: str | None = None


@dataclass
class _Hit:
    family: str
    line: int
    text: str
    fatal: bool
    where: _Where


@dataclass
class _State:
    context: int
    tail: deque[str]
    first_fatal: _Hit | None = None
    first_warning: _Hit | None = None
    context_before: list[str] = field(default_factory=list)
    families: dict[str, _Hit] = field(default_factory=dict)
    collateral: list[dict[str, Any]] = field(default_factory=list)
    root_cause: dict[str, str] = field(default_factory=dict)


def _clean(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    return strip_ansi(text)


def _where(text: str) -> _Where:
    w = _Where()
    host = _HOST_PREFIX.match(text)
    if host:
        w.node = host.group(1)
    m = _RANK_PREFIX.search(text)
    if m:
        w.rank, w.rank_source = int(m.group(1)), "prefix"
    else:
        for pattern, source in ((_RANK_ENV, "RANK"), (_LOCAL_RANK_ENV, "LOCAL_RANK")):
            m = pattern.search(text)
            if m:
                w.rank, w.rank_source = int(m.group(1)), source
                break
    d = _CUDA_DEVICE.search(text)
    if d:
        w.device = f"cuda:{d.group(1)}"
    else:
        g = _GPU_DEVICE.search(text)
        if g:
            w.device = f"cuda:{g.group(1)}"
    if w.rank is None:
        pg = _PG_RANK.search(text)
        if pg:
            w.rank, w.rank_source = int(pg.group(1) or pg.group(2)), "process-group"
    return w


def _next_starts_with_underscore(buf: bytes, end: int) -> bool:
    if end + 1 >= len(buf):
        return False
    nl = buf.find(b"\n", end + 1)
    raw = buf[end + 1 : len(buf) if nl < 0 else nl]
    if b"_" not in raw[:200]:
        return False
    following = normalize(_clean(raw))
    return following.lstrip().startswith("_")


def _family(text: str) -> str | None:
    family = classify(text)
    return None if family == "other" else family


class _Scanner:
    def __init__(self, context: int) -> None:
        self.s = _State(context=context, tail=deque(maxlen=max(context, 1)))

    # -- per candidate line -----------------------------------------------------------------------
    def line(self, buf: bytes, start: int, end: int, number: int) -> None:
        """One candidate line: buf[start:end] (without its newline), 1-based ``number``."""
        s = self.s
        text = _clean(buf[start:end])
        if s.first_fatal is not None and _COLLATERAL.search(text):
            self._collateral(buf, start, text, number)
        if s.first_fatal is not None and "Root Cause" in text:
            self._root_cause(buf, end)
        family = None
        if text.rstrip().endswith("_") or _next_starts_with_underscore(buf, end):
            # An identifier cut at an underscore: "..._NOT_SUPPORTED_ARCH_" / "MISMATCH".
            family = self._joined_family(buf, end, text)
        if family is None:
            family = _family(text)
        if family is None:
            family = self._joined_family(buf, end, text)
        if family is None:
            return
        fatal = _WARNING.search(text) is None
        hit = _Hit(family, number, text, fatal, _where(text))
        s.families.setdefault(family, hit)
        if fatal and s.first_fatal is None:
            s.first_fatal = hit
            s.context_before = self._before(buf, start)
        elif not fatal and s.first_fatal is None and s.first_warning is None:
            s.first_warning = hit

    def _joined_family(self, buf: bytes, end: int, text: str) -> str | None:
        """A family that only appears with the next one or two lines (a broken identifier)."""
        nexts: list[str] = []
        pos = end + 1
        for _ in range(2):
            if pos >= len(buf):
                break
            nl = buf.find(b"\n", pos)
            nl = len(buf) if nl < 0 else nl
            nexts.append(_clean(buf[pos:nl]))
            pos = nl + 1
        if not nexts:
            return None
        joined = _family("\n".join([text, *nexts]))
        if joined is None or _family("\n".join(nexts)) == joined:
            return None
        return joined

    def _before(self, buf: bytes, start: int) -> list[str]:
        n = self.s.context
        if n == 0:
            return []
        lines: list[str] = []
        pos = start
        while len(lines) < n and pos > 0:
            prev = buf.rfind(b"\n", 0, pos - 1)
            lines.append(_clean(buf[prev + 1 : pos - 1]))
            pos = prev + 1
        lines.reverse()
        if len(lines) < n:
            need = n - len(lines)
            lines = list(self.s.tail)[-need:] + lines
        return lines

    def _collateral(self, buf: bytes, start: int, text: str, number: int) -> None:
        where = _where(text)
        if where.rank is None:
            # An elastic failure block: "rank : 1 (local_rank: 1)" one line above "exitcode".
            prev = buf.rfind(b"\n", 0, max(start - 1, 0))
            field_line = _clean(buf[prev + 1 : max(start - 1, 0)]) if start > 0 else ""
            fm = _FIELD.match(field_line)
            if fm and fm.group(1) == "rank" and fm.group(2).isdigit():
                where.rank, where.rank_source = int(fm.group(2)), "elastic"
            else:
                lm = _LOCAL_RANK_FIELD.search(text)
                if lm:
                    where.rank, where.rank_source = int(lm.group(1)), "local_rank"
        self.s.collateral.append(
            {"line": number, "rank": where.rank, "node": where.node, "text": text, "collateral": True}
        )

    def _root_cause(self, buf: bytes, end: int) -> None:
        pos = end + 1
        for _ in range(_LOOKAHEAD - 1):
            if pos >= len(buf):
                break
            nl = buf.find(b"\n", pos)
            nl = len(buf) if nl < 0 else nl
            fm = _FIELD.match(_clean(buf[pos:nl]))
            if fm:
                self.s.root_cause.setdefault(fm.group(1), fm.group(2))
            pos = nl + 1

    # -- per region -----------------------------------------------------------------------------
    def region(self, buf: bytes, cut: int, base: int) -> None:
        """Scan buf[:cut] (whole lines); ``base`` lines came before it."""
        needles = FAMILY_NEEDLES + (COLLATERAL_NEEDLES if self.s.first_fatal is not None else ())
        starts: set[int] = set()
        for needle in needles:
            pos = buf.find(needle, 0, cut)
            while pos >= 0:
                ls = buf.rfind(b"\n", 0, pos) + 1
                starts.add(ls)
                le = buf.find(b"\n", pos, cut)
                if le < 0:
                    break
                pos = buf.find(needle, le, cut)
        counted, number = 0, base
        for ls in sorted(starts):
            number += buf.count(b"\n", counted, ls)
            counted = ls
            le = buf.find(b"\n", ls)
            le = len(buf) if le < 0 else le
            before = self.s.first_fatal is None
            self.line(buf, ls, le, number + 1)
            if before and self.s.first_fatal is not None:
                # Collateral needles apply from here on, in this region too.
                self._collateral_rest(buf, le + 1, cut, number + 1)
                break
        self._keep_tail(buf, cut)

    def _collateral_rest(self, buf: bytes, start: int, cut: int, number: int) -> None:
        """After the first cause in this region: the rest of it, with every needle."""
        rest_starts: set[int] = set()
        for needle in FAMILY_NEEDLES + COLLATERAL_NEEDLES:
            pos = buf.find(needle, start, cut)
            while pos >= 0:
                rest_starts.add(buf.rfind(b"\n", 0, pos) + 1)
                le = buf.find(b"\n", pos, cut)
                if le < 0:
                    break
                pos = buf.find(needle, le, cut)
        counted = start
        for ls in sorted(rest_starts):
            number += buf.count(b"\n", counted, ls)
            counted = ls
            le = buf.find(b"\n", ls)
            le = len(buf) if le < 0 else le
            self.line(buf, ls, le, number + 1)

    def _keep_tail(self, buf: bytes, cut: int) -> None:
        n = self.s.context
        if n == 0 or cut == 0:
            return
        lines: list[str] = []
        end = cut - 1 if buf[cut - 1 : cut] == b"\n" else cut
        while len(lines) < n and end >= 0:
            prev = buf.rfind(b"\n", 0, end)
            lines.append(_clean(buf[prev + 1 : end]))
            if prev < 0:
                break
            end = prev
        self.s.tail.extend(reversed(lines))


class _SeekScanner(_Scanner):
    """The scanner fed by ``grep -n -b``: each candidate line is read from the file by its offset."""

    _BACK = 4096  # bytes kept before a line (the elastic "rank :" field above "exitcode")
    _WINDOW = 1 << 20

    def __init__(self, context: int, handle: IO[bytes]) -> None:
        super().__init__(context)
        self.handle = handle
        self.win_start = 0
        self.win = b""
        self.win_eof = False
        self.offset = 0

    def at(self, offset: int, number: int) -> None:
        start = offset - self.win_start
        if (offset - self._BACK < self.win_start and self.win_start > 0) or not self._covers(start):
            self._load(offset)
            start = offset - self.win_start
        end = self.win.find(b"\n", start)
        self.offset = offset
        self.line(self.win, start, len(self.win) if end < 0 else end, number)

    def _covers(self, start: int) -> bool:
        if start < 0 or start >= len(self.win):
            return False
        pos = start
        for _ in range(_LOOKAHEAD + 1):
            pos = self.win.find(b"\n", pos) + 1
            if pos == 0:
                return self.win_eof
        return True

    def _load(self, offset: int) -> None:
        size = self._WINDOW
        while True:
            self.win_start = max(0, offset - self._BACK)
            self.handle.seek(self.win_start)
            self.win = self.handle.read(offset - self.win_start + size)
            self.win_eof = len(self.win) < offset - self.win_start + size
            if self.win_eof or self._covers(offset - self.win_start):
                return
            size *= 4

    def _before(self, buf: bytes, start: int) -> list[str]:
        n = self.s.context
        if n == 0 or self.offset == 0:
            return []
        size = 1 << 16
        while True:
            begin = max(0, self.offset - size)
            self.handle.seek(begin)
            data = self.handle.read(self.offset - begin)
            if begin == 0 or data.count(b"\n") > n:
                break
            size *= 4
        lines = data[:-1].split(b"\n") if data.endswith(b"\n") else data.split(b"\n")
        if begin > 0:
            lines = lines[1:]
        return [_clean(line) for line in lines[-n:]]


def _grep_needles() -> list[str]:
    args: list[str] = []
    for needle in FAMILY_NEEDLES + COLLATERAL_NEEDLES:
        args += ["-e", needle.decode()]
    return args


def _scan_with_grep(path: str, context: int) -> dict[str, Any] | None:
    """Triage a plain file with grep as the prefilter (several times faster); None if grep failed."""
    if os.environ.get("CONVMATRIX_TRIAGE_GREP", "1") == "0":
        return None
    # ripgrep's SIMD multi-literal search keeps its speed with many needles; GNU grep's does not.
    rg, grep = shutil.which("rg"), shutil.which("grep")
    if rg is not None:
        cmd = [rg, "--no-config", "--no-heading", "--no-mmap", "-a", "-n", "-b", "-F", *_grep_needles(), "--", path]
    elif grep is not None:
        cmd = [grep, "-a", "-n", "-b", "-F", *_grep_needles(), "--", path]
    else:
        return None
    env = {**os.environ, "LC_ALL": "C"}
    with open(path, "rb") as handle:
        scanner = _SeekScanner(context, handle)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert proc.stdout is not None
        with proc:
            for hit in proc.stdout:
                number, offset, _ = hit.split(b":", 2)
                scanner.at(int(offset), int(number))
        if proc.returncode not in (0, 1):
            return None
    return _result(scanner.s)


def _nth_newline_from_end(buf: bytes, n: int) -> int:
    """Position just after the n-th newline from the end, or -1 if there are not that many."""
    pos = len(buf)
    for _ in range(n):
        pos = buf.rfind(b"\n", 0, pos)
        if pos < 0:
            return -1
    return pos + 1


def scan(stream: Readable, context: int = DEFAULT_CONTEXT, *, name: str = "-") -> dict[str, Any]:
    """Triage a binary stream; the result is what ``--format json`` prints."""
    if context < 0:
        raise BadInput(f"{name}: --context must be >= 0, got {context}")
    scanner = _Scanner(context)
    carry = b""
    base = 0
    while True:
        try:
            chunk = stream.read(CHUNK)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise BadInput(f"{name}: {exc}") from None
        eof = not chunk
        buf = carry + chunk if carry else chunk
        if not buf:
            break
        if eof:
            cut = len(buf)
        else:
            cut = _nth_newline_from_end(buf, _LOOKAHEAD + 1)
            if cut <= 0:
                carry = buf
                continue
        scanner.region(buf, cut, base)
        base += buf.count(b"\n", 0, cut)
        carry = buf[cut:]
        if eof:
            break
    return _result(scanner.s)


def _result(s: _State) -> dict[str, Any]:
    cause = s.first_fatal
    fatal = cause is not None
    if cause is None and s.first_warning is not None:
        cause = s.first_warning
    where = cause.where if cause else _Where()
    if cause is not None and where.rank is None and "rank" in s.root_cause:
        digits = s.root_cause["rank"]
        if digits.isdigit():
            where.rank, where.rank_source = int(digits), "root_cause"
    if cause is not None and where.node is None and "host" in s.root_cause:
        where.node = s.root_cause["host"]
    if cause is not None and where.rank is None and where.device is not None:
        where.rank, where.rank_source = int(where.device.split(":")[1]), "device"
    family = cause.family if cause else None
    warning = s.first_warning if fatal else None
    return {
        "family": family,
        "line": cause.line if cause else None,
        "text": cause.text if cause else None,
        "rank": where.rank,
        "rank_source": where.rank_source,
        "node": where.node,
        "device": where.device,
        "fatal": fatal,
        "context_before": s.context_before if fatal else [],
        "first_warning": (
            {"line": warning.line, "family": warning.family, "text": warning.text} if warning else None
        ),
        "families": [
            {"family": h.family, "line": h.line, "rank": h.where.rank, "fatal": h.fatal, "text": h.text}
            for h in sorted(s.families.values(), key=lambda h: h.line)
        ],
        "collateral": s.collateral,
        "root_cause": s.root_cause or None,
        "remedies": remedies.remedies_for(family),
        "verify": remedies.verify_commands(family),
    }


def scan_text(text: str, context: int = DEFAULT_CONTEXT) -> dict[str, Any]:
    """Triage a log held in memory (the report's per-cell logs, tests)."""
    return scan(io.BytesIO(text.encode("utf-8")), context)


_GZIP_MAGIC = b"\x1f\x8b"


def scan_path(path: str, context: int = DEFAULT_CONTEXT) -> dict[str, Any]:
    """Triage a file (``-`` for stdin; gzip is detected by its magic bytes or a ``.gz`` name)."""
    if context < 0:
        raise BadInput(f"{path}: --context must be >= 0, got {context}")
    if path == "-":
        raw = sys.stdin.buffer
        peek = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
        stream: Readable = gzip.GzipFile(fileobj=raw) if peek == _GZIP_MAGIC else raw
        return scan(stream, context, name="<stdin>")
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, after the gzip wrapper
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror or exc}") from None
    with handle:
        try:
            magic = handle.read(2)
            handle.seek(0)
        except OSError as exc:
            raise BadInput(f"{path}: {exc.strerror or exc}") from None
        if magic == _GZIP_MAGIC:
            with gzip.GzipFile(fileobj=handle) as gz:
                return scan(gz, context, name=path)
        if path.endswith(".gz"):
            raise BadInput(f"{path}: not a gzip file")
        if os.path.isfile(path):
            result = _scan_with_grep(path, context)
            if result is not None:
                return result
        return scan(handle, context, name=path)
