"""Run the shared suite for one cell on one GPU (or the CPU) into its own results directory.

Stdlib only: nox imports this in its own interpreter, before any venv has the harness.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import signal
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from convmatrix import jsonread, popen, tree
from convmatrix.errors import BadInput
from convmatrix.gpus import CPU_KEY, Gpu
from convmatrix.matrix.cells import Cell
from convmatrix.results import infra, rundir, stackcheck
from convmatrix.run import evidence
from convmatrix.triage import scan

SUITE_DIR = rundir.SUITE_DIR
# In a suite run's environment, where its results directory is as the suite sees it (a container
# mounts it elsewhere): each lane puts the real path in (with_results).
RESULTS_TOKEN = "@CONVMATRIX_RESULTS@"
CASE_TIMEOUT = 900  # seconds: far above any case's need, so only a hang reaches it


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where one run goes: a cell on one GPU, or on the CPU when gpu is None."""

    cell: Cell
    gpu: Gpu | None
    out: Path  # the run directory
    per_device: bool = False  # --every-gpu: the key names the device (Gpu.device_key), not only its kind
    host: str = ""  # the machine that runs it (run options' host); "" only in tests of older layouts
    staging: Path | None = None  # where this attempt writes until rundir swaps it in

    @property
    def key(self) -> str:
        if self.gpu is None:
            return CPU_KEY
        return self.gpu.device_key if self.per_device else self.gpu.key

    @property
    def final_dir(self) -> Path:
        return self.out / rundir.result_name(self.cell.id, self.key, self.host)

    @property
    def results_dir(self) -> Path:
        return self.staging or self.final_dir


@contextmanager
def fresh(target: Target, *, wait: bool = False) -> Iterator[Target]:
    """The target writing into a fresh directory that replaces its result when the block ends:
    a rerun never appends to, or mixes with, an earlier one (rundir.replacing). A result another
    process on this host is writing is refused (rundir.Busy), unless wait (the control, which
    every shard runs)."""
    with rundir.replacing(target.final_dir, wait=wait, holder=target.host) as staging:
        yield replace(target, staging=staging)


def write_cell_json(target: Target, *, python: str, control: bool, extra: dict[str, object]) -> dict[str, object]:
    """cell.json as the run starts; returns what it holds, which the harness keeps in memory and
    completes in finish(): what the harness knows (the cell, its request, control, host) is
    never taken back from a file the suite could have rewritten."""
    rundir.make_dirs(target.results_dir, target.out)
    gpu = target.gpu
    meta: dict[str, object] = {
        "schema": rundir.CELL_SCHEMA,
        "cell": target.cell.id,
        "lane": target.cell.lane,
        "requested": target.cell.values(),
        "knobs": target.cell.knobs or "default",  # the cell's knob set (knobs.py), as the matrix names it
        "expected": target.cell.expected(),
        "control": control,
        "gpu_key": target.key,
        "host": target.host,
        "gpu": gpu.record() if gpu else None,  # its UUID, MIG profile and parent GPU too (docs/contracts.md)
        "python": python,
        # The suite it runs: the checkout's suites/ or the wheel's convmatrix/suites/ (rundir.SUITE_DIR).
        "suite": {"path": str(SUITE_DIR), "version": rundir.records.suite_version(str(SUITE_DIR))},
        "started": rundir.records.now(),
        **extra,
    }
    rundir.write_json(target.results_dir / rundir.CELL_JSON, meta)
    return meta


def suite_command(
    target: Target, python: str, suite_args: Sequence[str], *, results_dir: Path | None = None,
    select: Sequence[str] = (), suite_root: Path = SUITE_DIR,
) -> list[str]:
    """The suite's command line: all of suites/, or the `select`ed node ids (from the repository
    root, `suites/test_conv.py::test_conv[<case>]`), with suites/ where the suite runs it
    (suite_root: a container mounts it elsewhere).

    The cases run in the suite's own process under its watchdog (--in-process): a case
    that hangs past CASE_TIMEOUT or poisons the CUDA context ends the process after writing its
    line, one that crashes it leaves its marker, and orchestrate runs the rest in a fresh process
    (--continue-run). No second interpreter unless a case kills the first. The user's own
    --case-timeout, given later among suite_args, wins, and their --isolate or -n N means xdist
    workers instead.
    """
    paths = [str(suite_root / nodeid.removeprefix(f"{SUITE_DIR.name}/")) for nodeid in select]
    return [
        python,
        "-m",
        "pytest",
        *(paths or [str(suite_root)]),
        "--results-dir",
        str(results_dir or target.results_dir),
        "--cell-id",
        target.cell.id,
        "--device",
        "cuda" if target.gpu else "cpu",
        "-v",  # a line per case in log.txt: names the case a dead process was running
        "--case-timeout",
        str(CASE_TIMEOUT),
        "--in-process",
        *suite_args,
    ]


