"""Issue 49: the rootless Podman test gives its unprivileged user a readable copy of the harness
(tests/containerkit.readable_copy), so the tests pass from a checkout in a private folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from containerkit import readable_copy
from convmatrix.run.lanes import containers


def test_the_rootless_user_gets_a_readable_copy_of_a_private_checkout(tmp_path: Path) -> None:
    """The checkout in a 0700 folder: the copy in the user's home holds the package and the suite,
    every folder enterable and every file readable by anyone, and imports from there."""
    checkout = Path(containers.__file__).parents[3].parent
    home = tmp_path / "home"
    home.mkdir()
    src = readable_copy(checkout, home)
    assert (src / "convmatrix" / "run" / "lanes" / "containers.py").is_file()
    assert (src.parent / "suites" / "conftest.py").is_file()
    assert all(p.stat().st_mode & (0o005 if p.is_dir() else 0o004) for p in src.parent.rglob("*"))
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(src)!r}); "
                           "import convmatrix.run.lanes.containers as c; print(c.__file__)"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith(str(src)), done.stderr
