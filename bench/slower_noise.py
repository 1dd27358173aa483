"""How often two runs of the same stack are called SLOWER (x1.5; the cell-level mark is gone since
issue 48): the rule on one timing per case
against the rule on repeated timings (verdicts.timed_ratio, typical_slowdown).

    python bench/slower_noise.py [--pairs 10] [-k conv2d] [--python PY]

Runs the suite twice PAIRS times on one interpreter (PY, default $CONVMATRIX_PYTHON or this one;
it needs torch), on the CPU, with the selection -k; then, for each pair, the cell slowdown each
rule gives the second run against the first: one timing per case (the first of each case's
repeated calls, which is what a single timed call measures), and the repeats beyond their noise.
Prints how many pairs each rule flags (slowdown >= 1.5) and the ratio of the two counts, and
the spread of the per-case single-timing ratios. Target: the repeats rule flags none of 10.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from convmatrix.report import verdicts  # noqa: E402
from convmatrix.results.outcomes import Outcome  # noqa: E402
from convmatrix.results.read import Case  # noqa: E402


def run_suite(python: str, out: Path, select: str) -> dict[str, Case]:
    subprocess.run([python, "-m", "pytest", str(REPO / "suites"), "--results-dir", str(out), "--cell-id", "bench",
                    "--device", "cpu", "-q", "--in-process", "-p", "no:cacheprovider", "-k", select],
                   check=False, capture_output=True, timeout=1800)
    cases = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        runs = tuple((record.get("timing") or {}).get("forward_runs") or ())
        if record["status"] == "passed" and runs:
            cases[record["case"]] = Case(record["case"], Outcome.PASS, None, None, {}, (), sorted(runs)[len(runs) // 2],
                                         None, None, {}, runs)
    return cases


def single(before: dict[str, Case], after: dict[str, Case]) -> tuple[float, list[float]]:
    ratios = [after[n].forward_runs[0] / before[n].forward_runs[0] for n in before if n in after]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)), ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("-k", dest="select", default="conv2d")
    parser.add_argument("--python", default=os.environ.get("CONVMATRIX_PYTHON") or sys.executable)
    args = parser.parse_args()
    flagged_single = flagged_repeats = 0
    spread: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            first = run_suite(args.python, Path(tmp) / f"{pair}a", args.select)
            second = run_suite(args.python, Path(tmp) / f"{pair}b", args.select)
            old, ratios = single(first, second)
            spread += ratios
            new = verdicts.typical_slowdown([verdicts.timed_ratio(first[n], second[n]) for n in first if n in second])
            flagged_single += old >= 1.5
            flagged_repeats += (new or 0) >= 1.5
            print(f"pair {pair + 1}: one timing ×{old:.2f}, repeats ×{new}", flush=True)
    result = {"pairs": args.pairs, "cases": args.select, "flagged_one_timing": flagged_single,
              "flagged_repeats": flagged_repeats,
              "single_ratio_range": [round(min(spread), 4), round(max(spread), 2)],
              "ratio_flagged_repeats_to_one_timing":
                  round(flagged_repeats / flagged_single, 2) if flagged_single else None}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
