"""The library audit's cost per cell and how many libraries it names (issue 47: goal at most 2 s with
a warm page cache), printed, never asserted. Runs suites/libaudit.py's audit() in each given venv's
interpreter, as the suite case does (a child that imports torch and calls cuDNN's version checks,
then the ELF reads and the table), once to warm the page cache, then --repeat times; printed beside
the plain alternative, a child of the same interpreter that imports torch and asks
torch.backends.cudnn.version() (what the stack check reads: the part of the audit no check avoids).

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
        print(f"{venv.name}: audit {statistics.median(warm):.2f} s warm (median of {len(warm)}; "
              f"first {data['times'][0]:.2f} s), {data['named']} libraries named ({data['loaded']} loaded), "
              f"{data['findings']} finding(s); plain `import torch; cudnn.version()` child "
              f"{statistics.median(plain):.2f} s (median of {len(plain)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
