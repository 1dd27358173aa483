"""--retries on a real suite (host lane, the fault plugin): a suite SIGKILLed once runs again, both
attempts kept and shown, and ends green; a test's own failure is never run again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from realrun import PLUGINS, suite
from testkit import REPO, ran

pytestmark = pytest.mark.slow

CASES = ("conv1d-fp32-k3-p1", "conv2d-fp32-k3-p2-dilated2", "conv3d-fp32-k3-p1")
SELECT = ("-k", " or ".join(CASES))
MATRIX = 'name = "retry"\n[[include]]\nlane = "host"\n'


def harness(out: Path, faults: dict[str, Any], *options: str) -> subprocess.CompletedProcess[str]:
    """`convmatrix run` of the host cell with the fault plugin, this checkout's convmatrix first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    matrix, spec = out.parent / f"{out.name}.toml", out.parent / f"{out.name}.faults.json"
    matrix.write_text(MATRIX)
    spec.write_text(json.dumps(faults))
    env = dict(os.environ, CONVMATRIX_PYTHON=sys.executable, CONVMATRIX_FAULTS=str(spec),
               PYTHONPATH=os.pathsep.join([str(PLUGINS), str(REPO / "src")]))
    return subprocess.run([sys.executable, "-m", "convmatrix", "run", "-m", str(matrix), "--out", str(out),
                           *options, "--", "-p", "convmatrix_faults", *SELECT],
                          env=env, cwd=out.parent, capture_output=True, text=True, timeout=600, check=False)


def report(out: Path, control: Path, fmt: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, "-m", "convmatrix", "report", str(out), str(control), "--control",
                           "control", "--format", fmt], env=env, capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("control")
    assert suite(out, "control", *SELECT).wait(timeout=600) == 0
    return out


def test_a_suite_sigkilled_once_runs_again_both_attempts_are_shown_and_it_ends_green(
    tmp_path: Path, control: Path
) -> None:
    out = tmp_path / "run"
    done = harness(out, {"kill_once": {CASES[0]: True}}, "--retries", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "attempt 1 ended by killed" in done.stderr + done.stdout
    cell = ran(out, "host")
    first = cell / "attempts" / "1"
    crashed = [json.loads(line) for line in (first / "results.jsonl").read_text().splitlines()]
    assert [(r["case"], r["status"]) for r in crashed if r["status"] not in ("passed", "skipped")] == [
        (CASES[0], "crashed")]
    assert "SIGKILL" in crashed[[r["case"] for r in crashed].index(CASES[0])]["message"]
    meta = json.loads((cell / "cell.json").read_text())
    assert [(a["attempt"], a["path"], a["cause"]["cause"]) for a in meta["attempts"]] == [(1, "attempts/1", "killed")]
    last = [json.loads(line) for line in (cell / "results.jsonl").read_text().splitlines()]
    assert {r["status"] for r in last} <= {"passed", "skipped"} and CASES[0] in {r["case"] for r in last}

    text = report(out, control, "text")
    assert text.returncode == 0, text.stdout + text.stderr  # green: the last attempt is judged
    said = [line for line in text.stdout.splitlines() if line.startswith("! RETRIED host@cpu")]
    assert len(said) == 1 and "attempt 1 of 2: killed:" in said[0] and "attempt 2 of 2 (last, judged): ok" in said[0]
    junit = ElementTree.fromstring(report(out, control, "junit").stdout)
    (attempts,) = [t for t in junit.iter("testcase") if t.get("name") == "(attempts)"]
    (flaky,) = attempts.findall("flakyFailure")
    assert flaky.get("type") == "killed" and (flaky.get("message") or "").startswith("attempt 1 of 2: killed:")
    assert "attempt 2 of 2 (last, judged): ok" in (attempts.findtext("system-out") or "")
    assert junit.find(".//failure") is None


def test_without_retries_the_killed_attempt_is_the_result(tmp_path: Path, control: Path) -> None:
    out = tmp_path / "run"
    assert harness(out, {"kill_once": {CASES[0]: True}}).returncode == 0
    assert not (ran(out, "host") / "attempts").exists()
    assert report(out, control, "text").returncode == 1  # the crashed case regressed


def test_a_test_s_own_failure_is_never_retried(tmp_path: Path, control: Path) -> None:
    out = tmp_path / "run"
    done = harness(out, {"raise": {CASES[0]: "RuntimeError: the conv failed on its own"},
                         "kill": {}}, "--retries", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "running it again" not in done.stderr + done.stdout
    cell = ran(out, "host")
    assert not (cell / "attempts").exists() and "attempts" not in json.loads((cell / "cell.json").read_text())
    assert report(out, control, "text").returncode == 1
