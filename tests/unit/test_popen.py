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
