"""cuDNN's own reason for a failure: what its API log says, when a failing case is re-run with it on.

Turning the log on (NVIDIA, "Error Reporting And API Logging",
https://docs.nvidia.com/deeplearning/cudnn/backend/v9.5.1/reference/troubleshooting.html):
- cuDNN 9: CUDNN_LOGLEVEL_DBG is 0 (off), 1 (errors), 2 (warnings and errors) or 3 (info, warnings
  and errors), and CUDNN_LOGDEST_DBG is stdout, stderr or a file path. cuDNN 8's separate switches
  CUDNN_LOGERR_DBG, CUDNN_LOGWARN_DBG and CUDNN_LOGINFO_DBG still work through cuDNN 9's grace period.
- cudnn-frontend (https://docs.nvidia.com/deeplearning/cudnn/frontend/latest/developer/debugging.html):
  CUDNN_FRONTEND_LOG_INFO=1 with CUDNN_FRONTEND_LOG_FILE set to stdout, stderr or a file name.

What the log looks like (real logs quoted in tests/data/cudnn_logs/, each with its source):
- cuDNN 8 and 9 both open each message with a header, a severity letter and the calling function,
  ``E! CuDNN (v90101 17) function cudnnBackendFinalize() called:`` (I!, W!, E!: info, warning, error;
  cuDNN 9 adds a second number after the version), then lines that repeat the letter in lower case:
  ``e!         Error: CUDNN_STATUS_EXECUTION_FAILED; Reason: rtc->loadModule()`` (one per level
  of cuDNN's traceback, innermost first), ``e! Time: ... (0d+0h+0m+0s since start)`` and
  ``e! Process=...; Thread=...; GPU=...; Handle=...; StreamId=...``, then a blank line.
- cuDNN 9's documentation also shows the header and its lines without the letters
  (``cuDNN (v90000) function cudnnSetActivationDescriptor() called:``, ``Process: 21264, ...``).
- Text that carries cuDNN's last error string without the letters (a framework echoing
  cudnnGetLastErrorString, the frontend's log) has the bare ``Warning: CUDNN_STATUS_...; Reason: ...``
  lines, and the frontend's exceptions say ``... cudnnFinalize Descriptor Failed cudnn_status:
  CUDNN_STATUS_NOT_SUPPORTED``.
Logs that a CI system or a logger prefixed with timestamps read the same: markers are found
anywhere in a line, not only at its start.

Every pattern is matched within one line, only after a plain substring test found its witness,
and has no nested repetition, so a hostile line of megabytes costs linear time.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from convmatrix.results.families import explain_status, status_code, status_name

REASON_LIMIT = 500
_NOT_SUPPORTED = "CUDNN_STATUS_NOT_SUPPORTED"

# The header of one message: an optional severity letter, the version, the function.
_HEADER = re.compile(
    r"(?:\b([EWI])!\s{1,16})?[Cc]u[Dd][Nn][Nn] \(v(\d{1,8})[^)\n]{0,32}\) function ([A-Za-z_]\w{0,199})\(\)"
)
# One level of cuDNN's traceback: "Error: CUDNN_STATUS_X" or "Warning: CUDNN_STATUS_X", maybe a number.
_DETAIL = re.compile(
    r"\b(Error|Warning|ERROR|WARNING|error|warning): {0,8}(CUDNN_STATUS_[A-Z0-9_]{1,80})(?: ?\((\d{1,5})\))?"
)
# The frontend's form: "cudnn_status: CUDNN_STATUS_X" or "cudnn_status: 3000".
_FRONTEND = re.compile(r"cudnn_status: {0,8}(CUDNN_STATUS_[A-Z0-9_]{1,80}|\d{1,5})\b")
# One operation of a plan, as the info level prints it inside a descriptor's dump.
_OPERATION = re.compile(r"operation: type=CUDNN_BACKEND_OPERATION_([A-Z0-9_]{1,64}?)_DESCRIPTOR\b")
_REASON = re.compile(r"\breason: ?", re.IGNORECASE)
# An info line ("i!", after any prefix a CI or logger put first) only echoes parameters.
_INFO = re.compile(r"(?:^|\s)i!\s")
# C0 controls and DEL, dropped from the one-line reason (tab kept as a space).
_CONTROLS = {code: None for code in (*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F)} | {0x09: " "}


@dataclass(frozen=True, kw_only=True)
class Explained:
    """The message that says why: its status and what that means, in cuDNN's words and ours."""

    status: str  # the full status name, e.g. CUDNN_STATUS_NOT_SUPPORTED_SHAPE
    subcode: int | None  # its number, cuDNN 9's sub-code where it has one (3002), else cuDNN 8's
    meaning: str  # a short phrase for the status (families.STATUS_MEANING)
    cause: str  # "gpu" | "software" | "environment" | "unknown" (families.CAUSES)
    reason: str  # cuDNN's own "Reason: ..." text, one line, at most REASON_LIMIT characters
    function: str | None  # the API function of the E!/W! header above it, e.g. cudnnBackendFinalize
    line: int  # 1-based line of the text that holds the status
    count: int  # how many NOT_SUPPORTED or error messages the text holds
    error: bool  # an error message (E!); False: a warning (W!), which cuDNN also writes on calls that succeed


@dataclass(frozen=True, kw_only=True)
class Activity:
    """What a log that names no failure still says: the last plan cuDNN was asked to execute.

    Seen on an H200 (torch 2.11.0+cu130, cuDNN 9.19.0): a backward conv that ends in "an illegal
    memory access" leaves an info-level log of thousands of successful calls and no error, since the
    fault happens in a kernel after cudnnBackendExecute returned. The operation of the last plan
    executed (named by the last `operation: type=CUDNN_BACKEND_OPERATION_<OP>_DESCRIPTOR` line before
    the last cudnnBackendExecute header) is then the GPU work cuDNN queued last.
    """

    executions: int  # cudnnBackendExecute calls in the text read
    last_operation: str | None  # e.g. CONVOLUTION_BACKWARD_FILTER; None when no plan named one
    last_call: str | None  # the function of the last message header


