"""Bounds on what a report embeds: a message or an evidence file can be megabytes (a 10 MB
exception text), and a report must stay a file one opens, a job summary GitHub accepts. What is
cut says so, with the size it had and where the whole text is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from convmatrix.results import rundir


@dataclass(frozen=True, kw_only=True)
class Cut:
    text: str
    total: int  # characters before cutting
    note: str | None  # None when nothing was cut

    @property
    def cut(self) -> bool:
        return self.note is not None


def head(text: str, limit: int, where: str = "results.jsonl") -> Cut:
    """The first `limit` characters: an error message says what went wrong first."""
    if len(text) <= limit:
        return Cut(text=text, total=len(text), note=None)
    return Cut(text=text[:limit], total=len(text),
               note=f"cut: {len(text):,} characters, the first {limit:,} shown; the whole text is in {where}")


def tail(text: str, limit: int, where: str) -> Cut:
    """The last `limit` characters: evidence ends at the failure, its lead-up comes before."""
    if len(text) <= limit:
        return Cut(text=text, total=len(text), note=None)
    return Cut(text=text[-limit:], total=len(text),
               note=f"cut: {len(text):,} characters, the last {limit:,} shown; the whole file is {where}")


def read_tail(path: str, limit: int) -> Cut | None:
    """An evidence file's last `limit` characters, reading no more than about that much of it;
    None when it cannot be read (moved, deleted: the report still renders)."""
    try:
        # Only a regular file in its cell directory (<cell>/evidence/<case>.txt): never a symlink,
        # a FIFO (it would hang the report) or a device (/dev/zero would grow without bound).
        with rundir.open_plain(Path(path), Path(path).parent.parent) as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - 4 * limit))  # UTF-8: at most 4 bytes a character
            # At most that many bytes: a process the cell left behind may still be writing the
            # file, which then grows past the size read above (read() alone would follow it).
            data = fh.read(4 * limit).decode("utf-8", errors="replace")
    except (OSError, ValueError):  # ValueError: a path with a NUL in it
        return None
    if size > 4 * limit:
        data = data[1:]  # the first character may be a cut one
        return Cut(text=data[-limit:], total=size,
                   note=f"cut: {size:,} bytes, the last {limit:,} characters shown; the whole file is {path}")
    return tail(data, limit, path)
