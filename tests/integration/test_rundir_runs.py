"""What a real suite run writes is what the harness reads: suites/records.py, shared by both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from convmatrix.results import rundir
from testkit import REPO


def test_what_the_suite_writes_is_what_the_harness_reads(tmp_path: Path) -> None:
    """A real suite run: every line and env.json pass the checks of suites/records.py."""
    out = tmp_path / "r"
    done = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "suites"), "-q", "-k", "conv1d-fp32",
                           "--results-dir", str(out), "--cell-id", "c", "--device", "cpu"],
                          capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:]
    lines = [json.loads(line) for line in (out / rundir.RESULTS).read_text().splitlines()]
    assert lines and all(rundir.records.result_problems(line) == [] for line in lines)
    env = json.loads((out / rundir.ENV_JSON).read_text())
    assert rundir.records.env_problems(env) == []
    assert rundir.records.parse_time(env["ended"]) is not None
