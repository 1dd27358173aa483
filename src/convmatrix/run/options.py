"""Run options: given to `convmatrix run` and after `--` to the nox lane sessions. One parser
(parser()) reads them and lists them, with a line of help each, in `convmatrix run --help`."""

from __future__ import annotations

import argparse
import os
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convmatrix import gpus
from convmatrix.errors import BadInput
from convmatrix.matrix import values
from convmatrix.matrix.cells import ENGINES, Cell
from convmatrix.matrix.parse import Matrix
from convmatrix.results import rundir

RUNS_DIR = Path("reports/runs")
# Attempts of one cell a run may make again: each is kept whole (attempts/<n>/), so the disk a cell
# takes grows with them; a cause that outlives ten tries is not one a retry fixes.
MAX_RETRIES = 10
LATEST = RUNS_DIR / "LATEST"
ALLOW_CPU = "CONVMATRIX_ALLOW_CPU"  # "1": --allow-cpu for every run of this environment (a CPU-only fleet, tests)


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    out: Path
    shard: tuple[int, int] | None  # (I, N), 1-based I
    resume: bool
    rerun_blocking: bool  # re-run failing cases with CUDA_LAUNCH_BLOCKING=1
    explain: str | None = None  # --explain[=info]: re-run failing cases with cuDNN's log on (run/explain.py)
    gpus: str | None
    every_gpu: bool = False  # one run per device instead of one per GPU generation
    jobs: int = 1  # cells at once on a runner without GPUs (with GPUs: one per GPU)
    prepare_ahead: int = 1  # environments (venvs, images) prepared at once, ahead of the runs
    prepare_disk_gb: float | None = None  # past this much disk taken by the run's builds, none ahead
    reuse_results: bool = False  # reuse a stored result of the same environment, suite, driver and GPU
    host: str = "localhost"  # the machine the run is on (--host, $CONVMATRIX_HOST, the hostname)
    expect_gpus: tuple[str, ...] = ()  # --expect-gpu: GPU keys this runner must cover (no GPU at all: exit 4)
    suite_args: tuple[str, ...]  # passed to pytest unchanged (after a second `--`)
    engine: str | None = None  # --engine docker|podman: the container cells' engine, over the matrix's
    case_files: tuple[dict[str, Any], ...] = ()  # the run's case files as cell.json records them (run/cases.py)
    # --allow-cpu (or $CONVMATRIX_ALLOW_CPU=1): CUDA stacks may run on the CPU of a runner without a
    # GPU; without it such a run is refused before anything runs (orchestrate.refuse_cpu).
    allow_cpu: bool = False
    # --retries N: a cell whose attempt an infrastructure cause a retry can fix ended (results/infra.py:
    # killed, OOM, GPU or node lost, the harness's deadline) runs again, up to N more times; never
    # for a test's own failure. Every attempt is kept (<cell>/attempts/<n>/).
    retries: int = 0
    # --audit-only: only the library audit case of each cell (a CPU gate for images: it implies
    # --allow-cpu); marked in cell.json and the plan, never stored for reuse, never kept by a later
    # --resume, and refused by `record` and `report --history` (docs/contracts.md: Audit-only runs).
    audit_only: bool = False


def cpu_refusal(matrix: Matrix, cells: Sequence[Cell], *, allow_cpu: bool, has_gpu: bool) -> str | None:
    """The one line refusing CUDA stacks on a runner without a GPU, or None: `convmatrix run`
    (orchestrate.refuse_cpu) and `nox -s nightly` (before it builds anything) say the same."""
    cuda = [c.id for c in cells if c.cuda_stack]
    if allow_cpu or matrix.allow_cpu or has_gpu or not cuda:
        return None
    more = f" and {len(cuda) - 1} more" if len(cuda) > 1 else ""
    return (f"{matrix.path}: {len(cuda)} cell(s) with CUDA stacks ({cuda[0]}{more}) and this runner has no GPU: "
            "on the CPU they test nothing of cuDNN; pass --allow-cpu to run them on the CPU anyway")


def allow_cpu(run_options: Sequence[str]) -> bool:
    """--allow-cpu (or --audit-only, which needs no GPU) among the run options (before a `--`), or
    $CONVMATRIX_ALLOW_CPU=1."""
    given = list(run_options)
    given = given[:given.index("--")] if "--" in given else given
    return "--allow-cpu" in given or "--audit-only" in given or os.environ.get(ALLOW_CPU, "") == "1"


