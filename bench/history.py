"""The history database's figures (issue 36): recording, reading a timeline, its size.

    python bench/history.py [--cells N] [--cases N] [--nights N] [--night-cells N] [--postgresql URL]

1. Recording one run of --cells cells x --cases cases (1,000 x 233) into a fresh SQLite file and
   a fresh PostgreSQL database: history.record.record in one transaction, as `convmatrix record`
   does after judging the run; then the whole `convmatrix record` command over the same fleet as
   bench/fleet_merge.py writes it (reading and judging the results included).
2. --nights nightlies (365) of --night-cells cells (51) x --cases cases recorded one by one; then
   `convmatrix history CELL` and `history CELL CASE` (history.timeline) over them, and the marks
   of a whole night's report against them (history.lookup.marks: what `report --history` adds).
3. The database's size per nightly.

PostgreSQL: --postgresql URL, else a temporary server started as the tests start one
(tests/pgserver.py: initdb and postgres on a unix socket, fsync off). Prints seconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests")]

from convmatrix.history import backends, lookup, record, timeline  # noqa: E402
from convmatrix.results.first_diff import Difference  # noqa: E402
from convmatrix.results.night import Night, judge  # noqa: E402
from convmatrix.results.outcomes import Outcome  # noqa: E402
from convmatrix.results.read import Case, CellResult, Explanation  # noqa: E402

SIGNATURE = "E   RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED at 0x7f00aa"


def case_id(k: int) -> str:
    """As long as the shipped suite's case ids (49 characters on average)."""
    return f"conv2d-fp16-n8-c64-h56-w56-k3-s1-p1-channels_last-{k:04d}"


GPUS = ("h100-sm90", "a100-sm80", "l4-sm89")
OBSERVED = {"torch": "2.5.1+cu124", "cuda": "12.4", "cudnn": 90100, "driver": "560.35", "image_id": None,
            "suite_version": "abc123"}


def night(n_cells: int, n_cases: int, night_no: int = 0, at: datetime.datetime | None = None) -> Night:
    """A judged night (results/night.judge, as `convmatrix record` judges one): the control on each
    GPU key, ~1% of a candidate's cases red (the signature), one case of cell 1 flipping every
    other night."""
    made = []
    for i in range(n_cells):
        name = "control" if i < len(GPUS) else f"cell{i - len(GPUS) + 1:04d}"
        gpu = GPUS[i % len(GPUS)]
        red_case = (sum(map(ord, name)) + night_no // 30) % 100
        cases, explained = {}, {}
        for k in range(n_cases):
            red = i >= len(GPUS) and (k == red_case or (i == len(GPUS) and k == 7 and night_no % 2 == 1))
            cases[case_id(k)] = Case(case_id(k), Outcome.FAIL if red else Outcome.PASS,
                                     "cudnn_not_supported" if red else None, SIGNATURE if red else None, {}, (),
                                     duration_s=0.013)
            if red:
                explained[case_id(k)] = Explanation(subcode=3002)
        made.append(CellResult(cell=name, gpu_key=gpu, gpu={"name": gpu, "capability": None, "generation": gpu},
                               lane="baremetal", path=Path("/nonexistent") / name, host="runner-1",
                               observed=dict(OBSERVED), marked_control=name == "control", cases=cases,
                               explained=explained))
    return judge(made, "control", run=f"night-{night_no:03d}", at=at,
                 differ=lambda _r, _c, failing: {n: Difference(line=40, text=SIGNATURE) for n in failing})


def timed(what: str, fn: Any) -> Any:
    start = time.perf_counter()
    result = fn()
    print(f"  {what}: {time.perf_counter() - start:.2f} s", flush=True)
    return result


def store(url: str, run: Night, key: str, at: datetime.datetime) -> None:
    with backends.opened(url) as engine, engine.begin() as conn:
        record.record(conn, replace(run, run=key, at=at))


@contextmanager
def postgres(given: str | None) -> Iterator[str]:
    if given:
        yield given
        return
    import pgserver

    with pgserver.server() as url:
        yield url


def fresh_pg(server: str, name: str) -> str:
    import pgserver

    return pgserver.fresh_database(server, name)


def size(url: str) -> int:
    file = backends.sqlite_file(url)
    if file is not None:
        return file.stat().st_size
    with backends.opened(url) as engine, engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one())


