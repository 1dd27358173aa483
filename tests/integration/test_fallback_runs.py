"""Issue 48, through real suite runs: a candidate cell whose plugin turns oneDNN off
(tests/plugins/convmatrix_no_onednn.py) falls back from Mkldnn to Slow3d on its batched conv3d. It
reads `fallback`, naming `Mkldnn → Slow3d` with its memory and time ratios, in all five formats;
exit 0 by default and 1 under `--fail-on fallback` (and `regression,fallback`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from realrun import PLUGINS
from testkit import REPO

pytestmark = pytest.mark.slow
CASE = "conv3d-fp32-k3-p1"


def suite(out: Path, cell_id: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(PLUGINS), CONVMATRIX_NO_ONEDNN_CELL="candidate")
    subprocess.run([sys.executable, "-m", "pytest", str(REPO / "suites"), "-q", "-p", "no:cacheprovider",
                    "-p", "convmatrix_no_onednn", "--results-dir", str(out / f"{cell_id}@cpu"), "--cell-id", cell_id,
                    "--device", "cpu", "-k", CASE], env=env, cwd=REPO, capture_output=True, check=True, timeout=600)


def report(out: Path, fmt: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convmatrix", "report", str(out), "--control", "control",
                           "--format", fmt, *extra], capture_output=True, text=True, check=False, cwd=REPO)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fallback") / "run"
    suite(out, "control")
    suite(out, "candidate")
    return out


def test_the_candidate_without_onednn_reads_fallback_in_every_format(run: Path) -> None:
    said: dict[str, Any] = {fmt: report(run, fmt) for fmt in ("text", "markdown", "html", "json", "junit")}
    assert all(done.returncode == 0 for done in said.values()), {f: d.stderr for f, d in said.items()}
    data = json.loads(said["json"].stdout)
    (cell,) = [c for c in data["cells"] if c["cell"] == "candidate"]
    assert cell["verdict"] == "fallback" and not cell["fails"]
    (case,) = [c for c in data["cases"] if c["cell"] == "candidate" and c["case"] == CASE]
    cost = case["cost"]
    assert case["verdict"] == "fallback" and cost["fallback"]
    assert (cost["control_backend"], cost["backend"]) == ("Mkldnn", "Slow3d")
    assert cost["memory_ratio"] > 1.5 and cost["time_ratio"] is not None  # vol2col's columns: about 14x here
    for fmt in ("text", "markdown", "html"):
        text = said[fmt].stdout
        assert "Mkldnn → Slow3d" in text and "memory ×" in text and "time ×" in text, fmt
    testcase = ET.fromstring(said["junit"].stdout).find(f"testsuite[@name='candidate@cpu']/testcase[@name='{CASE}']")
    assert testcase is not None and "Mkldnn → Slow3d" in (testcase.find("skipped").get("message") or "")  # type: ignore[union-attr]


@pytest.mark.parametrize("fail_on", ["fallback", "regression,fallback"])
def test_fail_on_fallback_makes_it_red(run: Path, fail_on: str) -> None:
    done = report(run, "junit", "--fail-on", fail_on)
    assert done.returncode == 1 and "candidate@cpu" in done.stderr
    suite_ = ET.fromstring(done.stdout).find("testsuite[@name='candidate@cpu']")
    assert suite_ is not None and int(suite_.get("failures") or 0) >= 1
    text = report(run, "text", "--fail-on", fail_on)
    assert text.returncode == 1 and "passed at a cost (fallback)" in text.stderr
