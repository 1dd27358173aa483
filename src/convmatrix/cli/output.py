"""What the subcommands share on their way out: the one writer of -o, and plain lines."""

from __future__ import annotations

import sys
from collections.abc import Iterator
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
        output.parent.mkdir(parents=True, exist_ok=True)
        rundir.write_whole(output, parts)
    except OSError as exc:
        why = one_line(str(exc.strerror or exc))
        raise BadInput(f"-o {one_line(str(output))}: cannot write the report ({why})") from None


def say(line: str) -> None:
    print(line, flush=True)
