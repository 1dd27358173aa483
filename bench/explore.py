"""Issue 51's figures, printed in one run (docs/explore.md, docs/performance.md):

    python bench/explore.py [--seeds 20] [--batch-python PY] [--no-real]

1. For each planted predicate of tests/explorekit.py, over SEEDS seeds: the configurations the
   search draws before it finds the predicate (goal: within 500) and the runs (batches) shrinking
   takes to its minimal configuration (goal: at most 100), judged in-process by the predicate (the
   counts do not depend on how a batch runs).
2. One real batch of 32 CPU configurations through `convmatrix run` on two host cells (the lane
   explore uses): configurations per minute, and the harness's share of the wall time (1 - the
   cases' own time over the wall time), beside the same case file run by pytest directly in one
   interpreter per cell (the plain alternative), as a ratio.

Asserts nothing. Needs torch in --batch-python (default $CONVMATRIX_PYTHON or this interpreter).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests")]

from convmatrix.explore import search, space  # noqa: E402
from explorekit import FAMILY, PLANTED, PredicateLane  # noqa: E402

MATRIX = 'name = "bench"\n[axes]\nlane = ["host"]\nknobs = ["default", "benchmark=on"]\n[control]\nknobs = "default"\n'


def planted(seeds: int) -> dict[str, dict[str, object]]:
    made: dict[str, dict[str, object]] = {}
    for name, predicate in PLANTED.items():
        found, rounds = [], []
        for seed in range(seeds):
            done = search.explore(PredicateLane(predicate), seed=seed, budget=500)
            if FAMILY in done.found_after:
                found.append(done.found_after[FAMILY])
                rounds.append(done.shrunk[0].rounds)
        made[name] = {"found_in": f"{len(found)}/{seeds}", "configs_to_find_max": max(found, default=None),
                      "configs_to_find_median": statistics.median(found) if found else None,
                      "shrink_runs_max": max(rounds, default=None)}
    return made


def cases_seconds(run: Path) -> float:
    total = 0.0
    for lines in run.rglob("results.jsonl"):
        for line in lines.read_text().splitlines():
            total += float(json.loads(line).get("duration_s") or 0)
    return total


def real(python: str) -> dict[str, object]:
    rng = random.Random(1)
    configs = [space.draw(rng, cuda=False) for _ in range(search.BATCH)]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "m.toml").write_text(MATRIX)
        cases = base / "b.json"
        cases.write_text(json.dumps({"case": [space.entry(c, f"c{i:04d}") for i, c in enumerate(configs)]}))
        env = dict(os.environ, CONVMATRIX_PYTHON=python, PYTHONPATH=str(REPO / "src"))
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "convmatrix", "run", "-m", str(base / "m.toml"),
                        "--out", str(base / "run"), "--jobs", "2", "--", "--cases", str(cases), "-k", "b-"],
                       env=env, check=False, capture_output=True, timeout=3600)
        harness_wall = time.monotonic() - started
        inside = cases_seconds(base / "run")
        started = time.monotonic()
        plain = [subprocess.Popen([python, "-m", "pytest", str(REPO / "suites"), "-q", "-p", "no:cacheprovider",
                                   "--in-process", "--results-dir", str(base / f"plain{i}"), "--cell-id", f"plain{i}",
                                   "--device", "cpu", "--cases", str(cases), "-k", "b-"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO) for i in range(2)]
        for proc in plain:
            proc.wait(timeout=3600)
        plain_wall = time.monotonic() - started
    return {"configs": len(configs), "harness_wall_s": round(harness_wall, 1),
            "configs_per_minute": round(len(configs) / harness_wall * 60, 1),
            "cases_s": round(inside, 1), "harness_share": round(1 - inside / 2 / harness_wall, 3),
            "plain_pytest_wall_s": round(plain_wall, 1), "ratio_to_plain": round(harness_wall / plain_wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--batch-python", default=os.environ.get("CONVMATRIX_PYTHON") or sys.executable)
    parser.add_argument("--no-real", action="store_true", help="only the in-process figures")
    args = parser.parse_args()
    result: dict[str, object] = {"planted": planted(args.seeds), "load": os.getloadavg()[0]}
    if not args.no_real:
        result["real_batch"] = real(args.batch_python)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
