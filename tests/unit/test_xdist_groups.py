"""`nox -s tests` runs on every core with `--dist loadgroup`: the tests that share a machine-wide
resource carry one xdist_group (given by tests/integration/conftest.py's collection hook) and
must run one after another on one worker. With pytest 9.2 and pytest-xdist 3.8 the groups were
silently ignored (pytest-xdist issue 1386): this fails on such a pair, as the lock could bring."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

from testkit import REPO

CONFTEST = '''
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name in ("test_a.py", "test_b.py"):
            item.add_marker(pytest.mark.xdist_group("shared"))
'''
TESTS = '''
import time
import pytest

@pytest.mark.parametrize("i", range(6))
def test_it(i):
    time.sleep(0.05)
'''


def test_a_group_given_at_collection_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # this folder's own config, not pyproject's
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    for name in ("test_a.py", "test_b.py", "test_c.py", "test_d.py"):
        (tmp_path / name).write_text(textwrap.dedent(TESTS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
                           "no:cacheprovider"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = re.findall(r"\[(gw\d)\] \[ *\d+%\] PASSED (test_\w)\.py::test_it\[\d\]", done.stdout)
    assert len(ran) == 24, done.stdout
    grouped = {worker for worker, module in ran if module in ("test_a", "test_b")}
    versions = f"pytest {version('pytest')}, pytest-xdist {version('pytest-xdist')}"
    assert len(grouped) == 1, (f"the group ran on {sorted(grouped)}: {versions} ignore xdist_group "
                               f"(pyproject.toml's test extra says why):\n{done.stdout}")
    assert {worker for worker, _ in ran} == {"gw0", "gw1"}, done.stdout  # the others used both workers


def test_the_shared_groups_name_modules_that_exist() -> None:
    """A renamed module would silently leave its group, to run beside the others."""
    spec = importlib.util.spec_from_file_location("integration_conftest", REPO / "tests" / "integration" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    named = {m for modules in module.SHARED.values() for m in modules}
    assert named and {m for m in named if not (REPO / "tests" / "integration" / m).is_file()} == set()
