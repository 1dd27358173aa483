"""What the subcommands share on their way out: the one writer of -o, and plain lines."""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from convmatrix.errors import BadInput
from convmatrix.escape import one_line
from convmatrix.results import rundir


def write_output(text: str | Iterator[str], output: Path | None) -> None:
    """The report on stdout, or in -o's file, written whole or not at all (rundir.write_whole):
    a reader never sees half a report, and a failed write leaves the previous one."""
    parts = (text,) if isinstance(text, str) else text
    if output is None:
        sys.stdout.writelines(parts)
        return
    try:
        if _is_a_stream(output):
            _write_through(output, parts)
            return
        output.parent.mkdir(parents=True, exist_ok=True)
        rundir.write_whole(output, parts)
    except OSError as exc:
        why = one_line(str(exc.strerror or exc))
        raise BadInput(f"-o {one_line(str(output))}: cannot write the report ({why})") from None


# The folders whose entries only the system makes: /dev (null, stdout, stderr, tty) and a process's fd
# folder (/dev/fd, /proc/self/fd). -o naming an entry of one writes through it.
_SYSTEM_STREAMS = re.compile(r"/dev|/proc/(?:self|thread-self|[0-9]+)(?:/task/[0-9]+)?/fd")


def _is_a_stream(output: Path) -> bool:
    """-o names one of the system's streams: /dev/null, /dev/stdout, /dev/fd/1 and the like. write_whole
    renames a new file over its name: as root, over /dev/null itself, leaving a regular file that breaks
    every other program's `>/dev/null`. Decided by the folder, never by where a link points: a link
    planted in a run directory is replaced as any file there (write_whole), not followed."""
    return _SYSTEM_STREAMS.fullmatch(os.path.realpath(output.parent)) is not None


def _write_through(output: Path, parts: Iterable[str]) -> None:
    """Written as a shell's `>` would be: opened, never made or replaced there (a name /dev lacks is an
    error); a regular file behind /dev/stdout is appended to, keeping what the shell's `>` let be."""
    flags = os.O_WRONLY | (os.O_APPEND if stat.S_ISREG(os.stat(output).st_mode) else 0)
    with open(os.open(output, flags), "w", encoding="utf-8") as stream:
        stream.writelines(parts)


def say(line: str) -> None:
    print(line, flush=True)
