"""The project as a user installs it: a wheel built from a clean copy of the checkout, and a
command runner that shows a failing command's output (tests/integration/test_wheel_install.py,
test_from_model_fresh.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from testkit import REPO


def sh(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300,
       check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def build_wheel(tmp: Path) -> Path:
    """The wheel, built from a clean copy of what it is made of (no stale build/ of the checkout's,
    nothing written into the checkout)."""
    src = tmp / "src-copy"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".ruff_cache", ".mypy_cache")
    for name in ("src", "suites", "images", "matrix"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", src, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("convmatrix-*.whl")
    return wheel
