"""The wall time of the project's default test run serially and on every core (the pytest-xdist
options of `nox -s tests`), one after the other on this machine, and their ratio.

    .nox/tests/bin/python bench/tests_parallel.py [--python PY] [--rounds N] [-- PYTEST_ARGS...]

The interpreter that runs this needs nox (it reads nox -s tests' options from noxfile.py). PY
(default: .nox/tests/bin/python, the venv `nox -s tests` makes from the lock, else this
interpreter) runs `pytest PYTEST_ARGS` (default: none, the full default run as CI has it; e.g.
-- -m "not slow" for the unit tier) N times each way (default 1), serial and parallel in turn, so
that a change in the machine's load falls on both. Prints each run's wall time and pytest's
summary line, then one JSON line: the median wall times, serial / parallel, the CPUs. Asserts
nothing; a run that did not pass says so with its exit code (the ratio of a failing run means little).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from noxfile import PARALLEL  # noqa: E402  (the options nox -s tests runs with)

SERIAL = ("-n", "0")  # xdist's own way to run in this process: as if it were not installed


def default_python() -> str:
    venv = REPO / ".nox" / "tests" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def timed(python: str, options: tuple[str, ...], selection: list[str]) -> tuple[float, int, str]:
    """Wall seconds, exit code and pytest's summary line of one run."""
    started = time.monotonic()
    done = subprocess.run([python, "-m", "pytest", "-q", *options, *selection], cwd=REPO, capture_output=True,
                          text=True, check=False)
    wall = time.monotonic() - started
    lines = done.stdout.splitlines()
    summary = [line for line in lines if re.search(r"\d+ (passed|failed|error)", line)]
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]  # which, so a flaky one is seen
    return wall, done.returncode, "\n  ".join([summary[-1].strip("= ") if summary else done.stdout[-300:], *failed])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=default_python())
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("selection", nargs="*", help="pytest arguments after --, e.g. -m 'not slow'")
    args = parser.parse_args()
    walls: dict[str, list[float]] = {"serial": [], "parallel": []}
    codes: dict[str, list[int]] = {"serial": [], "parallel": []}
    for round_ in range(args.rounds):
        for name, options in (("serial", SERIAL), ("parallel", PARALLEL)):
            wall, code, summary = timed(args.python, options, args.selection)
            walls[name].append(wall)
            codes[name].append(code)
            print(f"round {round_ + 1} {name} ({' '.join(options)}): {wall:.1f} s, exit {code}: {summary}", flush=True)
    serial, parallel = statistics.median(walls["serial"]), statistics.median(walls["parallel"])
    print(json.dumps({"selection": " ".join(args.selection) or "(default run)", "rounds": args.rounds,
                      "cpus": os.cpu_count(), "parallel_options": " ".join(PARALLEL),
                      "serial_s": round(serial, 1), "parallel_s": round(parallel, 1),
                      "serial_over_parallel": round(serial / parallel, 2),
                      "all_passed": all(c == 0 for cs in codes.values() for c in cs)}))


if __name__ == "__main__":
    main()
