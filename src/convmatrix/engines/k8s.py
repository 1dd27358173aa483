"""Kubernetes: an Indexed Job (one shard of the matrix per completion index, a GPU each, the
results on a PersistentVolumeClaim) and a merge Job that waits for every shard's marker on the
claim, up to a deadline, then writes the report files there. Printed as YAML for `kubectl apply
-f -`; both can be applied at once. Neither needs any permission on the API: a shard learns from
its own pod (downward API) whether this is its last allowed attempt, and the claim is the only
channel between the pods."""

from __future__ import annotations

import base64
import gzip
import json
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from convmatrix.engines import ShardPlan, check_text, merge_commands
from convmatrix.errors import BadInput
from convmatrix.matrix import Matrix
from convmatrix.run import options

MARKERS = ".shards"  # under the results directory: one file per shard that ended for good, "done|failed CODE"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,45}[a-z0-9])?")  # leaves room for "-shards" and pod suffixes
# A failed index is retried this many times (spec.backoffLimitPerIndex); the shard's attempt
# number is the pod's batch.kubernetes.io/job-index-failure-count annotation (0 on the first),
# which the Job controller sets on every pod of an index when backoffLimitPerIndex is set
# (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/job-v1/#JobSpec,
# backoffLimitPerIndex), read through the downward API
# (https://kubernetes.io/docs/concepts/workloads/pods/downward-api/: metadata.annotations['<KEY>']).
RETRIES = 1
FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
POLL_S = 15  # how often the merge looks for markers
MERGE_HOST = "k8s-merge"  # the host the merge's stand-in plans name (a host name, never a node's)
GPU_KEY_SLOT = "@GPU_KEY@"  # in a stand-in plan: replaced by each GPU key the other shards planned
UNKNOWN_GPU = "unknown"  # the GPU key of a stand-in plan when no shard planned any
DEFAULT_SHM = "8Gi"
DEFAULT_MERGE_DEADLINE_S = 24 * 3600  # without --deadline; with it, the shards' deadline and MERGE_SLACK_S
MERGE_SLACK_S = 900  # the merge starts with the shards: past their deadline, this long for the last markers
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Linux refuses to exec a command with any one argument longer than MAX_ARG_STRLEN, 32 pages
# (131072 bytes with 4 KiB pages; www.in-ulm.de/~mascheck/various/argmax/, "maximum length of one
# argument"); a container's `sh -c SCRIPT` is one such argument. Seen here: a 140 KB script ended in
# "Argument list too long" before the merge wrote anything.
MAX_ARGUMENT = 131072


@dataclass(frozen=True, kw_only=True)
class Toleration:
    key: str
    value: str | None  # None: operator Exists (any value)
    effect: str

    def spec(self) -> dict[str, Any]:
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


@dataclass(frozen=True, kw_only=True)
class K8sJob:
    plan: ShardPlan
    name: str  # the Jobs are NAME-shards and NAME-merge
    image: str  # holds the checkout (suites/, the matrix) and convmatrix; its working directory is used
    claim: str  # the PersistentVolumeClaim the results go on (ReadWriteMany: every shard writes)
    mount: str = "/results"  # where the claim is mounted; plan.out lies under it
    gpus: int = 1  # nvidia.com/gpu per shard (with mig: that many MIG devices)
    # A MIG profile (3g.71gb): each shard asks for nvidia.com/mig-<profile>, the resource the NVIDIA
    # device plugin's `mixed` strategy names MIG devices by (docs.nvidia.com/datacenter/cloud-native/
    # kubernetes, "MIG Support in Kubernetes"; the plugin's v0.7.0 notes: `nvidia.com/mig-3g.20gb: 2`),
    # instead of whole GPUs; the run then finds the slice it was given and files it under its key.
    mig: str | None = None
    convmatrix: tuple[str, ...] = ("convmatrix",)
    namespace: str | None = None
    tolerations: tuple[Toleration, ...] = ()  # on both Jobs' pods (a toleration lets a pod in; it draws none)
    node_selector: tuple[tuple[str, str], ...] = ()  # on the shards only: the merge needs no GPU
    shm: str = DEFAULT_SHM  # a memory-backed /dev/shm of this size limit for each shard (PyTorch's workers)
    deadline: int | None = None  # the shards Job's activeDeadlineSeconds
    merge_deadline: int = DEFAULT_MERGE_DEADLINE_S  # how long the merge waits for the shards' markers
    # Per shard, the plan (JSON) the merge writes for it if it left none (stand_ins()).
    stand_ins: tuple[str, ...] = ()
    # This manifest's own: its markers carry it, so that a merge counts only its own shards'
    # (another manifest's run into the same --out, `-- --resume`, left markers of its own), and
    # once its merge ran, the same manifest applied again is refused (refuse_merged_lines).
    # Letters and digits only: it goes into the scripts as is.
    token: str = "run"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9]{1,32}", self.token):
            raise ValueError(f"a manifest's token is lower-case letters and digits, not {self.token!r}")


