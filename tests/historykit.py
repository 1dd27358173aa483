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
