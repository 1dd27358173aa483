"""The library audit's cost per cell and how many libraries it names (issue 47: goal at most 2 s with
a warm page cache), printed, never asserted. Runs suites/libaudit.py's audit() in each given venv's
interpreter, as the suite case does (a child that imports torch and calls cuDNN's version checks,
then the ELF reads and the table), once to warm the page cache, then --repeat times; printed beside
the plain alternative, a child of the same interpreter that imports torch and asks
torch.backends.cudnn.version() (what the stack check reads: the part of the audit no check avoids).
Then the audit's cost to a cell: the audit case's own duration (its results line's `duration_s`)
in a real suite run of that venv (`pytest suites --in-process -k audit-cuda-libraries`, collection
and all), where its child starts with the session (suites/conftest.py EarlyAudit) and runs beside
the session's own torch import and the collection.

    python bench/audit.py                                    # the cached torch 2.5.1 cu124 venvs
    python bench/audit.py --venv ~/.cache/convmatrix/venvs/baremetal-torch2.5.1-cu124-cudnn9.4.0.58-py3.11
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLAIN = "import torch; torch.backends.cudnn.version()"
PROBE = """
import json, sys, time
sys.path.insert(0, {suites!r})
import libaudit
times = []
for _ in range({runs}):
    started = time.perf_counter()
    table = libaudit.audit()
    times.append(time.perf_counter() - started)
print(json.dumps({{"times": times, "named": len(table["libraries"]),
                  "loaded": sum(1 for r in table["libraries"] if r["loaded"]), "findings": len(table["findings"])}}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", action="append", type=Path, help="a cell's venv (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cached = Path.home() / ".cache" / "convmatrix" / "venvs"
    venvs = args.venv or sorted(cached.glob("baremetal-torch2.5.1-cu124-*-py3.11"))
    venvs = [v for v in venvs if (v / "bin" / "python").exists()]
    if not venvs:
        print("no venv to audit: give --venv DIR", file=sys.stderr)
        return 2
    for venv in venvs:
        code = PROBE.format(suites=str(REPO / "suites"), runs=args.repeat + 1)
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, env=env,
                              check=False)
        if done.returncode != 0:
            print(f"{venv.name}: failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        data = json.loads(done.stdout.strip().splitlines()[-1])
        warm = data["times"][1:]
        plain = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            subprocess.run([str(venv / "bin" / "python"), "-c", PLAIN], capture_output=True, env=env, check=False)
            plain.append(time.perf_counter() - started)
        in_run, whole = in_a_run(venv, env, args.repeat)
        print(f"{venv.name}: audit {statistics.median(warm):.2f} s warm (median of {len(warm)}; "
              f"first {data['times'][0]:.2f} s), {data['named']} libraries named ({data['loaded']} loaded), "
              f"{data['findings']} finding(s); plain `import torch; cudnn.version()` child "
              f"{statistics.median(plain):.2f} s (median of {len(plain)}); the audit case in a suite run "
              f"{statistics.median(in_run):.2f} s (median of {len(in_run)}; the whole run "
              f"{statistics.median(whole):.2f} s), {statistics.median(in_run) / statistics.median(warm):.2f}x "
              f"the audit alone")
    return 0


def in_a_run(venv: Path, env: dict[str, str], repeat: int) -> tuple[list[float], list[float]]:
    """The audit case's duration_s in `repeat` real suite runs of the venv, and each run's wall time."""
    cases, walls = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
            started = time.perf_counter()
            subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", str(REPO / "suites"), "-q",
                            "--in-process", "--device", "cpu", "--results-dir", f"{tmp}/r", "--cell-id", "bench",
                            "-k", "audit-cuda-libraries"], capture_output=True, env=env, cwd=tmp, check=False)
            walls.append(time.perf_counter() - started)
            results = Path(tmp, "r", "results.jsonl")
            lines = [json.loads(x) for x in results.read_text().splitlines()] if results.exists() else []
            cases += [x["duration_s"] for x in lines if x.get("case") == "audit-cuda-libraries"]
    return cases or [float("nan")], walls


if __name__ == "__main__":
    sys.exit(main())
