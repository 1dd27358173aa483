"""The one subprocess helper: run a child, stream what it prints to a log and the terminal, and
never leave it behind. The suite runner, the image builds and the installs all go through it.

Stdlib only: nox imports this in its own interpreter.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from convmatrix import interrupts, tree

GRACE_S = 10.0  # how long a child gets to end after SIGTERM before it is killed
NOT_STARTED = 127  # what a shell answers for a command it cannot run


class _Terminal:
    """Whether children's output is echoed by default. The terminal is one: where cells run or
    are prepared concurrently their lines would interleave, so the orchestration turns echo off
    (each child still writes its own log) and says what happens in lines of its own."""

    echo = True


terminal = _Terminal()


@contextlib.contextmanager
def quiet(on: bool = True) -> Iterator[None]:
    """No child echoes to the terminal by default while the block runs (when on)."""
    before = terminal.echo
    terminal.echo = before and not on
    try:
        yield
    finally:
        terminal.echo = before


LINE_LIMIT = 64 << 10  # a line a child prints is cut past this (a 400 MB line took the harness to 2 GB)


class LineCutter:
    """Bytes as a child prints them, to whole lines of at most LINE_LIMIT bytes: a longer line is
    cut there, and a mark says how much of it was dropped. Holds at most one line's bound."""

    def __init__(self, write: Callable[[bytes], None], limit: int = LINE_LIMIT) -> None:
        self.emit, self.limit = write, limit
        self.held = b""
        self.dropped = 0  # bytes of the current line past the bound

    def feed(self, data: bytes) -> None:
        while data:
            end = data.find(b"\n")
            piece, data = (data, b"") if end < 0 else (data[:end + 1], data[end + 1:])
            room = self.limit - len(self.held)
            if self.dropped or len(piece.rstrip(b"\n")) > room:
                kept = piece[:max(room, 0)] if not self.dropped else b""
                self.held += kept
                self.dropped += len(piece.rstrip(b"\n")) - len(kept)
            else:
                self.held += piece
            if piece.endswith(b"\n"):
                self.flush_line()

    def flush_line(self) -> None:
        line = self.held.rstrip(b"\n")
        if self.dropped:
            line += f" … [convmatrix: {self.dropped:,} more bytes of this line cut]".encode()
        if line or self.held:
            self.emit(line + b"\n")
        self.held, self.dropped = b"", 0

    def close(self) -> None:
        if self.held or self.dropped:
            self.flush_line()


class Tee:
    """Lines to a log file (appended, flushed per line, so a crash loses nothing) and, when
    echo is on, to our stdout."""

    def __init__(self, log: BinaryIO | None, *, echo: bool = True,
                 on_line: Callable[[str], None] | None = None) -> None:
        self.log = log
        self.echo = echo
        self.on_line = on_line

    def write(self, line: bytes) -> None:
        if self.log is not None:
            self.log.write(line)
            self.log.flush()
        if self.echo:
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
        if self.on_line is not None:
            self.on_line(line.decode(errors="replace").rstrip("\n"))

    def say(self, text: str) -> None:
        self.write(f"{text}\n".encode())


@contextlib.contextmanager
def tee_to(log_path: Path | None, *, echo: bool = True,
           on_line: Callable[[str], None] | None = None) -> Iterator[Tee]:
    if log_path is None:
        yield Tee(None, echo=echo, on_line=on_line)
        return
    with tree.append_to(log_path) as log:  # never through a link a suite left at its name
        yield Tee(log, echo=echo, on_line=on_line)


def stream(command: Sequence[str], *, log_path: Path | None = None, env: Mapping[str, str] | None = None,
           cwd: Path | None = None, echo: bool | None = None, stdin: bytes | None = None,
           on_line: Callable[[str], None] | None = None) -> int:
    """Run command, each line it prints (stdout and stderr together) to log_path, our stdout
    (echo; default: unless quiet()) and on_line; its exit status (negative: the signal that ended
    it; 127: it could not start).

    Interrupted (Ctrl-C, or SIGTERM turned into an exception by the entry point), the child is
    terminated, then killed after GRACE_S, before the interrupt goes on up. In a worker thread,
    interrupts.stop_all() terminates it, and Interrupted is raised here once it has ended.
    """
    echo = terminal.echo if echo is None else echo
    with tee_to(log_path, echo=echo, on_line=on_line) as out:
        out.say(f"$ {' '.join(command)}")
        try:
            proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                    env=dict(env) if env is not None else None, cwd=cwd)
        except OSError as exc:
            out.say(f"convmatrix: cannot start {command[0]}: {exc}")
            return NOT_STARTED
        with ended(proc), interrupts.stoppable(proc.terminate):
            if stdin is not None and proc.stdin is not None:
                proc.stdin.write(stdin)
                proc.stdin.close()
            assert proc.stdout is not None
            cutter = LineCutter(out.write)
            pipe = proc.stdout.fileno()
            for chunk in iter(lambda: os.read(pipe, 1 << 16), b""):  # what is there, as it comes: no line held whole
                cutter.feed(chunk)
            cutter.close()
            code = proc.wait()
        interrupts.raise_if_stopped()
        return code


@contextlib.contextmanager
def ended(proc: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """The child, ended whatever happens here: terminated, then killed if it will not go."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pipe in (proc.stdout, proc.stdin):
            if pipe is not None:
                pipe.close()
