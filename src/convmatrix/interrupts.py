"""SIGTERM and SIGINT as an exception (Interrupted) that the lane can clean up after, and blocks
during which they wait.

Why not KeyboardInterrupt: SIGTERM is what CI runners and nox send, and it must clean up the same
way; and why a BaseException: so that no `except Exception` on the way up swallows it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """SIGTERM or SIGINT reached the process inside interruptible()."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.detail = "no container was running"  # what became of the container, once known
        self.recorded_in: Path | None = None  # the results directory recording the cut-short run
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 143 for SIGTERM, 130 for SIGINT


class _State:
    """What the handler needs across blocks: whether a signal already fired, whether one waits
    for the end of a deferred block, and how deep the deferred blocks are nested."""

    def __init__(self) -> None:
        self.fired = False
        self.pending: int | None = None
        self.deferred = 0


_state = _State()


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state.fired:
        return  # the clean-up the first one started must not be cut short
    if _state.deferred:
        _state.pending = signum
        return
    _state.fired = True
    raise Interrupted(signum)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While the block runs (in the main thread), the first SIGTERM or SIGINT raises Interrupted
    where the main thread is, even blocked on a socket; later ones are ignored so that the
    clean-up the first one starts is not cut short (interrupted nox sends its command SIGINT,
    then SIGTERM 0.3 s later). The previous handlers come back when the block ends."""
    global _state
    outer, _state = _state, _State()
    previous = {signum: signal.signal(signum, _handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
        _state = outer


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGTERM and SIGINT wait until the block ends; the first of them is raised there. For
    engine calls whose answer we must hold to clean up (a container the engine made but we never
    heard of would stay), and for clean-up itself.

    Two layers, because a process-directed signal goes to any thread that does not block it: the
    handler itself defers (Python runs handlers in the main thread, whichever thread took the
    signal: a test runner's or an SDK's threads), and the mask, which threads started in the block
    inherit, keeps those threads from taking the signal at all (one taken by another thread wakes
    the main thread only when it next runs Python code, not out of a blocking call)."""
    on_main = threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    if on_main:
        _state.deferred += 1
    try:
        yield
    finally:
        if on_main:
            _state.deferred -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # one blocked here is handled now
        if on_main and not _state.deferred and _state.pending is not None and not _state.fired:
            signum, _state.pending = _state.pending, None
            _state.fired = True
            raise Interrupted(signum)
