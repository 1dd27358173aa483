"""Issue 48's figures, printed in one run: the per-case overhead of measuring memory (and kernels)
against today's suite on the CPU lane (goal <= 10%), and how often the same stack against itself
reads `slower` under a CPU hog over RUNS runs (goal 0).

    python bench/fallback_cost.py [--runs 10] [-k conv2d-fp32] [--python PY]

Today's suite is `git show HEAD:suites` unpacked into a temporary folder (read only: no git state
changes). Overhead: the mean per-case wall time (results.jsonl duration_s of the passing cases),
this suite against today's, alternated RUNS // 2 times each. False slower: a control run idle, then
a candidate run of the same stack with one busy process per CPU beside it, judged by
results/night.judge; counts the cases and cells it calls slower, beside what the plain rule (the
ratio of the medians at least 1.5, no bound, no reference) would have called slower. Asserts nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from convmatrix import results  # noqa: E402
from convmatrix.results import night  # noqa: E402
from convmatrix.results.outcomes import Verdict  # noqa: E402


def run_suite(python: str, suites: Path, out: Path, cell: str, select: str) -> list[float]:
    subprocess.run([python, "-m", "pytest", str(suites), "--results-dir", str(out), "--cell-id", cell,
                    "--device", "cpu", "-q", "-p", "no:cacheprovider", "-k", select],
                   check=False, capture_output=True, timeout=1800, cwd=suites.parent)
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x.strip()]
    return [r["duration_s"] for r in lines if r["status"] == "passed" and r.get("duration_s") is not None]


def todays_suite(into: Path, base: str) -> Path:
    tar = subprocess.run(["git", "-C", str(REPO), "archive", base, "suites"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(into, filter="data")
    return into / "suites"


def spin() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("-k", dest="select", default="conv2d-fp32")
    parser.add_argument("--base", default="HEAD", help="the revision whose suites/ is today's (before issue 48)")
    parser.add_argument("--python", default=os.environ.get("CONVMATRIX_PYTHON") or sys.executable)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        old_suite = todays_suite(base / "head", args.base)
        old: list[float] = []
        new: list[float] = []
        for i in range(max(1, args.runs // 2)):
            old += run_suite(args.python, old_suite, base / f"o{i}", "old", args.select)
            new += run_suite(args.python, REPO / "suites", base / f"n{i}", "new", args.select)
        overhead = (sum(new) / len(new)) / (sum(old) / len(old)) - 1 if old and new else None
        print(f"overhead: {len(new)} case runs, mean {sum(new) / len(new) * 1000:.1f} ms against "
              f"{sum(old) / len(old) * 1000:.1f} ms today", flush=True)
        slower_cases = slower_cells = unsure = plain = 0
        for i in range(args.runs):
            run = base / f"hog{i}"
            run_suite(args.python, REPO / "suites", run / "control@cpu", "control", args.select)
            hogs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(os.cpu_count() or 1)]
            for hog in hogs:
                hog.start()
            try:
                run_suite(args.python, REPO / "suites", run / "candidate@cpu", "candidate", args.select)
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.join()
            loaded = results.load([str(run)])
            judged = night.judge(loaded.results, "control")
            (cell,) = [c for c in judged.cells if c.cell == "candidate"]
            said = [c for c in cell.cases if c.verdict == Verdict.SLOWER]
            slower_cases += len(said)
            slower_cells += cell.verdict == Verdict.SLOWER
            unsure += sum(1 for c in cell.cases if c.cost is not None and c.cost.unsure)
            times = [c.cost.time_ratio for c in cell.cases if c.cost is not None and c.cost.time_ratio]
            plain += sum(1 for t in times if t >= 1.5)
            print(f"run {i + 1}: {len(said)} slower case(s); time ratios {min(times, default=0):.2f}.."
                  f"{max(times, default=0):.2f}; {unsure} unsure so far; the plain rule: {plain}", flush=True)
    print(json.dumps({"select": args.select, "runs": args.runs,
                      "overhead_ratio": round(overhead, 4) if overhead is not None else None,
                      "false_slower_cases": slower_cases, "false_slower_cells": slower_cells,
                      "timing_unsure_cases": unsure, "plain_rule_slower_cases": plain}))


if __name__ == "__main__":
    main()
