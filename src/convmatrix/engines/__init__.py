"""Engines that run a matrix across a fleet: one shard of the cells per task (`convmatrix run
--shard I/N` into one shared results directory), then one merge task that writes the report
files. slurm: an sbatch array job and an afterany merge job; k8s: an Indexed Job and a merge Job.
What they share is here: the shard plan and its checks."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from convmatrix import gpus
from convmatrix.errors import BadInput
from convmatrix.matrix import values
from convmatrix.results import rundir
from convmatrix.run import options

# Set by the engine for each task, so never taken from the user's run options.
ENGINE_OPTIONS = ("--out", "--shard")
# What no value that reaches a script or a manifest may hold: a line break (a new shell command
# after `#SBATCH`, a new YAML key), a carriage return, any other C0 or C1 control or DEL, and the
# Unicode line and paragraph separators. Everything else is quoted by the module that writes it.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_text(option: str, value: str | None) -> str | None:
    """value, unless it holds a control character (BadInput, naming the option)."""
    if value is not None and _CONTROL.search(value):
        raise BadInput(f"{option} {value!r}: holds a control character (a line break would start a new "
                       "command in the generated script)")
    return value


def check_path(option: str, value: str) -> str:
    """A POSIX path for a script or manifest: no control character, normalised (`a/../b` is `b`)."""
    check_text(option, value)
    return posixpath.normpath(value) if value else value


# A MIG profile as schedulers name what they hand out: a GPU instance, with its compute instance
# share when that is not the whole of it (1c.3g.71gb). No media-extension suffix (1g.18gb+me):
# the NVIDIA device plugin files those under the plain profile's resource
# (github.com/NVIDIA/k8s-device-plugin/issues/1462), and Slurm's GRES type names none.
SCHEDULED_MIG = re.compile(gpus.MIG_INSTANCE, re.ASCII)


def mig_profile(option: str, text: str | None) -> str | None:
    """--mig: a MIG profile (3g.71gb) or the GPU key of a slice (h200-sm90-mig3g-71gb), as the
    profile the scheduler is asked for; None when not given. A key spells the profile's dots as
    '-' (gpus.gpu_key), which the plain profiles allow to read back."""
    if text is None:
        return None
    check_text(option, text)
    parts = gpus.key_parts(text) if values.is_gpu_key(text) else None
    profile = parts[2].replace("-", ".") if parts and parts[2] else text
    if not SCHEDULED_MIG.fullmatch(profile):
        raise BadInput(f"{option} {text[:80]!r}: not a MIG profile like 3g.71gb (or a slice's GPU key like "
                       "h200-sm90-mig3g-71gb)")
    return profile


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
    """The run options after `--` (same as nox's), checked now rather than in every task by the
    parser `convmatrix run` uses; --out and --shard belong to the engine, --results-dir and
    --cell-id (suite options) to the harness."""
    for arg in run_args:
        check_text("run options:", arg)
    # The run's own parser decides what is an engine option (an abbreviation argparse expands too).
    options.parse(run_args, default_out=None, owned=ENGINE_OPTIONS)  # raises BadInput naming the option
    return tuple(run_args)


def merge_commands(convmatrix: Sequence[str], out: str) -> list[str]:
    """The merge task's shell lines: every report file written beside the shards' results in OUT
    whatever the verdict (--fail-on never), then the text report, whose exit status is the task's
    (0 green, 1 a regression or an INVALID cell, 3 an unhealthy control)."""
    report = shlex.join([*convmatrix, "report", out])
    writes = [f"{report} --format {fmt} -o {shlex.quote(str(PurePosixPath(out) / name))} --fail-on never"
              for fmt, name in rundir.REPORT_FILES]
    return [*writes, f"exec {report} --format text --color never"]
