"""Slurm: an sbatch array job (one shard of the matrix per task) and a merge job that depends
on it with `afterany` (it runs however the shards ended: a failed cell is in the report as
INVALID), writing the report files beside the results. Everything runs from the shared
filesystem: the matrix, the results directory and the convmatrix command are named by the
paths the submitting node sees."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from convmatrix.engines import ShardPlan, merge_commands
from convmatrix.errors import BadInput, InfrastructureError

SCRIPTS_DIR = "slurm"  # under the results directory: the scripts and each task's log


@dataclass(frozen=True, kw_only=True)
class SlurmJob:
    plan: ShardPlan
    convmatrix: tuple[str, ...]  # the command each task runs, e.g. (/venv/bin/convmatrix,)
    workdir: Path  # the tasks' working directory (the checkout: suites/, relative paths)
    partition: str | None = None
    gres: str | None = None  # per shard task, e.g. gpu:1 or a MIG slice's gpu:3g.71gb:1; the merge job needs none
    time: str | None = None  # per task, sbatch's --time syntax
    constraint: str | None = None  # per shard task: node features (--constraint), e.g. one GPU product
    job_name: str = "convmatrix"

    @property
    def scripts_dir(self) -> Path:
        return Path(self.plan.out) / SCRIPTS_DIR


def directives(job: SlurmJob, *, name: str, output: str, gres: bool) -> list[str]:
    lines = [f"--job-name={name}", f"--chdir={job.workdir}", f"--output={job.scripts_dir / output}"]
    lines += [f"--partition={job.partition}"] if job.partition else []
    lines += [f"--gres={job.gres}"] if gres and job.gres else []
    lines += [f"--time={job.time}"] if job.time else []
    lines += [f"--constraint={job.constraint}"] if gres and job.constraint else []
    return [f"#SBATCH {shlex.quote(line)}" for line in lines]


def shard_script(job: SlurmJob) -> str:
    plan = job.plan
    run = [*job.convmatrix, "run", "-m", plan.matrix, "--out", plan.out]
    return "\n".join([
        "#!/bin/bash",
        *directives(job, name=f"{job.job_name}-shards", output="shard-%a.log", gres=True),
        f"#SBATCH --array=1-{plan.shards}",
        f"# convmatrix: one shard of {plan.matrix} per array task, into {plan.out}",
        "set -u",
        f'exec {shlex.join(run)} --shard "${{SLURM_ARRAY_TASK_ID}}/{plan.shards}" {shlex.join(plan.run_args)}'.rstrip(),
        "",
    ])


def merge_script(job: SlurmJob) -> str:
    return "\n".join([
        "#!/bin/bash",
        *directives(job, name=f"{job.job_name}-merge", output="merge.log", gres=False),
        f"# convmatrix: the report over every shard's results in {job.plan.out}",
        "set -u",
        *merge_commands(job.convmatrix, job.plan.out),
        "",
    ])


Say = Callable[[str], None]


def submit(job: SlurmJob, say: Say) -> tuple[str, str]:
    """Write both scripts beside the results and submit them; the job ids (array, merge)."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise InfrastructureError("sbatch: not found on PATH (run this on a Slurm login node)")
    shards, merge = job.scripts_dir / "shards.sbatch", job.scripts_dir / "merge.sbatch"
    try:
        job.scripts_dir.mkdir(parents=True, exist_ok=True)  # the tasks' logs go here: it must exist first
        shards.write_text(shard_script(job))
        merge.write_text(merge_script(job))
    except OSError as exc:  # --out is the user's to choose, like an unwritable -o: bad input, not infrastructure
        raise BadInput(f"--out {job.plan.out}: cannot write {job.scripts_dir}: {exc.strerror or exc}") from None
    array_id = sbatch_id(sbatch, [str(shards)])
    say(f"shards: job {array_id} (array 1-{job.plan.shards}), logs {job.scripts_dir}/shard-<i>.log")
    try:
        merge_id = sbatch_id(sbatch, [f"--dependency=afterany:{array_id}", str(merge)])
    except InfrastructureError as exc:
        raise InfrastructureError(f"{exc} (the shards, job {array_id}, were submitted: scancel {array_id})") from None
    say(f"merge: job {merge_id} (after job {array_id}), report in {job.plan.out}/report.html, log "
        f"{job.scripts_dir}/merge.log")
    return array_id, merge_id


def sbatch_id(sbatch: str, args: list[str]) -> str:
    try:
        done = subprocess.run([sbatch, "--parsable", *args], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InfrastructureError(f"sbatch {args[-1]}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise InfrastructureError(f"sbatch {args[-1]}: exited {done.returncode}: {last}")
    # --parsable prints "id" or "id;cluster"
    return done.stdout.strip().split(";")[0]