def wants_gpu(target: Target, suite_args: Sequence[str]) -> bool:
    """Whether the suite will use the target's GPU: not where the user's own --device cpu (which
    comes after ours on its command line, and wins) keeps it on the CPU; a container then needs
    no device from the engine."""
    devices = [a.split("=", 1)[1] for a in suite_args if a.startswith("--device=")]
    devices += [suite_args[i + 1] for i, a in enumerate(suite_args[:-1]) if a == "--device"]
    return target.gpu is not None and (not devices or devices[-1] != "cpu")


def suite_env(target: Target) -> dict[str, str]:
    env = dict(os.environ, CONVMATRIX_LANE=target.cell.lane, PYTHONUNBUFFERED="1")
    if target.gpu is not None:
        # One device per run, chosen before CUDA initialises in the suite process: by its UUID
        # (a MIG slice has no index of its own; Gpu.pin). Where nvidia-smi gave no UUID, its
        # index, which counts in PCI bus order; CUDA counts fastest first unless told otherwise
        # (CUDA C++ Programming Guide, "CUDA Environment Variables": CUDA_DEVICE_ORDER), so on a
        # host with two GPU models index 0 could run on the other one, under its key.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = target.gpu.pin
    return env


def run_local(python: str, target: Target, suite_args: Sequence[str] = (), *,
              select: Sequence[str] = (), results_dir: Path | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run the suite with an interpreter of this machine (the host's, a venv's), everything it
    prints into <results>/log.txt and our stdout; its exit status."""
    out = results_dir or target.results_dir
    # blocking/, explain/<case>/: real folders, whatever link or file the suite left in their place.
    rundir.make_dirs(out, within(target, out))
    command = suite_command(target, python, suite_args, results_dir=out, select=select)
    return popen.stream(command, env={**suite_env(target), **with_results(env or {}, out)}, log_path=out / rundir.LOG)


def within(target: Target, path: Path) -> Path:
    """The trusted folder path is opened from: the target's results directory (the harness made
    it) when path is in it (blocking/, explain/<case>/), else path's own parent."""
    base = target.results_dir
    return base if path == base or base in path.parents else path.parent


def with_results(env: Mapping[str, str], results_dir: Path | str) -> dict[str, str]:
    """env with RESULTS_TOKEN replaced by the results directory as the suite sees it."""
    return {key: value.replace(RESULTS_TOKEN, str(results_dir)) for key, value in env.items()}


def ended_early(results_dir: Path, base: Path | None = None) -> bool:
    """Whether the suite process went before its end (env.json without `ended`): killed by a
    case, or left after a timeout or a sticky CUDA error."""
    env = rundir.read_json(results_dir / rundir.ENV_JSON, base)
    return bool(env) and not env.get("ended")


def line_count(results_dir: Path, base: Path | None = None) -> int:
    try:
        with rundir.open_plain(results_dir / rundir.RESULTS, base) as handle:
            return sum(1 for _ in handle)
    except OSError:
        return 0


def failing_nodeids(results_dir: Path) -> tuple[str, ...]:
    """The failing cases of a run, as node ids from the repository root, for a re-run."""
    return tuple(f.nodeid for f in evidence.failures(results_dir / rundir.RESULTS) if f.nodeid)


def finish(target: Target, exit_code: int, meta: dict[str, object]) -> list[str]:
    """Account for an abnormal end and check the stack; returns the lines worth telling the user.
    meta is what write_cell_json wrote (kept in memory: the suite may have rewritten the file)."""
    lines = []
    crashed = record_crashes(target, exit_code)
    if crashed:
        lines.append(f"{target.cell.id}: the suite died ({describe_exit(exit_code)}) in {', '.join(crashed)}")
    env = rundir.read_json(target.results_dir / rundir.ENV_JSON)
    if not env:
        log = target.final_dir / rundir.LOG
        lines.append(f"{target.cell.id}: the suite wrote no env.json ({describe_exit(exit_code)}); see {log}")
    meta = dict(meta)
    expected = meta.get("expected")
    mismatch = stackcheck.mismatches(expected if isinstance(expected, dict) else {}, env) if env else []
    lines += [f"{target.cell.id}: STACK MISMATCH {m}" for m in mismatch]
    if env:
        meta["observed"] = stackcheck.observed(env)
        if target.cell.from_image():
            lines.append(f"{target.cell.id}: the stack of {target.cell.base}: {stackcheck.describe(env)}")
    failing = evidence.failures(target.results_dir / rundir.RESULTS)  # read once, for both below
    meta.update(exit_code=exit_code, ended=rundir.records.now(), evidence=evidence.write(target.results_dir, failing))
    write_first_cause(target.results_dir, bool(failing))
    rundir.write_json(target.results_dir / rundir.CELL_JSON, meta)
    return lines


