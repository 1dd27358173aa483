"""`[fn(x) for x in items]`, with a share of the items done by a forked child on a second CPU.

What it is for: a fleet's report reads 1,000 cell directories, 200,000 results lines, before it
judges anything (bench/run.py report_merge_s); reading them is most of its time, and each cell is
read alone. A forked child reads the tail share while this process reads the head, and sends its
values back pickled through a pipe, whole, when it is done.

What it never changes: the values, and their order. The child is a fork of this process, running
this code on the same inputs, so its values are the ones this process would make; whatever goes
wrong with it (it cannot be forked, it raised, it was killed, it sent less than all) the share is
done here again, as if there had been no child. It runs only where it can pay: at least
MIN_ITEMS items, a second CPU to run on, and no other thread (a fork copies the locks other
threads hold, not the threads). The pickle comes from the child this process forked, through a
pipe only the two hold: it is our own objects, not outside bytes.

Stdlib only, level 0 (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Below this many items a fork (a few milliseconds) costs more than half the work saves.
MIN_ITEMS = 64
# The head's share, this process's: the child also pickles its values and this process
# unpickles them, so an even split leaves this process waiting (measured on 1,000 cells: the
# child read its 420 in 0.36 s of CPU and pickled them in 0.12 s; this process read its 580 in
# about 0.5 s, then unpickled the child's in 0.06-0.08 s).
HEAD = 0.58
_CHUNK = 1 << 20


def cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform says it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def can_fork(count: int, minimum: int = MIN_ITEMS) -> bool:
    """Whether count items are worth a child here: enough of them, a second CPU, fork at all, and
    this process's only thread."""
    return (count >= minimum and hasattr(os, "fork") and cpus() >= 2
            and threading.active_count() == 1)


def mapped(fn: Callable[[T], R], items: Sequence[T], *, minimum: int = MIN_ITEMS) -> list[R]:
    """[fn(x) for x in items], the tail share done in a forked child when can_fork says so. fn must
    be a function of its item alone (what it leaves behind in this process is lost for the
    child's share); an exception fn raises is raised here, as by the plain loop.

    Fork early, while this process is small: a fork of one that holds a fleet's judged night
    (200 MB) cost more in copied pages than writing half its JSON saved (tried for the report's
    case lines: 0.3 s more of system time)."""
    if not can_fork(len(items), minimum):
        return [fn(x) for x in items]
    cut = max(1, min(len(items) - 1, round(len(items) * HEAD)))
    try:
        reader, writer = os.pipe()
    except OSError:
        return [fn(x) for x in items]
    try:
        pid = os.fork()
    except OSError:
        os.close(reader)
        os.close(writer)
        return [fn(x) for x in items]
    if pid == 0:  # the child: never returns
        os.close(reader)
        _child(fn, items[cut:], writer)
    os.close(writer)
    theirs: list[R] | None = None
    try:
        mine = [fn(x) for x in items[:cut]]
        theirs = _collect(reader, len(items) - cut)
    finally:
        os.close(reader)
        _reap(pid, kill=theirs is None)
    if theirs is None:  # the child failed: its share done here, as the plain loop does it
        theirs = [fn(x) for x in items[cut:]]
    return mine + theirs


def _child(fn: Callable[[T], R], items: Sequence[T], writer: int) -> None:
    """The tail's values, pickled down the pipe; then out, through no cleanup of the parent's
    (os._exit: its atexit handlers, open -o files and buffered output are the parent's own)."""
    code = 1
    try:
        # The parent's handlers turn SIGTERM and SIGINT into exceptions for its own cleanup; a
        # child ends plainly (the parent, stopped, kills it: _reap).
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)
        data = memoryview(pickle.dumps([fn(x) for x in items], protocol=pickle.HIGHEST_PROTOCOL))
        while data:
            data = data[os.write(writer, data[:_CHUNK]):]
        code = 0
    except BaseException:  # any failure: the parent does the share itself
        pass
    finally:
        os._exit(code)


def _collect(reader: int, count: int) -> list[R] | None:
    """The child's values, or None when they did not all come (it died, it raised)."""
    parts = []
    while chunk := os.read(reader, _CHUNK):
        parts.append(chunk)
    try:
        values = pickle.loads(b"".join(parts))
    except Exception:  # cut short (the child died mid-write): the parent does the share
        return None
    return values if isinstance(values, list) and len(values) == count else None


def _reap(pid: int, *, kill: bool) -> None:
    """The child waited for (killed first when this process stops early or its values did not
    come), so that none is left behind."""
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
