"""The `convmatrix slurm` and `convmatrix k8s` subcommands: a matrix across a fleet, one shard
of its cells per task, then a merge task that writes the report (see engines/)."""

from __future__ import annotations

import argparse
import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from convmatrix import matrix
from convmatrix.engines import ShardPlan, check_path, check_run_args, check_shards, check_text, k8s, mig_profile, slurm
from convmatrix.errors import BadInput

TAIL = "run options (as after `nox -s <lane> --`: --resume, --gpus, --rerun-blocking), then -- and suite options"


def add_fleet_parsers(sub: Any) -> None:
    s = sub.add_parser("slurm", help="run the matrix as a Slurm array job (a shard per task) and a merge job",
                       description=f"After --: {TAIL}.")
    common(s)
    s.add_argument("--out", type=Path, required=True, help="the shared results directory (report files go there)")
    s.add_argument("--partition", help="sbatch --partition")
    s.add_argument("--gres", help="sbatch --gres for each shard task, e.g. gpu:1")
    s.add_argument("--mig", metavar="PROFILE|KEY",
                   help="each shard task asks for one MIG slice of this profile (3g.71gb, or a slice's GPU key "
                        "like h200-sm90-mig3g-71gb): --gres=gpu:PROFILE:1, where slurm.conf names the slice's "
                        "GRES type by its profile")
    s.add_argument("--time", help="sbatch --time for each task, e.g. 04:00:00")
    s.add_argument("--constraint", help="sbatch --constraint for each shard task (node features, e.g. h100)")
    s.add_argument("--job-name", default="convmatrix", help="the jobs are NAME-shards and NAME-merge")
    s.add_argument("--convmatrix", metavar="CMD",
                   help="the command the tasks run (default: PYTHON -m convmatrix, with the interpreter running this)")
    s.add_argument("--dry-run", action="store_true", help="print the two scripts; submit nothing")
    k = sub.add_parser("k8s", help="print a Kubernetes Indexed Job (a shard per index) and a merge Job",
                       description=f"After --: {TAIL}.")
    common(k)
    k.add_argument("--image", required=True, help="an image with the checkout and convmatrix (its workdir is used)")
    k.add_argument("--claim", required=True, help="the PersistentVolumeClaim for the results (ReadWriteMany)")
    k.add_argument("--mount", default="/results", help="where the claim is mounted (default /results)")
    k.add_argument("--out", help="the results directory under the mount (default MOUNT/runs/<time>)")
    k.add_argument("--name", help="the Jobs are NAME-shards and NAME-merge (default convmatrix-<time>)")
    k.add_argument("--namespace")
    k.add_argument("--gpus", type=int, default=1, help="nvidia.com/gpu per shard (default 1; with --mig, MIG devices)")
    k.add_argument("--mig", metavar="PROFILE|KEY",
                   help="ask for nvidia.com/mig-PROFILE instead of whole GPUs (the device plugin's mixed strategy; "
                        "3g.71gb, or a slice's GPU key like h200-sm90-mig3g-71gb)")
    k.add_argument("--convmatrix", metavar="CMD", default="convmatrix", help="the command in the image")
    k.add_argument("--toleration", action="append", default=[], metavar="KEY[=VALUE]:EFFECT",
                   help="tolerate a node taint, on both Jobs (repeatable; "
                        "the GPU operator's: nvidia.com/gpu:NoSchedule)")
    k.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE",
                   help="schedule the shards only on nodes with this label (repeatable; "
                        "e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3)")
    k.add_argument("--shm-size", default=k8s.DEFAULT_SHM, metavar="SIZE",
                   help=f"a memory-backed /dev/shm for each shard, at most SIZE (default {k8s.DEFAULT_SHM})")
    k.add_argument("--deadline", metavar="SECONDS", help="the shards Job's activeDeadlineSeconds (default none)")
    k.add_argument("--merge-deadline", metavar="SECONDS",
                   help="how long the merge waits for the shards before reporting the missing ones NOT RUN "
                        f"(default --deadline + {k8s.MERGE_SLACK_S}, else {k8s.DEFAULT_MERGE_DEADLINE_S})")


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--matrix", default=None, help="matrix file (default as for `matrix`)")
    p.add_argument("--shards", type=int, required=True, help="how many tasks share the cells (round-robin)")
    p.add_argument("run_args", nargs="*", metavar="-- RUN OPTIONS [-- SUITE OPTIONS]", help=TAIL)


def plan(args: argparse.Namespace, *, out: str, matrix_path: str) -> ShardPlan:
    check_path("--out", out)
    check_path("-m", matrix_path)
    loaded = matrix.load(args.matrix or matrix.default_matrix())  # a broken matrix fails here, not in every task
    check_shards(args.shards, len(loaded.cells))
    return ShardPlan(matrix=matrix_path, out=out, shards=args.shards, run_args=check_run_args(args.run_args))


