"""The suite's options given values it cannot use (issue 8, item 6): a results directory that is
a file, cannot be created or is read-only, and a --case-timeout of inf, nan or beyond its limit.
Each is pytest's usage error, exit 4, with one `ERROR:` line naming the option and the value;
never an INTERNALERROR traceback (exit 3, or 0 from xdist's controller)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from testkit import REPO, load_suite_module

isolation = load_suite_module("isolation")
CASE = "conv1d-fp32-k3-p1"
USAGE_ERROR = 4  # pytest.ExitCode.USAGE_ERROR
UNPRIVILEGED_UID = 1000


def suite(results_dir: Path, *args: str, prefix: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """One small case of the suite, as the harness runs it, from the repository root."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    command = [*prefix, sys.executable, "-m", "pytest", f"suites/test_conv.py::test_conv[{CASE}]",
               "--results-dir", str(results_dir), "--cell-id", "test-cell", "--device", "cpu", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def assert_usage_error(done: subprocess.CompletedProcess[str], line: str) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR, output
    assert "INTERNALERROR" not in output and "Traceback" not in output, output
    assert [text for text in output.splitlines() if text.startswith("ERROR:")] == [f"ERROR: {line}"], output


@functools.cache
def unprivileged_prefix() -> tuple[str, ...] | None:
    """How to run the suite where file modes bind it. As root (CI) they do not, so the suite
    runs in a user namespace where this uid is a plain user without capabilities: a 0o555
    directory is then read-only to it, as to anyone else. None: no way here."""
    if os.geteuid() != 0:
        return ()
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    prefix = (unshare, "--user", f"--map-user={UNPRIVILEGED_UID}")
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False, timeout=60)
    return prefix if probe.returncode == 0 else None


@pytest.fixture
def as_user() -> tuple[str, ...]:
    prefix = unprivileged_prefix()
    if prefix is None:
        pytest.skip("running as root without user namespaces (unshare): no directory is read-only to root")
    return prefix


@pytest.fixture
def read_only(tmp_path: Path) -> Path:
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o555)
    return directory


# --- --results-dir ---------------------------------------------------------------------------

@pytest.mark.parametrize("isolate", [(), ("--case-timeout", "5")], ids=["single", "isolated"])
def test_a_results_dir_that_is_a_file(tmp_path: Path, isolate: tuple[str, ...]) -> None:
    path = tmp_path / "results"
    path.write_text("not a directory\n")
    assert_usage_error(suite(path, *isolate), f"--results-dir {path}: not a directory")
    assert path.read_text() == "not a directory\n"


def test_a_results_dir_below_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    path = tmp_path / "file" / "results"
    assert_usage_error(suite(path), f"--results-dir {path}: cannot create it (Not a directory)")


@pytest.mark.parametrize("isolate", [(), ("--case-timeout", "5")], ids=["single", "isolated"])
def test_a_read_only_results_dir(read_only: Path, as_user: tuple[str, ...], isolate: tuple[str, ...]) -> None:
    assert_usage_error(suite(read_only, *isolate, prefix=as_user),
                       f"--results-dir {read_only}: cannot write there (Permission denied)")
    assert list(read_only.iterdir()) == []  # not even the probe is left


def test_a_results_dir_in_a_read_only_dir(read_only: Path, as_user: tuple[str, ...]) -> None:
    path = read_only / "results"
    assert_usage_error(suite(path, prefix=as_user), f"--results-dir {path}: cannot create it (Permission denied)")


def test_a_writable_results_dir_is_created_and_keeps_no_probe(tmp_path: Path) -> None:
    path = tmp_path / "new" / "results"
    done = suite(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in path.iterdir()) == ["env.json", "results.jsonl"]


# --- --case-timeout ----------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "shown"), [
    ("inf", "inf"), ("Infinity", "inf"), ("1e999", "inf"), ("nan", "nan"), ("-1", "-1.0"),
    ("2592001", "2592001.0"),  # past 30 days
])
def test_an_unusable_case_timeout(tmp_path: Path, given: str, shown: str) -> None:
    done = suite(tmp_path / "results", "--case-timeout", given)
    assert_usage_error(done, "--case-timeout takes a number of seconds >= 0 and at most 2592000 (30 days), "
                             f"not {shown}; 0 means no timeout")
    assert not (tmp_path / "results").exists()  # refused before anything was written


def test_the_longest_case_timeout_runs(tmp_path: Path) -> None:
    """The limit itself arms the watchdog's timer and faulthandler without overflow."""
    done = suite(tmp_path / "results", "--case-timeout", f"{isolation.MAX_CASE_TIMEOUT:.0f}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "results" / "results.jsonl").read_text().count('"status": "passed"') == 1
