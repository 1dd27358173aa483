"""SIGTERM and SIGINT as an exception (Interrupted) that the lane can clean up after, and blocks
during which they wait.

Why not KeyboardInterrupt: SIGTERM is what CI runners and nox send, and it must clean up the same
way; and why a BaseException: so that no `except Exception` on the way up swallows it.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """SIGTERM or SIGINT reached the process inside interruptible()."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.cell: str | None = None  # the cell whose run it cut short, once known
        self.detail = ""  # what became of the run's container, once known
        self.recorded_in: Path | None = None  # the results directory recording the cut-short run
        self.runs = 1  # how many cut-short runs recorded_in holds (concurrent cells: the run directory)
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 143 for SIGTERM, 130 for SIGINT

    def line(self) -> str:
        """What the entry point prints: what was cut short, and where it is recorded."""
        where = f"{self.cell}: " if self.cell else ""
        if self.recorded_in is None:
            said = f"{where}interrupted by {self.name} before its suite ran"
            return f"{said}; {self.detail}" if self.detail else said
        detail = f"; {self.detail}" if self.detail else ""
        what = "its run is" if self.runs == 1 else f"their {self.runs} runs are"
        return (f"{where}interrupted by {self.name}{detail}; {what} recorded as incomplete in "
                f"{self.recorded_in} (run it again, or --resume)")


class _State:
    """What the handler needs across blocks: whether a signal already fired, whether one waits
    for the end of a deferred block, and how deep the deferred blocks are nested."""

    def __init__(self) -> None:
        self.fired = False
        self.pending: int | None = None
        self.deferred = 0
        self.stopped: int | None = None  # stop_all's signal: worker threads end their work
        self.lock = threading.Lock()
        self.cancels: dict[int, Callable[[], None]] = {}  # what ends each blocking call in flight


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
        if on_main:
            _fire_pending()


# --- worker threads ----------------------------------------------------------------------------
# Python runs signal handlers in the main thread only, so Interrupted is raised there. Cells that
# run in worker threads (orchestrate's pools) block in a child process or a container; each such
# call registers how to end it, and stop_all(), called by the main thread on Interrupted, ends
# them all: the call then returns and raise_if_stopped() turns that into Interrupted in the worker,
# which records its cell exactly as the main thread would.


_tokens = itertools.count()


@contextlib.contextmanager
def stoppable(cancel: Callable[[], None]) -> Iterator[None]:
    """While the block runs, stop_all() calls cancel (from the main thread): it must make the
    block's blocking call return (terminate the child, kill the container). Called at once when
    the run is already stopping."""
    state = _state
    token = next(_tokens)
    with state.lock:
        state.cancels[token] = cancel
        stopped = state.stopped is not None
    if stopped:
        cancel()
    try:
        yield
    finally:
        with state.lock:
            state.cancels.pop(token, None)


def stop_all(signum: int) -> None:
    """End every stoppable call in flight, and any started from now on (the run is over)."""
    state = _state
    with state.lock:
        state.stopped = signum
        cancels = list(state.cancels.values())
    for cancel in cancels:
        with contextlib.suppress(Exception):  # one that fails must not spare the others
            cancel()


def raise_if_stopped() -> None:
    """Interrupted in a worker thread whose run stop_all() ended."""
    if _state.stopped is not None:
        raise Interrupted(_state.stopped)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """In the main thread: SIGTERM and SIGINT wait until the block ends, the first of them raised
    there. Unlike signals_deferred(), no signal mask: the threads started in the block (workers
    that start children) must not pass a blocked SIGTERM on to those children."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state.deferred += 1
    try:
        yield
    finally:
        _state.deferred -= 1
        _fire_pending()


def _fire_pending() -> None:
    """At the end of the outermost deferring block: raise the signal it held back, if any."""
    if not _state.deferred and _state.pending is not None and not _state.fired:
        signum, _state.pending = _state.pending, None
        _state.fired = True
        raise Interrupted(signum)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """SIGTERM this process when its parent dies (Linux; best effort): a run whose nox was
    killed alone (kill PID, or `timeout`, which signal one process) then stops its suite and
    container too, instead of running to its end unattended."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
