"""`convmatrix report` on oversized results: peak memory (RSS) and time, printed, never asserted.

    python bench/report_size.py                 # 10^6 lines (the issue's case) and 20,000 (the bound)
    python bench/report_size.py --lines 300000  # any other size

Builds, in a temporary folder, a run of two cells: a control of 100 passing cases and a cell whose
results.jsonl has N lines, half of them failing with a cuDNN message (issue 32, item 6: 10^6 such
lines, 126 MB, made `report --format html` take 3.2 GB and 94 s and write a 344 MB page). Then it
times, each in a fresh process whose own peak RSS os.wait4 gives:

    report   convmatrix report RUN --format html -o page.html --fail-on never
    parse    the plain alternative: a Python process json-parsing the file line by line
    wc       wc -l of the file

and prints each one's seconds and peak RSS, the report's ratio to `parse`, and the page's size.
Past rundir.MAX_LINES (20,000) the cell is INVALID and its lines are counted, not parsed; at the
bound they are read and the page lists at most report.cases.MAX_LISTED cases of each cell.
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
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

from testkit import env_json, record, write_result  # noqa: E402

MESSAGE = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
PARSE = "import json, sys\nfor line in open(sys.argv[1], encoding='utf-8'):\n    json.loads(line)\n"


def build(run: Path, lines: int) -> Path:
    """The run: a control and a cell of `lines` results lines, half failing; the cell's file."""
    write_result(run, "control", [record(f"case{i}") for i in range(100)], env=env_json("control"))
    cell = write_result(run, "cell", [], env=env_json("cell"))
    # Lines of the size the issue measured (126 MB for 10^6): the three fields a line needs, and
    # a failing line's message and nodeid.
    passed = json.dumps({"schema": 1, "case": "case0", "status": "passed"}) + "\n"
    failed = json.dumps({"schema": 1, "case": "case0", "status": "failed", "message": MESSAGE[:100],
                         "nodeid": "suites/test_conv.py::test_conv[case0]"}) + "\n"
    with (cell / "results.jsonl").open("w", encoding="utf-8") as out:
        for i in range(lines):
            # Distinct ids, so that a reader keeping each case's last line keeps them all.
            out.write((failed if i % 2 else passed).replace('"case0"', f'"case{i}"', 1))
    return cell / "results.jsonl"


def measure(command: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, exit status) of the command in a process of its own."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    assert process.stderr is not None
    process.stderr.close()
    return seconds, usage.ru_maxrss / 1024, process.returncode  # ru_maxrss: KB on Linux


def bench(lines: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder) / "run"
        results = build(run, lines)
        page = Path(folder) / "page.html"
        size = results.stat().st_size
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        os.environ.update(env)
        report = measure([sys.executable, "-m", "convmatrix", "report", str(run), "--format", "html", "-o", str(page),
                          "--fail-on", "never", "--control", "control"])
        parse = measure([sys.executable, "-c", PARSE, str(results)])
        count = measure(["wc", "-l", str(results)])
        print(f"{lines:,} lines ({size / 1e6:.0f} MB, half failing):")
        for name, (seconds, rss, code) in (("report", report), ("parse", parse), ("wc", count)):
            print(f"  {name:7} {seconds:7.2f} s  {rss:8.1f} MB peak RSS  exit {code}")
        print(f"  report/parse: {report[0] / parse[0]:.2f}x the time, {report[1] / parse[1]:.2f}x the memory; "
              f"page {page.stat().st_size / 1e6:.2f} MB" if page.exists() else "  no page written")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, action="append", help="results lines of the cell (repeatable)")
    for lines in parser.parse_args().lines or [1_000_000, 20_000]:
        bench(lines)


if __name__ == "__main__":
    main()