def check_name(name: str) -> str:
    if not DNS_LABEL.fullmatch(name):
        raise BadInput(f"--name {name!r}: use lower-case letters, digits and '-', at most 47 characters")
    return name


# Object names (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/): a
# namespace is a DNS label (RFC 1123, at most 63 characters), a PersistentVolumeClaim a DNS
# subdomain (at most 253). The API server refuses anything else, long after `kubectl apply`.
_DNS_LABEL_63 = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def check_namespace(text: str | None) -> str | None:
    if text is not None and not _DNS_LABEL_63.fullmatch(text):
        raise BadInput(f"--namespace {text!r}: a namespace is lower-case letters, digits and '-', "
                       "a letter or digit first and last, at most 63 characters")
    return text


def check_claim(text: str) -> str:
    if len(text) > 253 or not _SUBDOMAIN.fullmatch(text):
        raise BadInput(f"--claim {text!r}: a PersistentVolumeClaim's name is lower-case letters, digits, "
                       "'-' and '.', a letter or digit first and last, at most 253 characters")
    return text


def check_image(text: str) -> str:
    # An image reference holds no white space (https://github.com/distribution/reference, grammar.go).
    if not text or any(c.isspace() for c in text):
        raise BadInput(f"--image {text!r}: give an image reference such as registry.local/convmatrix:1")
    return text


