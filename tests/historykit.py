"""Nights of a small run for the history's tests: a control and a candidate `cand`, cases a, b
and c, each night its own run directory with its cells' end on that day."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from convmatrix.cli.main import main
from testkit import env_json, record, write_result

SIGNATURE = ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
             "non-contiguous input.")
CASES = ("a", "b", "c")


def night(base: Path, n: int, broken: tuple[str, ...] = (), *, torch: str = "2.5.1+cu124",
          sick: bool = False, optional_host: bool = False, fallback: tuple[str, ...] = ()) -> Path:
    """Night n's run directory (base/night-<n>): `cand` fails the cases in broken. sick: the
    control's suite exited 2 after failing every case (it cannot be a control that night);
    optional_host: an optional `host` cell that could not run (no torch on the runner); fallback:
    the cases `cand` passes on Slow3d where the control ran them on Mkldnn."""
    run = base / f"night-{n:03d}"
    ended = f"2026-11-{n:02d}T02:00:00+00:00" if n <= 30 else f"2027-01-{n - 30:02d}T02:00:00+00:00"
    control = [record(c, "failed", "RuntimeError: CUDA driver initialization failed") if sick
               else record(c, backend="Mkldnn") for c in CASES]
    write_result(run, "ctrl", control, env=env_json("ctrl", torch=torch, ended=ended),
                 cell={"control": True, "ended": ended, **({"exit_code": 2} if sick else {})})
    if optional_host:
        folder = run / "host@cpu"
        folder.mkdir(parents=True)
        (folder / "cell.json").write_text(json.dumps({
            "schema": 1, "cell": "host", "lane": "host", "gpu_key": "cpu", "optional": True,
            "not_run": "no torch in the host interpreter (python3)"}))
    write_result(run, "cand", [record(c, "failed", SIGNATURE) if c in broken
                               else record(c, backend="Slow3d" if c in fallback else "Mkldnn") for c in CASES],
                 env=env_json("cand", torch=torch, ended=ended), cell={"ended": ended})
    return run


def recorded(run: Path, url: str, *extra: str) -> int:
    return main(["record", str(run), "--history", url, *extra])


def reported(run: Path, url: str, tmp: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """`report RUN --history URL --format json` (exit code, the report JSON)."""
    out = tmp / f"{run.name}.json"
    code = main(["report", str(run), "--history", url, "--format", "json", "-o", str(out), *extra])
    return code, json.loads(out.read_text())


def case_mark(report: dict[str, Any], case: str, cell: str = "cand") -> Any:
    (row,) = [c for c in report["cases"] if c["cell"] == cell and c["case"] == case]
    return row["history"]


def write_fleet_history(url: str, nights: int = 60, cells: int = 51) -> None:
    """A fleet's history as `convmatrix record` leaves its cells table (no cases), written straight
    into a new database (as bench/history_page.py does; recording 60 real nights takes minutes):
    the nightly matrix's 51 stacks on one H100 key over `nights` nights, mostly green, with a
    regression that starts on night 40 (first-red, still red), a flaky stack (red every third
    night), one red for nights 10-14 that recovered, and an outage on nights 25-26 (three stacks
    not run, unjudged for infrastructure)."""
    import datetime

    from convmatrix.history import backends, schema

    start = datetime.datetime(2026, 10, 1, 2, 0)
    with backends.opened(url) as engine, engine.begin() as conn:
        schema.migrate(conn)
        for n in range(nights):
            at = start + datetime.timedelta(days=n)
            key = conn.execute(schema.runs.insert().values(run=f"nightly-{at:%Y%m%d}", at=at, recorded=at,
                                                           version=2)).inserted_primary_key
            assert key is not None
            rows = []
            for c in range(cells):
                red = (c == 17 and n >= 40) or (c == 13 and n % 3 == 0) or (c == 21 and 10 <= n < 15)
                outage = c in (24, 25, 26) and n in (25, 26)
                verdict = "control" if c == 0 else "not-run" if outage else "regression" if red else "ok"
                rows.append({"run_id": key[0], "at": at, "cell": f"baremetal-torch2.{c}.0-cu126-py3.11",
                             "gpu_key": "h100-sm90", "host": "", "stack": "torch=2.x cuda=12.6",
                             "verdict": verdict, "red": red or outage,
                             "unjudged": "infrastructure" if outage else None})
            conn.execute(schema.cells.insert(), rows)
