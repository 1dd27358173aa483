"""The subprocess helper: every line to the log and the terminal, the exit status, and no child
left behind when we are interrupted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from convmatrix import popen


def test_every_line_goes_to_the_log_and_the_terminal(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "log.txt"
    code = popen.stream([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                        log_path=log)
    assert code == 3
    lines = log.read_text().splitlines()
    assert lines[0].startswith("$ ") and set(lines[1:]) == {"out", "err"}
    assert "out" in capfd.readouterr().out


def test_a_command_that_cannot_start_is_127_and_said(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    assert popen.stream([str(tmp_path / "missing")], log_path=log, echo=False) == popen.NOT_STARTED
    assert "cannot start" in log.read_text()


def test_an_interrupt_terminates_the_child() -> None:
    child = subprocess.Popen(["sleep", "60"], stdout=subprocess.PIPE)
    with pytest.raises(KeyboardInterrupt), popen.ended(child):
        raise KeyboardInterrupt
    assert child.returncode == -15


def test_a_child_that_ignores_sigterm_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(popen, "GRACE_S", 0.5)
    child = subprocess.Popen(["sh", "-c", "trap '' TERM; echo ready; sleep 60"], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"  # the trap is set
    with pytest.raises(KeyboardInterrupt), popen.ended(child):
        raise KeyboardInterrupt
    assert child.returncode == -9


def test_a_huge_line_is_cut_in_the_log_with_a_mark_and_memory_stays_bounded(tmp_path: Path) -> None:
    """Issue 21, item 8: a 400 MB line took the harness to 2 GB and wrote a 400 MB evidence file."""
    import resource

    log = tmp_path / "log.txt"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = popen.stream([sys.executable, "-c", "import sys; sys.stdout.write('x' * 50_000_000 + '\\nafter\\n')"],
                        log_path=log, echo=False)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    lines = log.read_bytes().split(b"\n")
    assert code == 0 and lines[2] == b"after"
    assert len(lines[1]) < popen.LINE_LIMIT + 100
    assert lines[1].endswith(f"{50_000_000 - popen.LINE_LIMIT:,} more bytes of this line cut]".encode())
    assert grown_mb < 40  # the line was never held whole (50 MB)


def test_the_line_cutter_keeps_lines_whole_across_chunks() -> None:
    got: list[bytes] = []
    cutter = popen.LineCutter(got.append, limit=10)
    for chunk in (b"ab", b"c\nde", b"f\n0123456789abc", b"def\n", b"tail"):
        cutter.feed(chunk)
    cutter.close()
    assert got == [b"abc\n", b"def\n", b"0123456789 \xe2\x80\xa6 [convmatrix: 6 more bytes of this line cut]\n", b"tail\n"]
