"""Issue 49: the bench runs on a CPU machine (it exited 2 there: its cu124 stacks were refused) and
CI runs its short mode, so that a refusal like that one cannot go unseen."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from testkit import REPO


def test_the_bench_allows_its_cuda_stacks_on_the_cpu(tmp_path: Path) -> None:
    loader = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
    assert loader is not None and loader.loader is not None
    bench = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(bench)
    assert bench.Bench(tmp_path, "x").env["CONVMATRIX_ALLOW_CPU"] == "1"


def test_the_short_bench_runs_and_names_the_rg_beside_the_triage_figure() -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--short", "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert set(out["figures"]) == {"report_merge_s", "report_merge_peak_mb", "triage_vs_grep"}
    assert out["commands"]["triage_vs_grep"][-1].startswith("rg: ")