# Label and taint keys and values (https://kubernetes.io/docs/concepts/overview/working-with-objects/
# labels/#syntax-and-character-set): an optional DNS-subdomain prefix and '/', then a name of at most
# 63 characters, alphanumerics first and last, '-', '_' and '.' between; a value the same, or empty.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(_NAME)
_QUANTITY = re.compile(r"(?P<number>[0-9]+(\.[0-9]+)?)(?P<unit>Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_SECONDS = re.compile(r"[1-9][0-9]{0,9}")


def check_key(option: str, given: str, key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        raise BadInput(f"{option} {given!r}: the key's prefix {prefix!r} is not a DNS subdomain "
                       "(lower-case letters, digits, '-' and '.', at most 253 characters)")
    if not _LABEL_NAME.fullmatch(name):
        raise BadInput(f"{option} {given!r}: the key's name {name!r} is not a label name (letters, digits, "
                       "'-', '_' and '.', at most 63 characters, a letter or digit first and last)")
    return key


def check_value(option: str, given: str, value: str) -> str:
    if value and not _LABEL_NAME.fullmatch(value):
        raise BadInput(f"{option} {given!r}: the value {value!r} is not a label value (letters, digits, "
                       "'-', '_' and '.', at most 63 characters, a letter or digit first and last)")
    return value


def parse_toleration(text: str) -> Toleration:
    """KEY[=VALUE]:EFFECT, e.g. nvidia.com/gpu:NoSchedule (operator Exists) or dedicated=gpu:NoExecute.
    nvidia.com/gpu:NoSchedule is the taint the NVIDIA GPU operator's own daemonsets tolerate
    (github.com/NVIDIA/gpu-operator, deployments/gpu-operator/values.yaml, daemonsets.tolerations)."""
    check_text("--toleration", text)
    head, colon, effect = text.rpartition(":")
    if not colon or effect not in EFFECTS:
        raise BadInput(f"--toleration {text!r}: give KEY[=VALUE]:EFFECT, EFFECT one of {', '.join(EFFECTS)}")
    key, equals, value = head.partition("=")
    return Toleration(key=check_key("--toleration", text, key),
                      value=check_value("--toleration", text, value) if equals else None, effect=effect)


def parse_node_selector(text: str) -> tuple[str, str]:
    """KEY=VALUE, e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3: GPU feature discovery's "Model of
    the GPU" label (github.com/NVIDIA/k8s-device-plugin, docs/gpu-feature-discovery/README.md,
    Generated Labels)."""
    check_text("--node-selector", text)
    key, equals, value = text.partition("=")
    if not equals:
        raise BadInput(f"--node-selector {text!r}: give KEY=VALUE, e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")
    return check_key("--node-selector", text, key), check_value("--node-selector", text, value)


def node_selector(texts: list[str]) -> tuple[tuple[str, str], ...]:
    """Every --node-selector, a key at most once (nodeSelector is a map: a second value for a key
    would silently replace the first)."""
    pairs: dict[str, str] = {}
    for text in texts:
        key, value = parse_node_selector(text)
        if key in pairs and pairs[key] != value:
            raise BadInput(f"--node-selector {text!r}: {key} is already {pairs[key]!r}; a node has one value per label")
        pairs[key] = value
    return tuple(pairs.items())


def check_shm(text: str) -> str:
    """A Kubernetes quantity above zero (8Gi, 512Mi, 1G)."""
    check_text("--shm-size", text)
    found = _QUANTITY.fullmatch(text)
    if not found or float(found["number"]) == 0:
        raise BadInput(f"--shm-size {text!r}: give a size above zero such as 8Gi or 512Mi "
                       "(a number, then Ki, Mi, Gi, Ti or k, M, G, T)")
    return text


def check_seconds(option: str, text: str) -> int:
    check_text(option, text)
    if not _SECONDS.fullmatch(text):
        raise BadInput(f"{option} {text!r}: give a whole number of seconds, 1 to 9999999999")
    return int(text)


# Where the image's system and the pods' own mounts lie. The claim mounted on or over one of them
# (`/`, `/dev` over /dev/shm) would stack two volumes on one mountPath (the API server refuses
# the pod: "must be unique") or hide the shell, the interpreter and /proc that the scripts need;
# inside a system folder (/usr/local) it would hide part of it too. Inside /tmp or /run it is a
# mount of its own beneath theirs, which Kubernetes allows.
# /opt holds interpreters too (this project's cell images' /opt/cell, conda, NGC's /opt/hpcx);
# /var/run is a link to /run in Debian and Ubuntu images.
SYSTEM_FOLDERS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc", "/opt", "/proc", "/sys",
                  "/dev")
OWN_MOUNTS = ("/tmp", "/run", "/var/run")


def check_mount(mount: str) -> str:
    """An absolute, normalised --mount that is no system folder, lies in none, and holds neither
    a system folder nor the pods' own mounts."""
    mount = "/" + mount.lstrip("/")  # normpath keeps a leading "//", which is "/" to the kernel
    if mount == "/":
        raise BadInput("--mount /: the claim cannot be mounted over the image's root; give a folder of its own "
                       "such as /results")
    above = mount.rstrip("/") + "/"
    for reserved in (*OWN_MOUNTS, *SYSTEM_FOLDERS):
        inside = mount.startswith(f"{reserved}/") and reserved in SYSTEM_FOLDERS
        if mount == reserved or reserved.startswith(above) or inside:
            raise BadInput(f"--mount {mount}: the claim cannot be mounted on, over or in {reserved} (the image's "
                           "system and the pods' own mounts); give a folder of its own such as /results")
    return mount


def check_merge_deadline(merge_deadline: int, deadline: int | None) -> int:
    """The merge waits at least as long as the shards may run: a shorter wait would report shards
    NOT RUN that are still running, and its merged marker would then refuse their retries."""
    if deadline is not None and merge_deadline < deadline:
        raise BadInput(f"--merge-deadline {merge_deadline}: shorter than --deadline {deadline}, so the merge would "
                       f"report shards that are still running as NOT RUN; give {deadline} or more (default: "
                       f"--deadline plus {MERGE_SLACK_S})")
    return merge_deadline


def stand_ins(matrix: Matrix, shards: int, matrix_path: str) -> tuple[str, ...]:
    """Per shard, the plan it would have written (its share and the control; the GPU key a slot,
    no host: on any host), as JSON: the merge writes it for a shard that left no plan, so that the
    report shows its cells NOT RUN (docs/contracts.md: The plan)."""
    every = [c.id for c in matrix.cells]
    control = matrix.control.id if matrix.control else None
    written = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    return tuple(json.dumps({
        "schema": 1, "host": MERGE_HOST, "written": written, "matrix": matrix_path, "lanes": [], "cells": [],
        "shard": None, "fleet_gpus": [],
        "expected": [{"cell": c.id, "gpu_key": GPU_KEY_SLOT, "host": None, "optional": c.id in matrix.optional,
                      "lane": c.lane, "requested": c.values()}
                     for c in matrix.cells if options.in_shard(c.id, every, (index, shards), control)],
    }) for index in range(1, shards + 1))


def manifests(job: K8sJob) -> list[dict[str, Any]]:
    docs = [shards_job(job), merge_job(job)]
    for doc in docs:
        spec = doc["spec"]["template"]["spec"]
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            size = max(len(arg.encode()) for arg in container["command"])
            if size >= MAX_ARGUMENT:  # the limit counts the argument's terminating NUL
                raise BadInput(f"{doc['metadata']['name']}: the {container['name']} container's script would be "
                               f"{size} bytes, over the {MAX_ARGUMENT} Linux allows one argument: split the matrix "
                               f"({len(job.stand_ins)} shard(s) of its cells are written into the merge)")
    return docs


def packed(text: str) -> str:
    """A stand-in plan as the wait script carries it: gzip, then base64 (about a twentieth of the
    JSON, whose cells repeat the same keys and values), so that a matrix of thousands of cells fits
    the one argument a script is (MAX_ARGUMENT). mtime 0: the same matrix gives the same manifest."""
    return base64.b64encode(gzip.compress(text.encode(), compresslevel=9, mtime=0)).decode()


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
# No pod talks to the API server (markers on the claim, not a watch of the Job), so none gets the
# namespace's service-account token (automountServiceAccountToken: false; kubernetes.io/docs/tasks/
# configure-pod-container/configure-service-account, "Opt out of API credential automounting").
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


def pod_spec(job: K8sJob, *, selector: bool) -> dict[str, Any]:
    """What both Jobs' pods share: never restarted in place (the Job retries), the restricted
    profile's pod fields, no API token, and where they may be scheduled."""
    return {"restartPolicy": "Never", "securityContext": dict(POD_SECURITY), "automountServiceAccountToken": False,
            **scheduling(job, selector=selector)}


def scheduling(job: K8sJob, *, selector: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if job.tolerations:
        spec["tolerations"] = [t.spec() for t in job.tolerations]
    if selector and job.node_selector:
        spec["nodeSelector"] = dict(job.node_selector)
    return spec


def shard_command(job: K8sJob) -> str:
    plan = job.plan
    markers = shlex.quote(str(PurePosixPath(plan.out) / MARKERS))
    run = shlex.join([*job.convmatrix, "run", "-m", plan.matrix, "--out", plan.out])
    # The marker says the shard ended for good: it succeeded, or it failed on its last allowed
    # attempt (then the index is not retried). An earlier attempt that failed leaves none, so the
    # merge never starts while a retry may still run. Without the annotation (a cluster without
    # backoffLimitPerIndex) every attempt counts as the last. The pod's exit status stays the run's.
    return "\n".join([
        "set -u",
        # The shell is the container's PID 1, to which the kernel delivers no signal it has no
        # handler for: the trap comes first, so that a SIGTERM that comes before the run starts is
        # kept and passed on once it has (a review: one sent at once was lost, every time).
        "term=''; child=''",
        """trap 'term=1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null' TERM""",
        *refuse_merged_lines(job),
        "shard=$((JOB_COMPLETION_INDEX + 1))",
        # The host a shard's results are keyed by is the node it runs on (a pod's own hostname is
        # its name): the node name's first label, as long as a host name may be.
        'export CONVMATRIX_HOST="$(printf %.63s "${NODE_NAME%%.*}")"',
        # A run in the foreground would never hear of an eviction, a preemption or the Job's
        # deadline, and the grace period would end in SIGKILL with no marker on a last attempt.
        # In the background it gets the TERM, records the case in flight as interrupted and exits
        # 143 (docs/contracts.md, Exit codes); then the marker is written as for any failure.
        " ".join(filter(None, [run, f'--shard "$shard/{plan.shards}"', shlex.join(plan.run_args), "&"])),
        "child=$!",
        '[ -z "$term" ] || kill -TERM "$child" 2>/dev/null',
        'wait "$child"; code=$?',
        # A trapped signal ends `wait` early (status > 128): wait on until the run itself ended.
        'while kill -0 "$child" 2>/dev/null; do wait "$child"; code=$?; done',
        *marker_lines(markers, job.token),
        'exit "$code"',
    ])


def merged_path(job: K8sJob) -> str:
    return shlex.quote(str(PurePosixPath(job.plan.out) / MARKERS / f"merged-{job.token}"))


def refuse_merged_lines(job: K8sJob) -> list[str]:
    """Refuse to run again once this manifest's merge ran (the Jobs deleted and the same YAML
    applied again): its --out and its token are fixed when it is printed, so its old markers
    would let the merge start at once, on old results, while the new shards still run."""
    said = shlex.quote(f"convmatrix: this manifest's run already ended, its merge reported on {job.plan.out}: "
                       "print a new manifest with `convmatrix k8s` for a new run (`-- --resume` keeps what ran)")
    return [f"if [ -e {merged_path(job)} ]; then echo {said} >&2; exit 2; fi"]


def marker_lines(markers: str, token: str) -> list[str]:
    """The shard's marker, "STATE CODE TOKEN", from $code and $shard (and $INDEX_FAILURES, the
    downward API's)."""
    return [
        "failures=${INDEX_FAILURES:-}",
        f'case "$failures" in ""|*[!0-9]*) failures={RETRIES};; esac',
        'if [ "$code" -eq 0 ]; then state=done',
        f'elif [ "$failures" -ge {RETRIES} ]; then state=failed',
        'else state=""; fi',
        f"m={markers}",
        'if [ -n "$state" ]; then',
        f'  mkdir -p "$m" && echo "$state $code {token}" > "$m/.$shard.tmp" && mv "$m/.$shard.tmp" "$m/$shard"',
        "fi",
    ]


def shards_job(job: K8sJob) -> dict[str, Any]:
    vol, mount = volume(job)
    container = {
        "name": "shard", "image": job.image, "command": ["/bin/sh", "-c", shard_command(job)],
        "resources": {"limits": {f"nvidia.com/mig-{job.mig}" if job.mig else "nvidia.com/gpu": job.gpus}},
        "volumeMounts": [mount, {"name": "shm", "mountPath": "/dev/shm"}],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "INDEX_FAILURES",
                 "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{FAILURE_COUNT}']"}}}],
    }
    # /dev/shm: the runtime's default is 64 MB, too small for PyTorch's DataLoader workers. A
    # memory-backed emptyDir (allowed by the restricted profile) counts against the pod's memory.
    shm = {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": job.shm}}
    spec: dict[str, Any] = {
        "completionMode": "Indexed", "completions": job.plan.shards, "parallelism": job.plan.shards,
        "backoffLimitPerIndex": RETRIES,  # a shard that failed is retried once; the others go on
        # A retry starts only once the pod it replaces has ended (phase Failed), never beside it:
        # by default the controller replaces a pod as soon as it is terminating, so two pods of one
        # index would write the same plans and markers at once
        # (https://kubernetes.io/blog/2025/09/05/kubernetes-v1-34-pod-replacement-policy-for-jobs-goes-ga;
        # beta and on by default since 1.29, KEP-3939).
        "podReplacementPolicy": "Failed",
    }
    if job.deadline is not None:
        spec["activeDeadlineSeconds"] = job.deadline
    spec["template"] = {"metadata": {"labels": metadata(job, "shards")["labels"]},
                        "spec": {**pod_spec(job, selector=True),
                                 "containers": [hardened(container)], "volumes": [vol, dict(TMP_VOLUME), shm]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(job, "shards"), "spec": spec}


def merge_command(job: K8sJob) -> str:
    """The report files, then this manifest's `merged-TOKEN` marker once every one was written (a
    merge that failed half way may be applied again), then the text report, whose status is the Job's."""
    *writes, text = merge_commands(job.convmatrix, job.plan.out)
    return "\n".join(["set -u", "written=1", *(f"{w} || written=0" for w in writes),
                      f'if [ "$written" = 1 ]; then : > {merged_path(job)}; fi', text])


def wait_command(job: K8sJob) -> str:
    """Waits until every shard has ended for good (its marker) or the merge deadline passed, says
    which shards did not finish and which failed, and writes a stand-in plan for every shard that
    left none (it never started, or failed before planning), so that the report shows its cells
    NOT RUN and exits 1. Only markers with this manifest's token count. Exits 0 whatever happened
    to the shards, so that the report is written; 2 when this manifest's merge already ran
    (refuse_merged_lines) or the image cannot unpack the stand-ins (no base64 or gzip)."""
    n = job.plan.shards
    out = PurePosixPath(job.plan.out)
    markers, plans = shlex.quote(str(out / MARKERS)), shlex.quote(str(out / "plans"))
    lines = [
        "set -u",
        *refuse_merged_lines(job),
        # Checked before the wait, not after hours of it: a stand-in written without them is empty.
        "for tool in base64 gzip; do",
        "  command -v \"$tool\" >/dev/null 2>&1 || { echo \"convmatrix: the image has no $tool, which the merge "
        "needs to unpack the stand-in plans: add it to the image\" >&2; exit 2; }",
        "done",
        # Stand-ins an earlier merge wrote into this --out (one that ran before a shard planned, or
        # another manifest's, `-- --resume`) are the merges' own and are written again below for
        # whatever shard still left no plan; kept, they would go on expecting a shard's cells that
        # since ran, on a GPU key ("unknown") that no result can ever have.
        f"rm -f {plans}/k8s-shard-*-no-plan-*.json",
        f"end=$(( $(date +%s) + {job.merge_deadline} ))",
        "while :; do",
        '  missing=""; failed=""; i=1',
        f"  while [ \"$i\" -le {n} ]; do",
        # "STATE CODE TOKEN": another manifest's marker (another token) is no marker of this run.
        f'    marker=$(cat {markers}/"$i" 2>/dev/null) || marker=""',
        f'    case "$marker" in *" {job.token}") ;; *) marker="";; esac',
        '    if [ -z "$marker" ]; then missing="$missing $i"',
        '    elif [ "${marker%% *}" = failed ]; then failed="$failed $i"; fi',
        "    i=$((i + 1))",
        "  done",
        "  now=$(date +%s)",
        '  if [ -z "$missing" ] || [ "$now" -ge "$end" ]; then break; fi',
        "  left=$((end - now))",
        f"  sleep $((left < {POLL_S} ? left : {POLL_S}))",
        "done",
        f'[ -z "$missing" ] || echo "convmatrix: shard(s)$missing of {n} did not finish within the merge deadline '
        f'({job.merge_deadline}s)"',
        f'[ -z "$failed" ] || echo "convmatrix: shard(s)$failed of {n} failed on their last attempt"',
        # The GPU keys the shards that ran planned for: the missing shards' cells are NOT RUN on them.
        f"keys=$(cat {plans}/*.json 2>/dev/null | grep -o '\"gpu_key\": \"[a-z0-9][a-z0-9.-]*\"' "
        "| sed 's/.*: \"//; s/\"$//' | sort -u)",
        f'[ -n "$keys" ] || keys={UNKNOWN_GPU}',
        f"mkdir -p {plans}",
        "stand_in() {",
        f"  if grep -qsF \"\\\"shard\\\": [$1, {n}]\" {plans}/*.json; then return 0; fi",
        f'  echo "convmatrix: shard $1 of {n} left no plan: its cells are reported NOT RUN"',
        "  for key in $keys; do",
        # Written whole or not at all: an empty or cut plan would stop the report ("not JSON").
        f'    target={plans}/k8s-shard-"$1"-of-{n}-no-plan-"$key".json',
        '    if plan=$(printf "%s" "$2" | base64 -d | gzip -dc) && [ -n "$plan" ]; then',
        f'      printf "%s\\n" "$plan" | sed "s/{GPU_KEY_SLOT}/$key/g" > "$target.tmp" && mv "$target.tmp" "$target"',
        f'    else echo "convmatrix: shard $1 of {n}: its stand-in plan could not be unpacked" >&2; fi',
        "  done",
        "}",
        *(f"stand_in {i} {shlex.quote(packed(text))}" for i, text in enumerate(job.stand_ins, start=1)),
        "exit 0",
    ]
    return "\n".join(lines)


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
                         "spec": {**pod_spec(job, selector=False),
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