def command(text: str | None, option: str = "--convmatrix") -> tuple[str, ...]:
    if text is None:
        # The convmatrix running now, by its interpreter's path (a venv's python stays the venv's):
        # the tasks run on nodes that see the same filesystem, whatever their PATH holds.
        return (sys.executable, "-m", "convmatrix")
    check_text(option, text)
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:  # an unclosed quote
        raise BadInput(f"{option} {text!r}: {exc}") from None
    if not words:
        raise BadInput(f"{option}: empty command")
    return words


def cmd_slurm(args: argparse.Namespace) -> int:
    for option in ("partition", "gres", "time", "constraint", "job_name"):
        check_text(f"--{option.replace('_', '-')}", getattr(args, option))
    gres = args.gres
    if profile := mig_profile("--mig", args.mig):
        if gres:
            raise BadInput(f"--mig {args.mig}: give --gres or --mig, not both (--mig is --gres=gpu:{profile}:1)")
        # Slurm's GRES type of a MIG device is a substring of its "MIG Profile" (nvidia_h200_3g.71gb)
        # that slurm.conf names (slurm.schedmd.com/gres.html, "MIG Management").
        gres = f"gpu:{profile}:1"
    check_path("--out", str(args.out))
    # The tasks start in this directory (#SBATCH --chdir): its name reaches the script as well.
    check_path("the working directory", str(Path.cwd()))
    matrix_path = str(Path(args.matrix or matrix.default_matrix()).resolve())
    job = slurm.SlurmJob(
        plan=plan(args, out=str(args.out.resolve()), matrix_path=matrix_path),
        convmatrix=command(args.convmatrix), workdir=Path.cwd(), partition=args.partition, gres=gres,
        time=args.time, constraint=args.constraint, job_name=args.job_name,
    )
    if args.dry_run:
        print(f"# {job.scripts_dir}/shards.sbatch\n{slurm.shard_script(job)}")
        print(f"# {job.scripts_dir}/merge.sbatch (sbatch --dependency=afterany:<shards job>)\n"
              f"{slurm.merge_script(job)}", end="")
        return 0
    slurm.submit(job, lambda line: print(line, flush=True))
    return 0


def cmd_k8s(args: argparse.Namespace) -> int:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for option in ("image", "claim", "namespace"):
        check_text(f"--{option}", getattr(args, option))  # a control character first: its own message
    mount = check_path("--mount", args.mount).rstrip("/") or "/"
    if not mount.startswith("/"):
        raise BadInput(f"--mount {args.mount}: must be an absolute path")
    mount = k8s.check_mount(mount)
    # Normalised first: /results/../etc is /etc, which is not under the mount.
    out = check_path("--out", args.out or f"{mount}/runs/{stamp}")
    if not out.startswith(f"{mount}/"):
        raise BadInput(f"--out {out}: must lie under the claim's mount {mount}, or the results are lost with the pod")
    if args.gpus < 0:
        raise BadInput(f"--gpus {args.gpus}: give 0 or more")
    image, claim = k8s.check_image(args.image), k8s.check_claim(args.claim)
    namespace = k8s.check_namespace(args.namespace)
    tolerations = tuple(k8s.parse_toleration(t) for t in args.toleration)
    selector = k8s.node_selector(args.node_selector)
    shm = k8s.check_shm(args.shm_size)
    deadline = None if args.deadline is None else k8s.check_seconds("--deadline", args.deadline)
    merge_deadline = (k8s.check_seconds("--merge-deadline", args.merge_deadline) if args.merge_deadline is not None
                      else deadline + k8s.MERGE_SLACK_S if deadline is not None else k8s.DEFAULT_MERGE_DEADLINE_S)
    k8s.check_merge_deadline(merge_deadline, deadline)
    matrix_path = args.matrix or matrix.default_matrix()
    shard_plan = plan(args, out=out, matrix_path=matrix_path)
    loaded = matrix.load(matrix_path)
    job = k8s.K8sJob(
        plan=shard_plan, name=k8s.check_name(args.name or f"convmatrix-{stamp}"), image=image,
        claim=claim, mount=mount, gpus=args.gpus, mig=mig_profile("--mig", args.mig),
        convmatrix=command(args.convmatrix),
        namespace=namespace, tolerations=tolerations, node_selector=selector, shm=shm, deadline=deadline,
        merge_deadline=merge_deadline, stand_ins=k8s.stand_ins(loaded, shard_plan.shards, str(matrix_path)),
        token=secrets.token_hex(6),
    )
    print(k8s.to_yaml(k8s.manifests(job)), end="")
    if boxed := [c.id for c in loaded.lane("container")]:
        # A pod in the restricted profile has no engine socket: such cells can only end NOT RUN.
        print(f"convmatrix k8s: {len(boxed)} container-lane cell(s) of {matrix_path} (e.g. {boxed[0]}) will be "
              "reported NOT RUN: a pod has no container engine; the image itself is the container "
              "(docs/fleet.md)", file=sys.stderr)
    return 0


FLEET_COMMANDS = {"slurm": cmd_slurm, "k8s": cmd_k8s}
