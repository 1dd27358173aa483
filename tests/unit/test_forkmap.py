"""forkmap.mapped: the plain loop's values in its order, whatever the child does (it is forked, it
raises, it is killed, it sends nothing), and no child left behind; a child only where it can pay."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convmatrix import forkmap

# What can_fork asks of the machine, asked here on its own (a can_fork that never forks must fail
# the tests below, not skip them).
TWO_CPUS = pytest.mark.skipif(forkmap.cpus() < 2 or threading.active_count() > 1,
                              reason="forkmap forks only with a second CPU to run on, in a process of one thread")


def square(x: int) -> int:
    return x * x


def in_child(parent: int) -> bool:
    return os.getpid() != parent


def note_pid(path: Path) -> None:
    """This process's pid in path, whole when the file appears (written aside, then renamed)."""
    aside = path.with_name(f"{path.name}.{os.getpid()}")
    aside.write_text(str(os.getpid()))
    os.replace(aside, path)


def gone(pid: int) -> bool:
    """Reaped: no longer this process's child, zombie or not."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@TWO_CPUS
def test_the_tail_is_done_by_a_child_and_the_head_here() -> None:
    parent = os.getpid()
    pids = forkmap.mapped(lambda _: os.getpid(), range(100), minimum=2)
    cut = round(100 * forkmap.HEAD)
    assert pids[:cut] == [parent] * cut
    assert len(set(pids[cut:])) == 1 and pids[cut] != parent
    assert gone(pids[cut])


@given(st.lists(st.integers(), max_size=30), st.integers(1, 40))
def test_the_values_are_the_plain_loops_in_its_order(items: list[int], minimum: int) -> None:
    assert forkmap.mapped(square, items, minimum=minimum) == [square(x) for x in items]


def child_fault(kind: str, parent: int, pid_file: Path) -> Callable[[int], int]:
    """square, except in a forked child, where it records its pid and then fails as kind says."""
    def fn(x: int) -> int:
        if in_child(parent):
            note_pid(pid_file)
            if kind == "killed":
                os.kill(os.getpid(), signal.SIGKILL)
            if kind == "raises":
                raise ValueError("only in the child")
            if kind == "exits":
                os._exit(0)  # before it sent anything: an exit that looks clean
            if kind == "unpicklable":
                return lambda: x  # type: ignore[return-value]  # pickling it fails in the child
        return square(x)
    return fn


@TWO_CPUS
@pytest.mark.parametrize("kind", ["killed", "raises", "exits", "unpicklable"])
def test_a_child_that_fails_leaves_its_share_to_this_process(kind: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    items = list(range(80))
    assert forkmap.mapped(child_fault(kind, os.getpid(), pid_file), items, minimum=2) == [square(x) for x in items]
    assert gone(int(pid_file.read_text()))


def test_an_exception_of_fn_is_raised_here_as_by_the_plain_loop() -> None:
    def fn(x: int) -> int:
        if x == 70:
            raise KeyError(x)
        return x
    with pytest.raises(KeyError):
        forkmap.mapped(fn, range(100), minimum=2)


@TWO_CPUS
def test_stopped_in_its_own_share_it_kills_and_reaps_the_child(tmp_path: Path) -> None:
    parent, pid_file, survived = os.getpid(), tmp_path / "child", tmp_path / "survived"

    def fn(x: int) -> int:
        if in_child(parent):
            note_pid(pid_file)
            time.sleep(20)  # only a kill ends it sooner
            survived.touch()
        elif x == 10:
            while not pid_file.exists():
                pass
            raise KeyboardInterrupt
        return x
    with pytest.raises(KeyboardInterrupt):
        forkmap.mapped(fn, range(100), minimum=2)
    assert gone(int(pid_file.read_text()))
    assert not survived.exists()


@pytest.mark.parametrize("why", ["few items", "one cpu", "another thread"])
def test_no_child_where_it_cannot_pay(why: str, monkeypatch: pytest.MonkeyPatch) -> None:
    count = 10 if why == "few items" else 200
    if why == "one cpu":
        monkeypatch.setattr(forkmap, "cpus", lambda: 1)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    if why == "another thread":
        other.start()
    try:
        assert set(forkmap.mapped(lambda _: os.getpid(), range(count), minimum=64)) == {os.getpid()}
    finally:
        stop.set()
        if other.is_alive():
            other.join()