@dataclass(frozen=True)
class _Found:
    error: bool
    status: str
    number: int | None
    reason: str
    function: str | None
    line: int


def read(path: Path, limit: int = 1 << 20) -> str:
    """The log's text: all of it, or its last ``limit`` bytes (from the next line start) when larger.

    Only a regular file is read: a symlink (O_NOFOLLOW), a FIFO or a device raises OSError, and a
    FIFO without a writer cannot block the open (O_NONBLOCK). Undecodable bytes are replaced.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        start = max(0, info.st_size - max(0, limit))
        if start:
            os.lseek(fd, start, os.SEEK_SET)
        chunks: list[bytes] = []
        left = max(0, limit)
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if start:
        # Started mid-line: drop the partial first line, unless it is all there is.
        cut = data.find(b"\n")
        if cut != -1:
            data = data[cut + 1 :]
    return data.decode("utf-8", errors="replace")


def parse(text: str, *, warnings: bool = True) -> Explained | None:
    """What the log says about the failure, or None when it holds no error and no NOT_SUPPORTED.

    The message picked is the first error with a NOT_SUPPORTED status, else the first warning with
    one, else the first error of any status. ``count`` counts messages, not lines: the traceback
    lines of one message (consecutive status lines) count once. With ``warnings`` False only errors
    count: for a failure that is not one of cuDNN's statuses (an illegal address), where the
    NOT_SUPPORTED warnings cuDNN writes while ruling engines out are no reason (seen on an H200:
    they precede calls that pass, and an E! block of EXECUTION_FAILED_CUDART is the real one).
    """
    found: list[_Found] = []
    count = 0
    function: str | None = None
    version: int | None = None
    in_run = False
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r")
        hit = _status_line(line, number, function) if "CUDNN_STATUS_" in line or "cudnn_status" in line else None
        if hit is not None:
            qualifies = hit.error or (warnings and hit.status.startswith(_NOT_SUPPORTED))
            if qualifies and not in_run:
                count += 1
            in_run = in_run or qualifies
            if qualifies:
                found.append(hit)
            continue
        in_run = False
        if not line.strip():
            function = None
        elif "uDNN (v" in line:
            header = _HEADER.search(line)
            if header is not None:
                level, version_text, name = header.groups()
                function = None if level == "I" else name
                version = int(version_text)
    chosen = _choose(found)
    if chosen is None:
        return None
    meaning, cause = explain_status(chosen.status)
    return Explained(status=chosen.status, subcode=_subcode(chosen, version), meaning=meaning, cause=cause,
                     reason=chosen.reason, function=chosen.function, line=chosen.line, count=count,
                     error=chosen.error)


def activity(text: str) -> Activity | None:
    """The calls the log holds, when it holds any (None: no message header at all)."""
    executions = 0
    operation: str | None = None
    executed: str | None = None
    last_call: str | None = None
    for line in text.split("\n"):
        if "uDNN (v" in line:
            header = _HEADER.search(line)
            if header is not None:
                last_call = header.group(3)
                if last_call == "cudnnBackendExecute":
                    executions += 1
                    executed = operation
        elif "operation: type=" in line:
            found = _OPERATION.search(line)
            if found is not None:
                operation = found.group(1)
    if last_call is None:
        return None
    return Activity(executions=executions, last_operation=executed, last_call=last_call)


def _status_line(line: str, number: int, function: str | None) -> _Found | None:
    """The status a line reports, or None. Info lines (i!) only echo parameters, never a failure."""
    if _INFO.search(line, 0, 80) is not None:
        return None
    detail = _DETAIL.search(line) if "CUDNN_STATUS_" in line else None
    if detail is not None:
        word, name, digits = detail.groups()
        if name == "CUDNN_STATUS_SUCCESS":
            return None
        reason = _REASON.search(line, detail.end())
        text = line[reason.end() :] if reason is not None else ""
        return _Found(error=word.lower() == "error", status=name, number=int(digits) if digits else None,
                      reason=_one_line(text), function=function, line=number)
    frontend = _FRONTEND.search(line) if "cudnn_status" in line else None
    if frontend is None:
        return None
    value = frontend.group(1)
    name_or_none = status_name(int(value)) if value.isdigit() else value
    if name_or_none is None or name_or_none == "CUDNN_STATUS_SUCCESS":
        return None
    return _Found(error=True, status=name_or_none, number=int(value) if value.isdigit() else None,
                  reason=_one_line(line), function=function, line=number)


def _choose(found: list[_Found]) -> _Found | None:
    """The first error with NOT_SUPPORTED, else the first warning with it, else the first error."""
    ranked = [(0 if hit.error else 1) if hit.status.startswith(_NOT_SUPPORTED) else 2 for hit in found]
    best = min(ranked, default=None)
    return found[ranked.index(best)] if best is not None else None


def _subcode(hit: _Found, version: int | None) -> int | None:
    """The number the text gave with the status, else the table's. cuDNN 8 (version < 90000) knew
    only its small numbers, so a plain cuDNN 8 status keeps its cuDNN 8 number (NOT_SUPPORTED: 9)."""
    if hit.number is not None:
        return hit.number
    return status_code(hit.status, cudnn8=version is not None and version < 90000)


def _one_line(text: str) -> str:
    # Cut before cleaning, so that a megabyte line costs no more than a short one.
    cleaned = " ".join(text[: REASON_LIMIT * 4].translate(_CONTROLS).split())
    return cleaned[:REASON_LIMIT]