def new_run_dir() -> Path:
    return RUNS_DIR / time.strftime("%Y%m%d-%H%M%S")


def parser() -> argparse.ArgumentParser:
    """The run options, each with its one line of help: the parser that reads them (parse) and the
    list `convmatrix run --help` prints (help_text) are this one."""
    found = argparse.ArgumentParser(prog="nox -s <lane> --", exit_on_error=False, add_help=False)
    add = found.add_argument
    add("--out", type=Path, metavar="DIR", help="the run directory (default reports/runs/<date-time>)")
    add("--shard", metavar="I/N", help="run the I-th of N round-robin shares of the cells (the control runs in each)")
    add("--resume", action="store_true", help="keep the cells already complete in --out; run the rest")
    add("--rerun-blocking", action="store_true",
        help="re-run each failing case with CUDA_LAUNCH_BLOCKING=1 (the true failing kernel)")
    add("--explain", nargs="?", const="warn", choices=("warn", "info"), metavar="warn|info",
        help="re-run each failing case with cuDNN's API log on and without cuDNN: its reason and sub-code")
    add("--gpus", metavar="0,1", help="only these GPU indices (0:1 is MIG device 1 of GPU 0)")
    add("--every-gpu", action="store_true", help="one run per device instead of one per GPU generation")
    add("--jobs", metavar="N", help="cells at once on a runner without GPUs (with GPUs: one per GPU)")
    add("--prepare-ahead", metavar="N", help="environments (venvs, images) prepared ahead of the runs (default 1)")
    add("--prepare-disk", metavar="GB", help="prepare nothing ahead past this much disk taken by the run's builds")
    add("--reuse-results", action="store_true",
        help="reuse a stored result of the same environment, suite, driver and GPU (not for a nightly)")
    add("--host", metavar="NAME", help="the machine's name in the results (default $CONVMATRIX_HOST, the hostname)")
    add("--expect-gpu", action="append", default=[], metavar="KEY",
        help="a GPU key this runner must cover (repeatable; no GPU at all: exit 4)")
    add("--engine", choices=ENGINES, metavar="|".join(ENGINES),
        help="the container engine for container cells, over the matrix's")
    add("--allow-cpu", action="store_true",
        help="run CUDA stacks on a runner without a GPU, on its CPU (else refused; $CONVMATRIX_ALLOW_CPU=1 too)")
    add("--retries", metavar="N",
        help="run a cell again, up to N more times, when a retryable infrastructure cause ended it (never a "
             "test's failure)")
    add("--audit-only", action="store_true",
        help="run only each cell's CUDA library audit case (no GPU needed: implies --allow-cpu); kept apart from "
             "--resume, --reuse-results and the history")
    return found


def help_text() -> str:
    """The run options as `--help` lists them, one option a line."""
    formatter = argparse.HelpFormatter("convmatrix run", max_help_position=26, width=120)
    formatter.start_section("run options (after the matrix options; suite options after a second --)")
    formatter.add_arguments(parser()._actions)
    formatter.end_section()
    return formatter.format_help()


