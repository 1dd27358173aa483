"""The history page's figure (issue 49): `convmatrix history --format html -o DIR` over a year of
nightlies, 365 nights of 51 cells (the nightly matrix's stacks) on one GPU key, a few of them
regressing, one flaky.

    python bench/history_page.py [--nights N] [--cells N] [--gpus N]

The nights are written straight into a fresh SQLite history (the schema's cells and runs tables,
what `convmatrix record` leaves of them), then the command is timed twice: in this process (the
query and the page) and as a fresh `python -m convmatrix` (start-up included). The goal is under
2 s; prints seconds and the page's size, asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src")]

from convmatrix.cli.main import main  # noqa: E402
from convmatrix.history import backends, schema  # noqa: E402


def fill(url: str, nights: int, cells: int, gpus: int) -> None:
    start = datetime.datetime(2026, 1, 1, 2, 0)
    with backends.opened(url) as engine, engine.begin() as conn:
        schema.migrate(conn)  # what record does first on a new database
        for n in range(nights):
            at = start + datetime.timedelta(days=n)
            key = conn.execute(schema.runs.insert().values(run=f"nightly-{n:04d}", at=at, recorded=at,
                                                           version=2)).inserted_primary_key
            assert key is not None
            run_id = key[0]
            rows = []
            for c in range(cells):
                for g in range(gpus):
                    red = (c == 7 and n >= 200) or (c == 13 and n % 3 == 0) or (c == 21 and 100 <= n < 110)
                    rows.append({"run_id": run_id, "at": at, "cell": f"baremetal-torch2.{c}.0-cu126-py3.11",
                                 "gpu_key": f"h{100 + g}-sm90", "host": "", "stack": "torch=2.x cuda=12.6",
                                 "verdict": "regression" if red else "control" if c == 0 else "ok", "red": red,
                                 "unjudged": None})
            conn.execute(schema.cells.insert(), rows)


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--cells", type=int, default=51)
    parser.add_argument("--gpus", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'history.sqlite'}"
        fill(url, args.nights, args.cells, args.gpus)
        command = ["history", "--history", url, "--format", "html", "-o", str(Path(tmp) / "page"),
                   "--link", "https://ci.example/{run}/report.html"]
        started = time.perf_counter()
        main(command)
        inside = time.perf_counter() - started
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "convmatrix", *command], check=True, capture_output=True,
                       env={"PYTHONPATH": str(REPO / "src")})
        fresh = time.perf_counter() - started
        size = (Path(tmp) / "page" / "index.html").stat().st_size
    print(f"history_page_s {inside:.2f} (in process), {fresh:.2f} (python -m convmatrix); goal < 2")
    print(f"history_page_bytes {size} ({args.nights} nights x {args.cells} cells x {args.gpus} GPU key(s))")


if __name__ == "__main__":
    main_()