def write_first_cause(results_dir: Path, failed: bool | None = None) -> None:
    """first_cause.json: triage's first cause in log.txt when a case failed (family null when
    nothing failed or the log names nothing), so that the report reads it and scans no log. A
    log triage cannot read leaves no file: the report's cli then tries, and says what is wrong.
    failed: whether a case failed, when the caller knows (else results.jsonl is read for it)."""
    cause = None
    if failed if failed is not None else evidence.failures(results_dir / rundir.RESULTS):
        try:
            cause = scan.first_cause(results_dir / rundir.LOG)
        except (BadInput, OSError):
            return
    rundir.write_json(results_dir / rundir.FIRST_CAUSE, {
        "schema": rundir.CELL_SCHEMA, "family": cause.family if cause else None,
        "line": cause.line if cause else None, "rank": cause.rank if cause else None,
        "fatal": cause.fatal if cause else False,
    })


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {-code}, {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def record_crashes(target: Target, exit_code: int, *, results_dir: Path | None = None) -> list[str]:
    """Append a `crashed` (or `timeout`) line for every case still marked in flight, in the
    target's results or in results_dir: a dead run costs only those."""
    out = results_dir or target.results_dir
    base = within(target, out)
    cases = []
    try:
        with tree.Tree.open(base) as root, root.at(tree.under(base, out)) as folder:
            markers = [name for name, info in folder.entries()
                       if fnmatch.fnmatch(name, "running-*.json") and stat.S_ISREG(info.st_mode)]
            for name in markers:
                running = rundir.read_json(out / name, out)
                case = running.get("case")
                if isinstance(case, str) and rundir.records.CASE_ID.fullmatch(case):
                    cases.append(case)
                    status, message = judge(running, exit_code)
                    with contextlib.suppress(tree.Refused), folder.append(rundir.RESULTS) as results:
                        results.write((json.dumps(rundir.records.crash_record(
                            cell_id=target.cell.id, case=case, nodeid=running.get("nodeid"), status=status,
                            message=message, worker=name.removesuffix(".json").removeprefix("running-"),
                            started=running.get("started"),
                        )) + "\n").encode("utf-8"))
                folder.unlink(name)
    except (FileNotFoundError, tree.Refused):  # no folder, or not a real one: nothing it holds is ours
        pass
    return cases


def judge(marker: dict[str, object], exit_code: int) -> tuple[str, str]:
    """`timeout` for a case that outran its time before its process ended (a hang that held the
    GIL, which faulthandler ends), else `crashed`."""
    timeout = marker.get("timeout")
    if isinstance(timeout, (int, float)) and rundir.records.outran(marker, float(timeout)):
        return "timeout", (f"the case ran past its {timeout:g} s timeout (the suite process did not answer "
                           f"its watchdog and was ended, {describe_exit(exit_code)})")
    return "crashed", f"the suite process died ({describe_exit(exit_code)}) while this case ran"


# What the harness itself writes when an attempt ends abnormally: the crash lines (record_crashes)
# and cell.json's exit and set-up error. Only these are read for a retry: a test's own failure (a
# `failed` line, whatever its message says) is never evidence of the infrastructure.
HARNESS_STATUSES = ("crashed", "timeout")


def attempt_cause(results_dir: Path) -> infra.RootCause | None:
    """The infrastructure cause that ended an attempt of a cell (results/infra.py), read from the
    harness's own lines only, or None: whether --retries may run it again is its `retryable`."""
    said: list[str] = []
    meta = rundir.read_json(results_dir / rundir.CELL_JSON)
    if isinstance(meta.get("error"), str):
        said.append(meta["error"])
    code = meta.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool) and code not in rundir.PYTEST_EXIT_OK:
        said.append(f"the suite exited: {describe_exit(code)}")
    for record in attempt_records(results_dir):
        if record.get("status") in HARNESS_STATUSES:
            said += [record["message"]] if isinstance(record.get("message"), str) else []
    return infra.classify(said)


def attempt_records(results_dir: Path) -> Iterator[dict[str, Any]]:
    """An attempt's results lines that are JSON objects, read within the bounds every reader of a
    cell's output keeps (rundir.read_lines, jsonread.loads): a line nested past them, or a file
    past its line or byte bound, is skipped, never a RecursionError in the retry decision."""
    try:
        data, _ = rundir.read_lines(results_dir / rundir.RESULTS)
    except (OSError, rundir.NotPlain):
        return
    for line in (data or b"").splitlines():
        try:
            record = jsonread.loads(line)
        except ValueError:  # jsonread.TooBig is one; json's own errors and bad UTF-8 too
            continue
        if isinstance(record, dict):
            yield record


def statuses(results_dir: Path) -> dict[str, int]:
    """How many cases of an attempt ended each way (passed, failed, crashed, ...): what cell.json's
    `attempts` keeps of an earlier attempt beside its path."""
    counts: dict[str, int] = {}
    for record in attempt_records(results_dir):
        status = record.get("status")
        if isinstance(status, str) and status.isidentifier():
            counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))
