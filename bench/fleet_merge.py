"""Merging many runners' results: `convmatrix report DIR...` over 1,000 cells x 200 cases.

    python bench/fleet_merge.py [--cells N] [--cases N] [--runners N]

Writes N cells' results (as `convmatrix run` leaves them: cell.json, env.json, results.jsonl),
dealt over --runners result directories and three GPU generations, with the signature in 1% of
the cases, plus every runner's copy of one cell twice (the same cell@gpu from two runners), into a
temporary directory; then times `python -m convmatrix report DIR... --format F -o FILE` for each
format (PYTHONPATH=src) and prints the seconds. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPUS = (("h100-sm90", "NVIDIA H100 80GB HBM3", "9.0"), ("a100-sm80", "NVIDIA A100-SXM4-80GB", "8.0"),
        ("l4-sm89", "NVIDIA L4", "8.9"))
SIGNATURE = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
STAMP = "2026-12-02T00:00:00Z"


def env(cell: str, gpu: tuple[str, str, str], ended: str) -> dict[str, object]:
    return {"schema": 1, "cell_id": cell, "torch": "2.5.1+cu124", "cuda": "12.4", "cudnn": 90100, "cudnn_error": None,
            "python": "3.11.7", "platform": "Linux", "machine": "x86_64", "driver": "560.35", "device": "cuda",
            "gpus": [{"index": 0, "name": gpu[1], "capability": gpu[2], "memory_mb": 81920}], "lane": "baremetal",
            "image_id": None, "hostname": "runner", "pid": 1, "started": STAMP, "ended": ended, "knobs": {},
            "argv": []}


def case_line(cell: str, case: str, failed: bool) -> str:
    return json.dumps({
        "schema": 1, "cell_id": cell, "case": case, "nodeid": f"suites/test_conv.py::test_conv[{case}]", "params": {},
        "knobs": {"device": "cuda", "cudnn_benchmark": False, "cudnn_deterministic": False}, "device": "cuda",
        "status": "failed" if failed else "passed", "exc_type": "RuntimeError" if failed else None,
        "message": SIGNATURE if failed else None, "warnings": [], "numeric": None, "duration_s": 0.01,
        "worker": "gw0", "started": STAMP, "ended": STAMP,
        "timing": {"forward_ms": 1.5}, "fingerprint": {"sha": "ab12"},
    }) + "\n"


def write_cell(run: Path, cell: str, gpu: tuple[str, str, str], cases: int, *, control: bool,
               ended: str = "2026-12-02T01:00:00Z") -> None:
    directory = run / f"{cell}@{gpu[0]}"
    directory.mkdir(parents=True)
    (directory / "env.json").write_text(json.dumps(env(cell, gpu, ended)))
    (directory / "cell.json").write_text(json.dumps({
        "schema": 1, "cell": cell, "lane": "baremetal", "control": control, "gpu_key": gpu[0],
        "gpu": {"index": 0, "name": gpu[1], "capability": gpu[2]}, "exit_code": 0, "started": STAMP, "ended": ended}))
    failing = 0 if control else sum(map(ord, cell)) % 100  # about 1% of a candidate's cases fail
    (directory / "results.jsonl").write_text("".join(
        case_line(cell, f"case{i:04d}", i == failing) for i in range(cases)))


def write_fleet(root: Path, cells: int, cases: int, runners: int) -> list[Path]:
    runs = [root / f"runner{r}" for r in range(runners)]
    per_gpu = cells // len(GPUS)
    for g, gpu in enumerate(GPUS):
        for i in range(per_gpu if g else cells - per_gpu * (len(GPUS) - 1)):
            write_cell(runs[(g * per_gpu + i) % runners], "control" if i == 0 else f"cell{i:04d}", gpu, cases,
                       control=i == 0)
    # One cell@gpu copied from a second runner, later: the report keeps it and notes the other.
    write_cell(root / "late-runner", "cell0001", GPUS[0], cases, control=False, ended="2026-12-03T01:00:00Z")
    return [*runs, root / "late-runner"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=1000)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--runners", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        runs = write_fleet(Path(tmp), args.cells, args.cases, args.runners)
        print(f"wrote {args.cells} cells × {args.cases} cases over {len(runs)} result directories "
              f"in {time.perf_counter() - start:.1f} s")
        env_vars = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        for fmt in ("json", "text", "markdown", "html", "junit"):
            out = Path(tmp) / f"report.{fmt}"
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "convmatrix", "report", *map(str, runs), "--format", fmt,
                                   "-o", str(out), "--fail-on", "never"], env=env_vars, capture_output=True,
                                  text=True, check=False)
            took = time.perf_counter() - start
            print(f"report --format {fmt:8s} {took:6.2f} s  exit {done.returncode}  "
                  f"{out.stat().st_size / 1e6 if out.exists() else 0:.1f} MB {done.stderr.strip()[:200]}")
        data = json.loads((Path(tmp) / "report.json").read_text())
        print(f"cells {len(data['cells'])}, cases {len(data['cases'])}, "
              f"GPU keys {sorted(data['control']['per_gpu'])}, "
              f"duplicate notes {sum('two results' in n for n in data['notes'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
