"""`convmatrix run` (cli/run.py): what it refuses before any cell runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testkit import REPO


def test_a_selection_that_selects_no_cell_says_so_and_exits_2(tmp_path: Path) -> None:
    """Issue 34 item 7: `run -m matrix/default.toml --lane container --out X` exited 0 with no
    output at all (default.toml has no container cell), as if it had run green."""
    done = subprocess.run([sys.executable, "-m", "convmatrix", "run", "-m", str(REPO / "matrix/default.toml"),
                           "--lane", "container", "--out", str(tmp_path / "X")],
                          capture_output=True, text=True, check=False, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stderr.strip().splitlines()
    assert "default.toml: --lane container selects no cell (its cells' lanes: " in line, line
    assert not (tmp_path / "X").exists()
