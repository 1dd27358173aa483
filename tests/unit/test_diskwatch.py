"""tests/diskwatch.py: the session's disk line, seen in a real pytest run of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

LINE = re.compile(r"disk of (?P<path>\S+): (?P<start>[\d.]+) GB free at start, (?P<end>[\d.]+) GB at the end, "
                  r"least (?P<least>[\d.]+) GB after (?P<after>.+)")


def test_a_session_ends_with_one_line_per_filesystem_naming_the_low_point(tmp_path: Path) -> None:
    (tmp_path / "test_two.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "diskwatch", "-p", "no:cacheprovider", "-q",
                           "test_two.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    found = [m for m in map(LINE.fullmatch, done.stdout.splitlines()) if m]
    devices = {os.stat(m["path"]).st_dev for m in found}
    assert found and len(devices) == len(found), done.stdout  # one line per filesystem, none twice
    assert os.stat(tmp_path).st_dev in devices  # the temporary folder's is among them
    for m in found:
        assert float(m["least"]) <= float(m["start"]), m.group(0)
        assert m["after"] in ("the start", "test_two.py::test_one", "test_two.py::test_two"), m.group(0)
