"""Engines that run a matrix across a fleet: one shard of the cells per task (`convmatrix run
--shard I/N` into one shared results directory), then one merge task that writes the report
files. slurm: an sbatch array job and an afterany merge job; k8s: an Indexed Job and a merge Job.
What they share is here: the shard plan and its checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from convmatrix import options
from convmatrix.errors import BadInput

# The report files a merge writes beside the results (as `nox -s nightly` does): format, file.
REPORT_FILES = (("json", "report.json"), ("markdown", "report.md"), ("html", "report.html"), ("junit", "junit.xml"))
# Set by the engine for each task, so never taken from the user's run options.
ENGINE_OPTIONS = ("--out", "--shard")


@dataclass(frozen=True, kw_only=True)
class ShardPlan:
    """What every shard task runs: `convmatrix run -m MATRIX --out OUT --shard I/N RUN_ARGS`."""

    matrix: str  # as the task sees it
    out: str  # the shared results directory, as the task sees it
    shards: int
    run_args: tuple[str, ...]  # run options, then `--` and suite options (as after `convmatrix run`)


def check_shards(shards: int, cells: int) -> None:
    if shards < 1:
        raise BadInput(f"--shards {shards}: give at least 1")
    if shards > cells:
        raise BadInput(f"--shards {shards}: the matrix has only {cells} cell(s), so some shards would run nothing")


def check_run_args(run_args: Sequence[str]) -> tuple[str, ...]:
    """The run options after `--` (same as nox's), checked now rather than in every task;
    --out and --shard belong to the engine."""
    head = list(run_args)[: list(run_args).index("--")] if "--" in run_args else list(run_args)
    for name in ENGINE_OPTIONS:
        if any(arg == name or arg.startswith(f"{name}=") for arg in head):
            raise BadInput(f"run options: {name} is set by the engine (use the command's own --out and --shards)")
    options.parse(run_args, default_out=None)  # raises BadInput naming the option
    return tuple(run_args)
