"""Issue 51 for real: `convmatrix explore` on a host cell whose suite runs with a planted predicate
(tests/plugins/convmatrix_predicate.py, on the candidate only; explore is not told it) finds a
failing configuration within its budget, shrinks it to the predicate's minimal configuration under
the documented order, writes it as a case file with its provenance and repro, and states a region
over the predicate's fields; the case file then runs in the suite and fails there under the same
plugin, and passes without it. With nothing planted it finds nothing and says how much it tried."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from realrun import PLUGINS
from testkit import REPO

pytestmark = pytest.mark.slow
MATRIX = 'name = "ex"\n[axes]\nlane = ["host"]\nknobs = ["default", "benchmark=on"]\n[control]\nknobs = "default"\n'
CELL = "host+bench_on"
PREDICATE = 'dtype == "bfloat16" and groups >= 2'


def with_plugins() -> str:
    """The plugins' folder before whatever PYTHONPATH the session has (a checkout's src/ included)."""
    return os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))


def explore(tmp: Path, out: Path, predicate: str | None, budget: int) -> subprocess.CompletedProcess[str]:
    (tmp / "m.toml").write_text(MATRIX)
    env = dict(os.environ, CONVMATRIX_PYTHON=sys.executable, PYTHONPATH=with_plugins(),
               CONVMATRIX_PREDICATE_CELL=CELL, CONVMATRIX_PREDICATE=predicate or "")
    return subprocess.run([sys.executable, "-m", "convmatrix", "explore", "-m", str(tmp / "m.toml"), "--cell", CELL,
                           "--budget", str(budget), "--seed", "1", "--out", str(out), "--", "-p", "convmatrix_predicate"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=1800, check=False)


def test_a_planted_predicate_is_found_shrunk_written_and_reproduced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = explore(tmp_path, out, PREDICATE, 32)
    assert done.returncode == 1, done.stderr[-3000:]
    found = out / "finds" / "found-cudnn_not_supported.json"
    data = json.loads(found.read_text())
    (case,) = data["case"]
    assert {k: case[k] for k in ("op", "input", "out_channels", "kernel", "groups", "dtype", "direction")} == {
        "op": "conv1d", "input": [1, 2, 1], "out_channels": 2, "kernel": [1], "groups": 2, "dtype": "bfloat16",
        "direction": "forward"}
    assert not {"benchmark", "deterministic", "allow_tf32", "output_padding", "autocast", "layout"} & set(case)
    provenance = data["provenance"]
    assert provenance["recorded_by"] == "convmatrix explore" and provenance["config"]["seed"] == 1
    assert provenance["config"]["cell"] == CELL and provenance["config"]["family"] == "cudnn_not_supported"
    region = [line for line in done.stdout.splitlines() if line.startswith("region cudnn_not_supported:")]
    assert region and "dtype = bfloat16" in region[0] and "groups >= 2" in region[0], done.stdout
    assert (out / "finds" / "found-cudnn_not_supported.repro.py").read_text().startswith("# convmatrix repro --minimal")
    assert len((out / "tried.jsonl").read_text().splitlines()) == 32
    # The case file runs in the suite: it fails there under the same plugin, and passes without it.
    for planted, status in ((PREDICATE, "failed"), ("", "passed")):
        results = tmp_path / f"suite-{status}"
        env = dict(os.environ, PYTHONPATH=with_plugins(), CONVMATRIX_PREDICATE_CELL="x", CONVMATRIX_PREDICATE=planted)
        subprocess.run([sys.executable, "-m", "pytest", str(REPO / "suites"), "-q", "-p", "no:cacheprovider",
                        "-p", "convmatrix_predicate", "--cases", str(found), "-k", "found", "--cell-id", "x",
                        "--device", "cpu", "--results-dir", str(results)], env=env, cwd=REPO, capture_output=True,
                       check=False, timeout=600)
        (line,) = [json.loads(x) for x in (results / "results.jsonl").read_text().splitlines()]
        assert line["status"] == status, line


def test_with_nothing_planted_it_finds_nothing_and_says_how_much_it_tried(tmp_path: Path) -> None:
    done = explore(tmp_path, tmp_path / "out", None, 32)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "explore: 32 configuration(s) tried in 1 batch(es), seed 1" in done.stdout
    assert "nothing found" in done.stdout and not (tmp_path / "out" / "finds").exists()
