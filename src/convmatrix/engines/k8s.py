"""Kubernetes: an Indexed Job (one shard of the matrix per completion index, a GPU each, the
results on a PersistentVolumeClaim) and a merge Job that waits for every shard's marker on the
claim, then writes the report files there. Printed as YAML for `kubectl apply -f -`; both can be
applied at once."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from convmatrix.engines import ShardPlan, merge_commands
from convmatrix.errors import BadInput

MARKERS = ".shards"  # under the results directory: one file per finished shard, its exit code
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,45}[a-z0-9])?")  # leaves room for "-shards" and pod suffixes


@dataclass(frozen=True, kw_only=True)
class K8sJob:
    plan: ShardPlan
    name: str  # the Jobs are NAME-shards and NAME-merge
    image: str  # holds the checkout (suites/, the matrix) and convmatrix; its working directory is used
    claim: str  # the PersistentVolumeClaim the results go on (ReadWriteMany: every shard writes)
    mount: str = "/results"  # where the claim is mounted; plan.out lies under it
    gpus: int = 1  # nvidia.com/gpu per shard
    convmatrix: tuple[str, ...] = ("convmatrix",)
    namespace: str | None = None


def check_name(name: str) -> str:
    if not DNS_LABEL.fullmatch(name):
        raise BadInput(f"--name {name!r}: use lower-case letters, digits and '-', at most 47 characters")
    return name


def manifests(job: K8sJob) -> list[dict[str, Any]]:
    return [shards_job(job), merge_job(job)]


def metadata(job: K8sJob, suffix: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{job.name}-{suffix}",
                            "labels": {"app.kubernetes.io/name": "convmatrix", "convmatrix/run": job.name}}
    if job.namespace:
        meta["namespace"] = job.namespace
    return meta


def volume(job: K8sJob) -> tuple[dict[str, Any], dict[str, Any]]:
    return ({"name": "results", "persistentVolumeClaim": {"claimName": job.claim}},
            {"name": "results", "mountPath": job.mount})


# The Pod Security Standards' `restricted` profile (kubernetes.io/docs/concepts/security/
# pod-security-standards): not root, no privilege escalation, every capability dropped, the
# RuntimeDefault seccomp profile, only PVC and emptyDir volumes; and a read-only root file system,
# with an emptyDir /tmp as the one scratch place (HOME). fsGroup makes the claim writable for the uid.
NONROOT = 65534
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": NONROOT, "runAsGroup": NONROOT, "fsGroup": NONROOT,
                "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                      "readOnlyRootFilesystem": True, "runAsNonRoot": True}
TMP_VOLUME = {"name": "tmp", "emptyDir": {}}


def hardened(container: dict[str, Any]) -> dict[str, Any]:
    """A container of either Job as the restricted profile wants it, with /tmp to write."""
    return {**container, "securityContext": dict(CONTAINER_SECURITY),
            "volumeMounts": [*container.get("volumeMounts", []), {"name": "tmp", "mountPath": "/tmp"}],
            "env": [*container.get("env", []), {"name": "HOME", "value": "/tmp"}]}


def shard_command(job: K8sJob) -> str:
    plan = job.plan
    markers = shlex.quote(str(PurePosixPath(plan.out) / MARKERS))
    run = shlex.join([*job.convmatrix, "run", "-m", plan.matrix, "--out", plan.out])
    # The marker is written however the run ended, so the merge runs after every shard as
    # Slurm's afterany would; the pod's exit status stays the run's.
    return "\n".join([
        "set -u",
        "shard=$((JOB_COMPLETION_INDEX + 1))",
        # The host a shard's results are keyed by is the node it runs on (a pod's own hostname is
        # its name): the node name's first label, as long as a host name may be.
        'export CONVMATRIX_HOST="$(printf %.63s "${NODE_NAME%%.*}")"',
        f'{run} --shard "$shard/{plan.shards}" {shlex.join(plan.run_args)}'.rstrip(),
        "code=$?",
        f'mkdir -p {markers} && echo "$code" > {markers}/"$shard"',
        'exit "$code"',
    ])


def shards_job(job: K8sJob) -> dict[str, Any]:
    vol, mount = volume(job)
    container = {
        "name": "shard", "image": job.image, "command": ["/bin/sh", "-c", shard_command(job)],
        "resources": {"limits": {"nvidia.com/gpu": job.gpus}}, "volumeMounts": [mount],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(job, "shards"),
        "spec": {
            "completionMode": "Indexed", "completions": job.plan.shards, "parallelism": job.plan.shards,
            "backoffLimitPerIndex": 1,  # a shard that failed is retried once; the others go on
            "template": {"metadata": {"labels": metadata(job, "shards")["labels"]},
                         "spec": {"restartPolicy": "Never", "securityContext": dict(POD_SECURITY),
                                  "containers": [hardened(container)], "volumes": [vol, dict(TMP_VOLUME)]}},
        },
    }


def merge_command(job: K8sJob) -> str:
    return "\n".join(["set -u", *merge_commands(job.convmatrix, job.plan.out)])


def wait_command(job: K8sJob) -> str:
    markers = shlex.quote(str(PurePosixPath(job.plan.out) / MARKERS))
    return (f'until [ "$(ls {markers} 2>/dev/null | wc -l)" -ge {job.plan.shards} ]; do sleep 15; done')


def merge_job(job: K8sJob) -> dict[str, Any]:
    vol, mount = volume(job)
    wait = {"name": "wait-for-shards", "image": job.image, "command": ["/bin/sh", "-c", wait_command(job)],
            "volumeMounts": [mount]}
    merge = {"name": "merge", "image": job.image, "command": ["/bin/sh", "-c", merge_command(job)],
             "volumeMounts": [mount]}
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(job, "merge"),
        "spec": {
            "backoffLimit": 0,  # its exit status is the verdict (1: a regression), not a fault to retry
            "template": {"metadata": {"labels": metadata(job, "merge")["labels"]},
                         "spec": {"restartPolicy": "Never", "securityContext": dict(POD_SECURITY),
                                  "initContainers": [hardened(wait)], "containers": [hardened(merge)],
                                  "volumes": [vol, dict(TMP_VOLUME)]}},
        },
    }


def to_yaml(docs: list[dict[str, Any]]) -> str:
    """A YAML stream; scalars are written as JSON (valid YAML), so no quoting rule is guessed."""
    return "".join("---\n" + "\n".join(yaml_lines(doc, 0)) + "\n" for doc in docs)


def yaml_lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines += [f"{pad}{yaml_key(key)}:", *yaml_lines(item, indent + 2)]
            elif isinstance(item, str) and "\n" in item:
                lines += [f"{pad}{yaml_key(key)}: |-", *(f"{pad}  {line}" for line in item.splitlines())]
            else:
                lines.append(f"{pad}{yaml_key(key)}: {json.dumps(item)}")
        return lines
    if isinstance(value, list):
        lines = []
        for item in value:
            if isinstance(item, str) and "\n" in item:
                lines += [f"{pad}- |-", *(f"{pad}  {line}" for line in item.splitlines())]
                continue
            nested = yaml_lines(item, indent + 2)
            lines.append(f"{pad}- {nested[0].lstrip()}")
            lines += nested[1:]
        return lines
    return [f"{pad}{json.dumps(value)}"]


def yaml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z][A-Za-z0-9_./-]*", key) else json.dumps(key)
