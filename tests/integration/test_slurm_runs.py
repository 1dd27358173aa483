"""`convmatrix slurm` through a real one-node Slurm cluster (tests/slurmkit.py): a two-cell
matrix as a two-task array job with --gres gpu:1, then the afterany merge job, to the report
files. One cell per shard: the host cell (the control, a few suite cases) and a baremetal cell
whose install fails (an empty wheelhouse), which the merged report must show as INVALID."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import slurmkit
from testkit import REPO

CASES = "conv1d and fp32 and not bwd and not zoo"  # a few catalogue cases: the test is about the engine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurmkit.Cluster]:
    problem = slurmkit.missing()
    if problem and os.environ.get("CI"):
        pytest.fail(f"CI must be able to start a Slurm cluster (.ci/run installs slurm-wlm munge): {problem}")
    if problem:
        pytest.skip(f"no Slurm cluster here: {problem}")
    with slurmkit.cluster(tmp_path_factory.mktemp("slurm")) as found:
        yield found


def two_cell_matrix(tmp: Path) -> Path:
    (tmp / "no-wheels").mkdir()
    path = tmp / "fleet.toml"
    path.write_text(f"""name = "fleet"
wheelhouse = "{tmp / 'no-wheels'}"
[axes]
lane = ["baremetal"]
torch = ["2.5.1"]
cuda = ["cu124"]
cudnn = ["bundled"]
python = ["3.11"]
[[include]]
lane = "host"
[control]
lane = "host"
""")
    return path


def test_a_matrix_through_a_slurm_array_to_a_merged_report(cluster: slurmkit.Cluster, tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**cluster.env(), "CONVMATRIX_PYTHON": sys.executable, "CONVMATRIX_VENVS": str(tmp_path / "venvs")}
    started = time.monotonic()
    submitted = subprocess.run(
        [sys.executable, "-m", "convmatrix", "slurm", "-m", str(two_cell_matrix(tmp_path)), "--shards", "2",
         "--out", str(out), "--gres", "gpu:1", "--time", "00:10:00", "--", "--", "-k", CASES],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False)
    assert submitted.returncode == 0, submitted.stderr
    lines = submitted.stdout.splitlines()
    array_id, merge_id = (line.split()[2] for line in lines[:2])
    assert lines[0].startswith(f"shards: job {array_id} (array 1-2)") and lines[1].startswith(f"merge: job {merge_id}")

    merge = cluster.wait(merge_id, timeout=600)
    tasks = cluster.job(array_id)
    print(f"slurm: array and merge done in {time.monotonic() - started:.1f} s")
    assert sorted(t["ArrayTaskId"] for t in tasks) == ["1", "2"]
    assert all(t["JobState"] in slurmkit.FINISHED for t in tasks)
    assert {t["TresPerNode"] for t in tasks} == {"gres:gpu:1"}  # each shard asked for, and got, a GPU
    assert merge[0]["Dependency"] in ("(null)", "") or "afterany" in merge[0]["Dependency"]
    # The merge started only after every shard ended.
    assert merge[0]["StartTime"] >= max(t["EndTime"] for t in tasks)

    for name in ("report.json", "report.md", "report.html", "junit.xml"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "report.json").read_text())
    cells = {c["cell"]: c for c in report["cells"]}
    assert cells["host"]["verdict"] == "control"
    bare = "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11"
    assert cells[bare]["verdict"] == "invalid" and any("install failed" in p for p in cells[bare]["problems"])
    assert {c["cell"] for c in report["cases"]} >= {"host"}
    assert all(c["case"].startswith("conv1d-fp32") for c in report["cases"] if c["cell"] == "host")
    text = (out / "slurm" / "merge.log").read_text()
    # The only red cell never installed: the infrastructure is all that failed, and the merge job says so (4).
    assert "control" in text and merge[0]["ExitCode"] == "4:0", text
    for index in (1, 2):
        assert (out / "slurm" / f"shard-{index}.log").exists()