def parse(args: Sequence[str], *, default_out: Path | None = None, owned: Sequence[str] = ()) -> RunOptions:
    """The run options (before `--`) and the suite options (after it), each checked; `owned`: run
    options the caller sets itself (an engine: --out, --shard), refused here as argparse reads
    them, so an abbreviation (`--ou`, `--sha=1/1`, which this parser expands) is refused too. The
    suite options the harness sets (--results-dir, --cell-id) are refused by the suite's table
    (suites/options.py: owned_problems), exact or abbreviated. `convmatrix run` and the engines'
    check both come here: one parser decides."""
    args = list(args)
    suite_args: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, suite_args = args[:cut], args[cut + 1:]
    try:
        ns, unknown = parser().parse_known_args(args)
    except argparse.ArgumentError as exc:
        raise BadInput(f"run options: {exc}") from None
    if unknown:
        raise BadInput(f"run options: unknown {' '.join(unknown)} (suite options go after a second --)")
    for name in owned:
        if getattr(ns, name.removeprefix("--").replace("-", "_")) is not None:
            flags = [a.partition("=")[0] for a in args if a.startswith("--")]
            spelt = next((f for f in flags if len(f) > 2 and name.startswith(f)), name)
            said = spelt if spelt == name else f"{spelt} (argparse reads it as {name})"
            raise BadInput(f"run options: {said} is set by the engine (use the command's own --out and --shards)")
    # The suite's own options, checked once here (before any cell runs, before an engine submits)
    # rather than by every cell's suite exiting 4 on a typo.
    wrong = rundir.suite_options.problems(suite_args)
    if wrong:
        raise BadInput(f"suite options: {'; '.join(wrong)}")
    if ns.audit_only and (ns.resume or ns.reuse_results):
        given = "--resume" if ns.resume else "--reuse-results"
        raise BadInput(f"run options: --audit-only with {given}: an audit-only run is kept apart from earlier "
                       "results and from the reuse store (it runs every cell's audit afresh)")
    if ns.gpus is not None and not gpus.SELECTOR.fullmatch(ns.gpus):
        raise BadInput(f"run options: --gpus {ns.gpus!r} is not a list of GPU indices like 0,1 "
                       "(0:1 for MIG device 1 of GPU 0)")
    return RunOptions(
        out=ns.out or default_out or new_run_dir(),
        shard=parse_shard(ns.shard) if ns.shard else None,
        resume=ns.resume,
        rerun_blocking=ns.rerun_blocking,
        explain=ns.explain,
        gpus=ns.gpus,
        every_gpu=ns.every_gpu,
        jobs=count("--jobs", ns.jobs, 1, minimum=1),
        prepare_ahead=count("--prepare-ahead", ns.prepare_ahead, 1, minimum=0),
        prepare_disk_gb=gigabytes("--prepare-disk", ns.prepare_disk) if ns.prepare_disk else None,
        reuse_results=ns.reuse_results,
        host=host_name(ns.host),
        expect_gpus=values.gpu_keys("run options: --expect-gpu", ns.expect_gpu),
        suite_args=tuple(suite_args),
        engine=ns.engine,
        allow_cpu=ns.allow_cpu or ns.audit_only or allow_cpu(()),
        retries=count("--retries", ns.retries, 0, minimum=0, maximum=MAX_RETRIES),
        audit_only=ns.audit_only,
    )


def host_name(given: str | None) -> str:
    """--host, else $CONVMATRIX_HOST (both checked: a bad one is bad input), else this machine's
    hostname made safe (its first label; anything outside rundir.HOST's characters becomes '-')."""
    chosen = given if given is not None else os.environ.get("CONVMATRIX_HOST") or None
    if chosen is not None:
        if not rundir.HOST.fullmatch(chosen):
            where = "--host" if given is not None else "$CONVMATRIX_HOST"
            raise BadInput(f"run options: {where} {chosen!r} is not a host name (letters, digits, '.', '_', '-'; "
                           "at most 63; a letter or digit first)")
        return chosen
    found = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname().split(".")[0])[:63].lstrip("._-")
    return found or "localhost"


def count(name: str, text: str | None, default: int, *, minimum: int, maximum: int = 9999) -> int:
    if text is None:
        return default
    if not re.fullmatch(r"[0-9]{1,4}", text) or not minimum <= int(text) <= maximum:
        raise BadInput(f"run options: {name} {text!r} is not a whole number from {minimum} to {maximum}")
    return int(text)


def gigabytes(name: str, text: str) -> float:
    if not re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,3})?", text):
        raise BadInput(f"run options: {name} {text!r} is not a size in GB like 40 or 2.5")
    return float(text)


def parse_shard(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"([0-9]+)/([0-9]+)", text)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise BadInput(f"run options: --shard {text!r} is not I/N with 1 <= I <= N")
    return int(match[1]), int(match[2])


def in_shard(cell_id: str, all_ids: Sequence[str], shard: tuple[int, int] | None, control: str | None = None) -> bool:
    """Cells are dealt round-robin in id order, so every runner of a sharded job gets a fair share;
    the control is in every shard, so that each shard's cells are compared with a control that ran
    on the same machine (it is dealt to none, and runs beside each share)."""
    if shard is None or cell_id == control:
        return True
    index, count = shard
    dealt = sorted(i for i in all_ids if i != control)
    return dealt.index(cell_id) % count == index - 1


def mark_latest(out: Path) -> None:
    RUNS_DIR.mkdir(parents=True, exist_ok=True)
    LATEST.write_text(f"{out}\n")


def latest() -> Path:
    try:
        return Path(LATEST.read_text().strip())
    except OSError:
        raise BadInput(f"{LATEST}: no run recorded yet: run `nox -s nightly` (or a lane) first") from None
