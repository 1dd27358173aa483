"""Run the shared suite for one cell on one GPU (or the CPU) into its own results directory.

Stdlib only: nox imports this in its own interpreter, before any venv has the harness.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convmatrix import evidence, stackcheck
from convmatrix.cells import Cell
from convmatrix.gpus import CPU_KEY, Gpu

SUITE_DIR = Path(__file__).resolve().parents[2] / "suites"
BLOCKING = "blocking"  # the sub-directory of a cell's results for its CUDA_LAUNCH_BLOCKING=1 re-run
PYTEST_EXIT_OK = (0, 1)  # all passed / some cases failed: both are a completed run
CASE_TIMEOUT = 900  # seconds: far above any case's need, so only a hang reaches it


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where one run goes: a cell on one GPU, or on the CPU when gpu is None."""

    cell: Cell
    gpu: Gpu | None
    out: Path  # the run directory

    @property
    def key(self) -> str:
        return self.gpu.key if self.gpu else CPU_KEY

    @property
    def results_dir(self) -> Path:
        return self.out / f"{self.cell.id}@{self.key}"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_complete(results_dir: Path) -> bool:
    """A finished run, which --resume keeps: the suite ended and exited normally."""
    meta = read_json(results_dir / "cell.json")
    return meta.get("exit_code") in PYTEST_EXIT_OK and bool(read_json(results_dir / "env.json").get("ended"))


def write_cell_json(target: Target, *, python: str, control: bool, extra: dict[str, Any]) -> None:
    target.results_dir.mkdir(parents=True, exist_ok=True)
    for stale in target.results_dir.glob("running-*.json"):
        stale.unlink()  # an earlier, interrupted run's markers: this run starts afresh
    gpu = target.gpu
    write_json(
        target.results_dir / "cell.json",
        {
            "schema": 1,
            "cell": target.cell.id,
            "lane": target.cell.lane,
            "requested": target.cell.values(),
            "expected": target.cell.expected(),
            "control": control,
            "gpu_key": target.key,
            "gpu": {"index": gpu.index, "name": gpu.name, "capability": gpu.capability} if gpu else None,
            "python": python,
            "started": now(),
            **extra,
        },
    )


def suite_command(
    target: Target, python: str, suite_args: Sequence[str], *, results_dir: Path | None = None,
    select: Sequence[str] = (), isolate: bool = True,
) -> list[str]:
    """The suite's command line: all of suites/, or the `select`ed node ids.

    isolate (needs pytest-xdist where the suite runs): a case that crashes, hangs past
    CASE_TIMEOUT or poisons the CUDA context costs that case alone; the user's own
    --case-timeout, given later among suite_args, wins.
    """
    return [
        python,
        "-m",
        "pytest",
        *(select or [str(SUITE_DIR)]),
        "--results-dir",
        str(results_dir or target.results_dir),
        "--cell-id",
        target.cell.id,
        "--device",
        "cuda" if target.gpu else "cpu",
        "-v",  # a line per case in log.txt: names the case a dead process was running
        *(["--case-timeout", str(CASE_TIMEOUT)] if isolate else []),
        *suite_args,
    ]


def suite_env(target: Target) -> dict[str, str]:
    env = dict(os.environ, CONVMATRIX_LANE=target.cell.lane, PYTHONUNBUFFERED="1")
    if target.gpu is not None:
        # One GPU per run, chosen before CUDA initialises in the suite process.
        env["CUDA_VISIBLE_DEVICES"] = str(target.gpu.index)
    return env


def run_suite(target: Target, python: str, suite_args: Sequence[str] = (), *, isolate: bool = True) -> int:
    """Run the suite, teeing everything it prints into log.txt; returns its exit status."""
    command = suite_command(target, python, suite_args, isolate=isolate)
    return tee(command, suite_env(target), target.results_dir / "log.txt")


def rerun_blocking(
    target: Target, python: str, suite_args: Sequence[str] = (), *, isolate: bool = True
) -> int | None:
    """Re-run the failing cases with CUDA_LAUNCH_BLOCKING=1 into <results>/blocking/, so that an
    asynchronous CUDA error is reported at the call that caused it. None: nothing failed."""
    failing = evidence.failures(target.results_dir / "results.jsonl")
    select = [str(SUITE_DIR.parent / f.nodeid) for f in failing if f.nodeid]
    if not select:
        return None
    out = target.results_dir / BLOCKING
    out.mkdir(exist_ok=True)
    command = suite_command(target, python, suite_args, results_dir=out, select=select, isolate=isolate)
    return tee(command, dict(suite_env(target), CUDA_LAUNCH_BLOCKING="1"), out / "log.txt")


def tee(command: list[str], env: dict[str, str], log_path: Path) -> int:
    """Run command, writing everything it prints to log_path and to our stdout; its exit status."""
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        except OSError as exc:
            log.write(f"convmatrix: cannot start {command[0]}: {exc}\n".encode())
            return 127
        with proc:
            assert proc.stdout is not None
            for line in iter(proc.stdout.readline, b""):
                log.write(line)
                log.flush()
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
        return proc.returncode


def finish(target: Target, exit_code: int) -> list[str]:
    """Account for an abnormal end and check the stack; returns the lines worth telling the user."""
    lines = []
    crashed = record_crashes(target.results_dir, exit_code)
    if crashed:
        lines.append(f"{target.cell.id}: the suite died ({describe_exit(exit_code)}) in {', '.join(crashed)}")
    env = read_json(target.results_dir / "env.json")
    if not env:
        log = target.results_dir / "log.txt"
        lines.append(f"{target.cell.id}: the suite wrote no env.json ({describe_exit(exit_code)}); see {log}")
    meta = read_json(target.results_dir / "cell.json")
    mismatch = stackcheck.mismatches(meta.get("expected", {}), env) if env else []
    lines += [f"{target.cell.id}: STACK MISMATCH {m}" for m in mismatch]
    meta.update(exit_code=exit_code, ended=now(), stack_mismatch=mismatch,
                evidence=evidence.write(target.results_dir))
    write_json(target.results_dir / "cell.json", meta)
    return lines


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {-code}, {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def record_crashes(results_dir: Path, exit_code: int) -> list[str]:
    """Append a `crashed` line for every case still marked in flight: a dead run costs only those."""
    cases = []
    for marker in sorted(results_dir.glob("running-*.json")):
        running = read_json(marker)
        if running.get("case"):
            cases.append(running["case"])
            append_result(
                results_dir,
                {
                    "schema": 1,
                    "cell_id": results_dir.name.split("@")[0],
                    "case": running["case"],
                    "nodeid": running.get("nodeid"),
                    "params": {},
                    "knobs": {},
                    "device": None,
                    "status": "crashed",
                    "exc_type": None,
                    "message": f"the suite process died ({describe_exit(exit_code)}) while this case ran",
                    "warnings": [],
                    "numeric": None,
                    "duration_s": None,
                    "worker": marker.stem.removeprefix("running-"),
                    "started": running.get("started"),
                    "ended": now(),
                },
            )
        marker.unlink()
    return cases


def append_result(results_dir: Path, record: dict[str, Any]) -> None:
    with (results_dir / "results.jsonl").open("a") as fh:
        fh.write(json.dumps(record) + "\n")