def measure(backend: str, fresh: Callable[[str], str], args: argparse.Namespace, big: Night,
            start: datetime.datetime) -> None:
    print(f"{backend}:", flush=True)
    url = fresh("big")
    rows = sum(len(c.cases) for c in big.cells)
    timed(f"record {args.cells} cells x {args.cases} cases ({rows:,} case rows), fresh database",
          lambda: store(url, big, "big", start))
    timed("record the same run again (adds nothing)", lambda: store(url, big, "big", start))
    if args.fleet:
        whole = fresh("whole")
        command = [sys.executable, "-m", "convmatrix", "record", *map(str, args.fleet), "--history", whole,
                   "--run-id", "fleet"]
        done = timed(f"`convmatrix record` of {args.cells} cells x {args.cases} cases as the suite writes them "
                     f"(reading and judging them included)",
                     lambda: subprocess.run(command, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
                                            capture_output=True, text=True, check=False))
        print(f"    exit {done.returncode}: {(done.stdout + done.stderr).strip()[-200:]}")
    year = fresh("year")
    began = time.perf_counter()
    for n in range(args.nights):
        store(year, night(args.night_cells, args.cases, n), f"night-{n:03d}", start + datetime.timedelta(days=n))
    print(f"  record {args.nights} nightlies of {args.night_cells} cells x {args.cases} cases: "
          f"{time.perf_counter() - began:.1f} s in all", flush=True)
    tonight = night(args.night_cells, args.cases, args.nights)
    with backends.opened(year) as engine, engine.begin() as conn:
        entries = timed(f"history cell0001 over {args.nights} nightlies", lambda: timeline.of_cell(conn, "cell0001"))
        timed("history cell0001 CASE", lambda: timeline.of_cell(conn, "cell0001", case_id(7)))
        timed("history (the runs)", lambda: timeline.runs(conn))
        marks = timed(f"report --history: marks of a {args.night_cells}-cell night against them",
                      lambda: lookup.marks(conn, replace(tonight, run="tonight",
                                                         at=start + datetime.timedelta(days=args.nights))))
    print(f"  ({len(entries)} entries; marks: {marks.counts()})")
    total = size(year)
    print(f"  size: {total / 1e6:.1f} MB for {args.nights} nightlies, {total / args.nights / 1e6:.2f} MB "
          f"per {args.night_cells}-cell nightly", flush=True)


def fleet_merge() -> Any:
    """bench/fleet_merge.py, by its path (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("fleet_merge", REPO / "bench" / "fleet_merge.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=1000)
    ap.add_argument("--cases", type=int, default=233)
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--night-cells", type=int, default=51)
    ap.add_argument("--postgresql", help="a PostgreSQL server's URL (default: a temporary one)")
    ap.add_argument("--only", choices=("sqlite", "postgresql"))
    args = ap.parse_args()
    start = datetime.datetime(2026, 1, 1, 2, tzinfo=datetime.UTC)
    big = night(args.cells, args.cases)
    with tempfile.TemporaryDirectory() as tmp:
        # The same fleet as bench/fleet_merge.py writes it, for the whole command's time.
        args.fleet = fleet_merge().write_fleet(Path(tmp) / "fleet", args.cells, args.cases, 8)
        if args.only != "postgresql":
            measure("sqlite", lambda name: f"sqlite:///{Path(tmp) / name}.sqlite", args, big, start)
        if args.only != "sqlite":
            with postgres(args.postgresql) as server:
                measure("postgresql", lambda name: fresh_pg(server, name), args, big, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
