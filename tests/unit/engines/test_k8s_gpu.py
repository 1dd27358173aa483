"""Issue 26, item 2: what a GPU cluster needs of `convmatrix k8s` (tolerations, a GPU-product node
selector, /dev/shm, a deadline), shards that leave their marker only once they ended for good,
and a merge that waits for them up to its own deadline, then reports the shards that never
finished as NOT RUN. The generated shell runs here for real, with stand-ins for convmatrix run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import testkit
from convmatrix import matrix
from convmatrix.cli.main import main
from convmatrix.engines import ShardPlan, k8s
from convmatrix.results import plans

MATRIX = "matrix/nightly.toml"
KUBERNETES = "1.30.0"
FOUR = """name = "five"
[container]
flavour = "system"
[axes]
lane = ["container"]
base = ["nvcr.io/nvidia/pytorch:24.10-py3", "nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io/nvidia/pytorch:25.02-py3",
        "nvcr.io/nvidia/pytorch:25.03-py3", "nvcr.io/nvidia/pytorch:25.04-py3"]
[control]
base = "nvcr.io/nvidia/pytorch:24.10-py3"
"""
CONTROL = "container-nvcr.io-nvidia-pytorch-24.10-py3"
TOKEN = "5eed0f1ce0de"  # a manifest's own (convmatrix k8s draws one each time)
SHARD_1 = ["container-nvcr.io-nvidia-pytorch-25.01-py3", "container-nvcr.io-nvidia-pytorch-25.03-py3"]
SHARD_2 = ["container-nvcr.io-nvidia-pytorch-25.02-py3", "container-nvcr.io-nvidia-pytorch-25.04-py3"]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(testkit.REPO)


def k8s_cli(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["k8s", "-m", MATRIX, "--shards", "3", "--image", "registry.local/convmatrix:1", "--claim", "results",
                 "--name", "nightly", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


GPU_OPTIONS = ("--toleration", "nvidia.com/gpu:NoSchedule", "--toleration", "dedicated=ml:NoExecute",
               "--node-selector", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3", "--shm-size", "16Gi",
               "--deadline", "7200", "--merge-deadline", "9000")


def gpu_docs(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    code, out, err = k8s_cli(capsys, *GPU_OPTIONS)
    assert code == 0, err
    return list(yaml.safe_load_all(out))


def test_the_gpu_options_reach_the_manifests_which_pass_the_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    shards, merge = gpu_docs(capsys)
    for doc in (shards, merge):
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    assert shards["spec"]["activeDeadlineSeconds"] == 7200 and shards["spec"]["backoffLimitPerIndex"] == 1
    assert "activeDeadlineSeconds" not in merge["spec"]  # the merge ends by its own deadline, then reports
    pod, merge_pod = shards["spec"]["template"]["spec"], merge["spec"]["template"]["spec"]
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                   {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"}]
    assert pod["tolerations"] == tolerations and merge_pod["tolerations"] == tolerations
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert "nodeSelector" not in merge_pod  # the merge needs no GPU node
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    (container,) = pod["containers"]
    assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "INDEX_FAILURES", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-index-failure-count']"}}} in container["env"]
    (wait,) = merge_pod["initContainers"]
    assert "+ 9000 ))" in wait["command"][2]
    assert "serviceAccountName" not in pod and "serviceAccountName" not in merge_pod  # no API access asked


def test_the_defaults_give_an_8gi_shm_no_deadline_and_a_bounded_merge(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = k8s_cli(capsys)
    shards, merge = yaml.safe_load_all(out)
    assert "activeDeadlineSeconds" not in shards["spec"] and "tolerations" not in shards["spec"]["template"]["spec"]
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in shards["spec"]["template"]["spec"][
        "volumes"]
    assert f"+ {k8s.DEFAULT_MERGE_DEADLINE_S} ))" in merge["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
    code, out, _ = k8s_cli(capsys, "--deadline", "600")
    assert code == 0 and f"+ {600 + k8s.MERGE_SLACK_S} ))" in out  # the shards' deadline, and time to report


def test_no_pod_gets_an_api_token_and_a_retry_never_runs_beside_the_pod_it_replaces(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Seen (a review): every pod got the namespace's service-account token, which nothing uses, and
    the default podReplacementPolicy (TerminatingOrFailed) starts a shard's retry while the pod it
    replaces is still terminating, both writing the same plans and markers."""
    shards, merge = gpu_docs(capsys)
    for doc in (shards, merge):
        assert doc["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert shards["spec"]["podReplacementPolicy"] == "Failed"
    assert "podReplacementPolicy" not in merge["spec"]  # no retry: its status is the verdict
    for doc in (shards, merge):
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_mount_may_be_any_folder_of_its_own() -> None:
    found = [k8s.check_mount(m) for m in ("/results", "/mnt/results", "//data/r", "/var/results", "/tmpdata",
                                          "/tmp/results", "/optional", "/run2")]
    assert found == ["/results", "/mnt/results", "/data/r", "/var/results", "/tmpdata", "/tmp/results", "/optional",
                     "/run2"]


def test_every_pod_stays_in_the_restricted_profile_with_the_gpu_options(capsys: pytest.CaptureFixture[str]) -> None:
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
               "secret"}
    for doc in gpu_docs(capsys):
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        for volume in pod["volumes"]:
            assert set(volume) - {"name"} <= allowed
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["readOnlyRootFilesystem"] is True and not sc.get("privileged", False)


@pytest.mark.parametrize(("args", "says"), [
    (["--toleration", "nvidia.com/gpu"], "--toleration 'nvidia.com/gpu': give KEY[=VALUE]:EFFECT"),
    (["--toleration", "nvidia.com/gpu:NoSchedul"], "EFFECT one of NoSchedule, PreferNoSchedule, NoExecute"),
    (["--toleration", ":NoSchedule"], "the key's name '' is not a label name"),
    (["--toleration", "Bad_Prefix/gpu:NoSchedule"], "the key's prefix 'Bad_Prefix' is not a DNS subdomain"),
    (["--toleration", "gpu=has space:NoSchedule"], "the value 'has space' is not a label value"),
    (["--toleration", "gpu\n:NoSchedule"], "control character"),
    (["--node-selector", "nvidia.com/gpu.product"], "give KEY=VALUE"),
    (["--node-selector", "nvidia.com/gpu.product=-H100"], "the value '-H100' is not a label value"),
    (["--node-selector", "nvidia.com/" + "x" * 64 + "=a"], "is not a label name"),
    (["--node-selector", "a=b\r"], "control character"),
    (["--shm-size", "lots"], "--shm-size 'lots': give a size above zero"),
    (["--shm-size", "0Gi"], "--shm-size '0Gi': give a size above zero"),
    (["--shm-size", "8GB"], "--shm-size '8GB'"),
    (["--shm-size", "8Gi\n"], "control character"),
    (["--deadline", "0"], "--deadline '0': give a whole number of seconds, 1 to 9999999999"),
    (["--deadline", "99999999999"], "1 to 9999999999"),  # it said "1 or more" of a number above 1
    (["--deadline", "1h"], "--deadline '1h'"),
    (["--deadline", "-5"], "--deadline '-5'"),
    (["--merge-deadline", "soon"], "--merge-deadline 'soon'"),
    (["--merge-deadline", "60\u2028"], "control character"),
    # Seen: each went into the manifests (exit 0), which the API server or the kubelet refuses.
    (["--namespace", "UPPER ns"], "--namespace 'UPPER ns': a namespace is lower-case letters"),
    (["--namespace", "n" * 64], "at most 63 characters"),
    (["--claim", "Not A Claim/.."], "--claim 'Not A Claim/..': a PersistentVolumeClaim's name"),
    (["--image", ""], "--image '': give an image reference"),
    (["--image", "registry.local/convmatrix:1 --privileged"], "give an image reference"),
    # Seen: the second value silently replaced the first.
    (["--node-selector", "a=1", "--node-selector", "a=2"], "--node-selector 'a=2': a is already '1'"),
    # Seen (a review): each printed manifests (exit 0) that the API server refuses (two volumes on
    # /tmp or /dev/shm: "must be unique") or whose claim hides the shell and the checkout (/).
    (["--mount", "/tmp"], "--mount /tmp: the claim cannot be mounted on, over or in /tmp"),
    (["--mount", "/dev/shm", "--out", "/dev/shm/r"], "on, over or in /dev"),
    (["--mount", "/", "--out", "/r"], "--mount /: the claim cannot be mounted over the image's root"),
    (["--mount", "//", "--out", "//r"], "--mount /: the claim cannot be mounted over the image's root"),
    (["--mount", "/opt"], "on, over or in /opt"),  # this project's cell images keep their python there
    (["--mount", "/var/run"], "on, over or in /var/run"),  # a link to /run in Debian and Ubuntu images
    (["--mount", "//tmp"], "--mount /tmp: the claim cannot be mounted on, over or in /tmp"),
    (["--mount", "/proc"], "on, over or in /proc"),
    (["--mount", "/usr/local"], "on, over or in /usr"),  # python:3.x images keep the interpreter there
    # Seen: accepted, so the merge reported shards NOT RUN an hour before they could be done.
    (["--deadline", "7200", "--merge-deadline", "60"], "--merge-deadline 60: shorter than --deadline 7200"),
])
def test_a_bad_gpu_option_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], args: list[str],
                                                 says: str) -> None:
    code, out, err = k8s_cli(capsys, *args)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and says in err, err


# The shard's marker, with its manifest's token: success -> "done 0 TOKEN"; a failure on the last allowed attempt (the index failure
# count the Job controller annotates the pod with reaching backoffLimitPerIndex) -> "failed CODE";
# a failure with a retry still to come -> nothing, so the merge waits for the retry.
@pytest.mark.parametrize(("code", "failures", "marker"), [
    (0, "0", "done 0"), (0, "1", "done 0"), (4, "1", "failed 4"), (1, "2", "failed 1"), (4, "0", None),
    (4, "", "failed 4"),  # no annotation (no backoffLimitPerIndex): every attempt is the last
])
def test_a_shard_leaves_its_marker_only_when_it_ended_for_good(tmp_path: Path, code: int, failures: str,
                                                                marker: str | None) -> None:
    out = tmp_path / "results" / "run"
    job = k8s.K8sJob(plan=ShardPlan(matrix="m.toml", out=str(out), shards=3, run_args=()), name="x", image="i",
                     claim="c", convmatrix=("sh", "-c", 'exit "$STUB_CODE"', "stub"), token=TOKEN)
    script = k8s.shard_command(job)
    done = subprocess.run(["/bin/sh", "-c", script], env={"JOB_COMPLETION_INDEX": "1", "NODE_NAME": "gpu-1",
                                                         "INDEX_FAILURES": failures, "STUB_CODE": str(code),
                                                         "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == code  # the pod's status stays the run's: Kubernetes retries on it
    path = out / k8s.MARKERS / "2"
    assert (path.read_text().strip() if path.exists() else None) == (f"{marker} {TOKEN}" if marker else None)
    left = sorted(p.name for p in (out / k8s.MARKERS).iterdir()) if (out / k8s.MARKERS).exists() else []
    assert left == (["2"] if marker else [])  # no temporary file left behind


# A stand-in run that says when it started, and on SIGTERM records that it heard it and exits 143,
# as `convmatrix run` does (docs/contracts.md, Exit codes).
TERM_STUB = 'trap "echo heard > \\"$STUB_SEEN\\"; exit 143" TERM; : > "$STUB_SEEN.started"; while :; do sleep 0.05; done'


@pytest.mark.parametrize(("failures", "marker"), [("1", "failed 143"), ("0", None)])
def test_a_terminated_shard_passes_the_term_to_its_run_and_leaves_its_marker_on_its_last_attempt(
        tmp_path: Path, failures: str, marker: str | None) -> None:
    """Seen (a review): the shard's shell, PID 1 of its container, ran the run in the foreground and
    set no trap, so an eviction's or the Job deadline's SIGTERM reached neither: the grace period
    ended in SIGKILL, the run recorded nothing as interrupted, and a last attempt left no marker (the
    merge then waited out its whole deadline). The run now hears the TERM; the marker follows."""
    out = tmp_path / "results" / "run"
    seen = tmp_path / "seen"
    job = k8s.K8sJob(plan=ShardPlan(matrix="m.toml", out=str(out), shards=2, run_args=()), name="x", image="i",
                     claim="c", convmatrix=("sh", "-c", TERM_STUB, "stub"), token=TOKEN)
    shell = subprocess.Popen(["/bin/sh", "-c", k8s.shard_command(job)], start_new_session=True,
                             env={"JOB_COMPLETION_INDEX": "0", "NODE_NAME": "gpu-1", "INDEX_FAILURES": failures,
                                  "STUB_SEEN": str(seen), "PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 20
        while not Path(f"{seen}.started").exists():
            assert time.monotonic() < deadline and shell.poll() is None, "the stand-in run never started"
            time.sleep(0.02)
        shell.terminate()  # the kubelet's SIGTERM, to the container's main process
        assert shell.wait(timeout=20) == 143  # the run's status, not the shell's death by signal
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)  # the stand-in too, if the shell left it running
    assert seen.read_text().strip() == "heard"
    path = out / k8s.MARKERS / "1"
    assert (path.read_text().strip() if path.exists() else None) == (f"{marker} {TOKEN}" if marker else None)


def test_the_shards_trap_is_set_before_anything_else_runs_and_an_early_term_reaches_the_run() -> None:
    """Seen (a review): the trap came after the run started, so a SIGTERM sent as the pod started
    reached the handler-less PID 1 and was dropped (15 times in 15, dash, busybox and bash): the run
    went on and no marker came. The trap is now the script's first command after `set -u`, and a
    TERM it kept before the run started is passed on as soon as the run has a pid."""
    job = k8s.K8sJob(plan=ShardPlan(matrix="m.toml", out="/results/r", shards=2, run_args=()), name="x", image="i",
                     claim="c", token=TOKEN)
    lines = k8s.shard_command(job).splitlines()
    code = [line for line in lines if not line.lstrip().startswith("#")]
    assert code[:3] == ["set -u", "term=''; child=''",
                        """trap 'term=1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null' TERM"""]
    started = next(i for i, line in enumerate(code) if line.endswith(" &"))
    assert code[started + 1:started + 3] == ["child=$!", '[ -z "$term" ] || kill -TERM "$child" 2>/dev/null']


def five_cells(tmp_path: Path, deadline: int, *, out: Path) -> k8s.K8sJob:
    path = tmp_path / "five.toml"
    path.write_text(FOUR)
    loaded = matrix.load(path)
    return k8s.K8sJob(plan=ShardPlan(matrix=str(path), out=str(out), shards=2, run_args=()), name="x", image="i",
                      claim="c", convmatrix=(sys.executable, "-m", "convmatrix"), merge_deadline=deadline,
                      stand_ins=k8s.stand_ins(loaded, 2, str(path)), token=TOKEN)


def shard_one_ran(out: Path) -> None:
    """Shard 1 of 2 as `convmatrix run --shard 1/2` leaves it on host testhost: its plan (the control
    and its two cells on the CPU), their results, and its marker."""
    cells = [CONTROL, *SHARD_1]
    plans.write(out, host=testkit.HOST, selection={"matrix": "five.toml", "lanes": [], "cells": [], "shard": [1, 2]},
                fleet_gpus=[], expected=[plans.Expected(cell=c, gpu_key="cpu", host=testkit.HOST, lane="container")
                                         for c in cells])
    for cell in cells:
        testkit.write_result(out, cell, [testkit.record("conv1d-fp32-k3-p1")], host=testkit.HOST,
                             cell={"control": cell == CONTROL, "lane": "container", "ended": "2026-12-02T00:01:00Z"})
    (out / k8s.MARKERS).mkdir()
    (out / k8s.MARKERS / "1").write_text(f"done 0 {TOKEN}\n")


def run_sh(script: str, cwd: Path, timeout: float, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False, env={"PATH": path, "HOME": str(cwd)})


WAIT_TOOLS = ("base64", "cat", "date", "grep", "mkdir", "mv", "sed", "sleep", "sort")  # the wait's, but gzip


def image_tools(tmp_path: Path, fakes: dict[str, str] | None = None) -> str:
    """A PATH of an image that has WAIT_TOOLS, and these stand-ins (name: script)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in WAIT_TOOLS:
        (tools / name).symlink_to(shutil.which(name) or f"/usr/bin/{name}")
    for name, script in (fakes or {}).items():
        (tools / name).write_text(script)
        (tools / name).chmod(0o755)
    return str(tools)


def test_the_merge_ends_by_its_deadline_and_reports_a_shard_that_never_ran_as_not_run(tmp_path: Path) -> None:
    out = tmp_path / "results" / "run"
    out.mkdir(parents=True)
    shard_one_ran(out)
    job = five_cells(tmp_path, 2, out=out)
    started = time.monotonic()
    wait = run_sh(k8s.wait_command(job), tmp_path, timeout=30)
    assert wait.returncode == 0 and time.monotonic() - started < 10  # 2 s, then a poll at most
    assert "convmatrix: shard(s) 2 of 2 did not finish within the merge deadline (2s)" in wait.stdout
    assert "convmatrix: shard 2 of 2 left no plan: its cells are reported NOT RUN" in wait.stdout
    assert "shard 1 of 2 left no plan" not in wait.stdout
    stand_in = out / "plans" / "k8s-shard-2-of-2-no-plan-cpu.json"  # on the GPU key shard 1 planned
    assert [e["cell"] for e in json.loads(stand_in.read_text())["expected"]] == [CONTROL, *SHARD_2]

    merge = run_sh(k8s.merge_command(job), testkit.REPO, timeout=120)
    assert merge.returncode == 1, merge.stderr  # a planned cell that did not run fails the report
    report = json.loads((out / "report.json").read_text())
    verdicts = {c["cell"]: c["verdict"] for c in report["cells"]}
    assert verdicts == {CONTROL: "control", **dict.fromkeys(SHARD_1, "ok"), **dict.fromkeys(SHARD_2, "not-run")}
    assert all(stand_in.name in c["not_run"] for c in report["cells"] if c["cell"] in SHARD_2)
    assert "NOT RUN" in merge.stdout


def test_the_merge_goes_on_at_once_when_every_shard_ended_and_names_the_failed_ones(tmp_path: Path) -> None:
    out = tmp_path / "results" / "run"
    out.mkdir(parents=True)
    shard_one_ran(out)
    (out / k8s.MARKERS / "2").write_text(f"failed 4 {TOKEN}\n")  # exit 4 before it planned anything (no GPU found)
    job = five_cells(tmp_path, 3600, out=out)
    wait = run_sh(k8s.wait_command(job), tmp_path, timeout=30)
    assert wait.returncode == 0
    assert "did not finish" not in wait.stdout
    assert "convmatrix: shard(s) 2 of 2 failed on their last attempt" in wait.stdout
    assert (out / "plans" / "k8s-shard-2-of-2-no-plan-cpu.json").exists()


def test_without_any_plan_the_stand_ins_name_an_unknown_gpu(tmp_path: Path) -> None:
    out = tmp_path / "results" / "run"
    job = five_cells(tmp_path, 1, out=out)
    wait = run_sh(k8s.wait_command(job), tmp_path, timeout=30)
    assert "shard(s) 1 2 of 2 did not finish" in wait.stdout
    assert sorted(p.name for p in (out / "plans").iterdir()) == [
        "k8s-shard-1-of-2-no-plan-unknown.json", "k8s-shard-2-of-2-no-plan-unknown.json"]
    merge = run_sh(k8s.merge_command(job), testkit.REPO, timeout=120)
    assert merge.returncode != 0
    report = json.loads((out / "report.json").read_text())
    assert {c["verdict"] for c in report["cells"]} == {"not-run"}


def test_a_merge_again_drops_the_stand_ins_of_a_shard_that_since_planned(tmp_path: Path) -> None:
    """Seen (a review): a merge that ran before any shard planned left stand-ins for the GPU key
    "unknown"; once shard 1 ran and the merge was applied again, its old stand-in still expected
    shard 1's cells on "unknown", which no result can have, so they stayed NOT RUN for good."""
    out = tmp_path / "results" / "run"
    job = five_cells(tmp_path, 1, out=out)
    assert run_sh(k8s.wait_command(job), tmp_path, timeout=30).returncode == 0  # nothing planned yet
    shard_one_ran(out)
    wait = run_sh(k8s.wait_command(job), tmp_path, timeout=30)
    assert wait.returncode == 0, wait.stderr
    left = sorted(p.name for p in (out / "plans").iterdir() if "no-plan" in p.name)
    assert left == ["k8s-shard-2-of-2-no-plan-cpu.json"]  # shard 2's, on the key shard 1 planned for
    merge = run_sh(k8s.merge_command(job), testkit.REPO, timeout=120)
    report = json.loads((out / "report.json").read_text())
    assert merge.returncode == 1
    verdicts = {c["cell"]: c["verdict"] for c in report["cells"]}
    assert all(v != "not-run" for cell, v in verdicts.items() if cell in (CONTROL, *SHARD_1)), verdicts
    assert {verdicts[cell] for cell in SHARD_2} == {"not-run"}
    assert "unknown" not in json.dumps(report["cells"])


def test_the_same_node_selector_twice_is_one_label() -> None:
    assert k8s.node_selector(["a=1", "b=2", "a=1"]) == (("a", "1"), ("b", "2"))


BIG = """name = "big"
[axes]
lane = ["baremetal"]
torch = ["2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1"]
cuda = ["cu118", "cu124", "cu126"]
cudnn = ["bundled", "9.5.1.17"]
python = ["3.10", "3.11", "3.12", "3.13"]
knobs = ["default", "pad=8", "benchmark=on", "channels_last=on"]
"""


def test_a_matrix_of_hundreds_of_cells_gives_a_merge_that_linux_can_start(tmp_path: Path) -> None:
    """Seen: 480 requested cells, 4 shards: the wait script was 140 KB, one argument over Linux's
    128 KiB, so the init container could not start ("Argument list too long") and no report came.
    Here the script is exec'd for real, as the kubelet would."""
    path = tmp_path / "big.toml"
    path.write_text(BIG)
    loaded = matrix.load(path)
    assert len(loaded.cells) > 250
    out = tmp_path / "results" / "run"
    job = k8s.K8sJob(plan=ShardPlan(matrix=str(path), out=str(out), shards=4, run_args=()), name="x", image="i",
                     claim="c", merge_deadline=1, stand_ins=k8s.stand_ins(loaded, 4, str(path)))
    (merge,) = (d for d in k8s.manifests(job) if d["metadata"]["name"] == "x-merge")
    script = merge["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
    assert len(script.encode()) < k8s.MAX_ARGUMENT
    wait = run_sh(script, tmp_path, timeout=30)
    assert wait.returncode == 0, wait.stderr
    written = sorted((out / "plans").iterdir())
    assert [p.name for p in written] == [f"k8s-shard-{i}-of-4-no-plan-unknown.json" for i in range(1, 5)]
    expected = [e["cell"] for p in written for e in json.loads(p.read_text())["expected"]]
    control = loaded.control.id if loaded.control else None
    assert sorted(set(expected)) == sorted(c.id for c in loaded.cells)  # every cell, the control in each shard
    assert len(expected) == len(loaded.cells) + 3 * (control is not None)


def test_a_merge_script_linux_cannot_start_is_refused_in_one_line(capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(k8s, "MAX_ARGUMENT", 2000)  # the nightly's wait script, its stand-ins packed, is more
    code, out, err = k8s_cli(capsys)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "nightly-merge: the wait-for-shards container's script would be" in err


def test_another_manifests_markers_are_no_markers_of_this_run(tmp_path: Path) -> None:
    """Seen: markers an earlier run left in OUT let the merge go on at once, on old results, while
    the new shards still ran. A new manifest into the same OUT (`-- --resume`) counts only its own."""
    out = tmp_path / "results" / "run"
    out.mkdir(parents=True)
    shard_one_ran(out)
    (out / k8s.MARKERS / "2").write_text("done 0 0ld0ld0ld0ld\n")  # the earlier manifest's
    wait = run_sh(k8s.wait_command(five_cells(tmp_path, 2, out=out)), tmp_path, timeout=30)
    assert wait.returncode == 0
    assert "convmatrix: shard(s) 2 of 2 did not finish within the merge deadline (2s)" in wait.stdout


def test_the_same_manifest_applied_after_its_merge_is_refused_and_a_half_merge_is_not(tmp_path: Path) -> None:
    """The same YAML applied again (its Jobs deleted): its --out and token are the earlier run's.
    Once that run's merge wrote every report file, its shards and merge refuse, saying why; a
    merge that stopped half way may run again."""
    out = tmp_path / "results" / "run"
    out.mkdir(parents=True)
    shard_one_ran(out)
    (out / k8s.MARKERS / "2").write_text(f"failed 4 {TOKEN}\n")
    job = five_cells(tmp_path, 3600, out=out)
    half = replace(job, convmatrix=("sh", "-c", 'case "$*" in *html*) exit 1;; esac; exec "$@"', "half",
                                    sys.executable, "-m", "convmatrix"))
    assert run_sh(k8s.wait_command(job), tmp_path, timeout=30).returncode == 0
    run_sh(k8s.merge_command(half), testkit.REPO, timeout=120)
    assert (out / "report.json").exists() and not (out / "report.html").exists()  # the html write failed ...
    assert run_sh(k8s.wait_command(job), tmp_path, timeout=30).returncode == 0  # ... so it may run again
    merge = run_sh(k8s.merge_command(job), testkit.REPO, timeout=120)
    assert merge.returncode == 1 and (out / "report.html").exists()  # cells NOT RUN: a red report, written

    again = "this manifest's run already ended, its merge reported on"
    wait = run_sh(k8s.wait_command(job), tmp_path, timeout=30)
    assert wait.returncode == 2 and again in wait.stderr and len(wait.stderr.splitlines()) == 1
    shard = subprocess.run(["/bin/sh", "-c", k8s.shard_command(job)], env={"JOB_COMPLETION_INDEX": "0",
                                                                          "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=30, check=False)
    assert shard.returncode == 2 and again in shard.stderr
    assert (out / k8s.MARKERS / "1").read_text() == f"done 0 {TOKEN}\n"  # nothing of the earlier run touched
    # A new manifest (another token) into the same OUT, e.g. with -- --resume, is a new run.
    assert run_sh(k8s.wait_command(replace(job, token="f00d", merge_deadline=1)), tmp_path, timeout=30).returncode == 0


def test_an_image_without_gzip_stops_the_merge_before_it_waits(tmp_path: Path) -> None:
    """Seen: without gzip the stand-ins were written empty, exit 0, and the report then stopped on
    them ("not JSON"): no report at all."""
    job = five_cells(tmp_path, 3600, out=tmp_path / "results" / "run")
    started = time.monotonic()
    wait = run_sh(k8s.wait_command(job), tmp_path, timeout=30, path=image_tools(tmp_path))
    assert wait.returncode == 2 and time.monotonic() - started < 10
    assert wait.stderr.strip() == ("convmatrix: the image has no gzip, which the merge needs to unpack the stand-in "
                                   "plans: add it to the image")


def test_a_stand_in_that_cannot_be_unpacked_is_not_written(tmp_path: Path) -> None:
    out = tmp_path / "results" / "run"
    gzip_fails = image_tools(tmp_path, {"gzip": "#!/bin/sh\nexit 1\n"})  # a corrupt stream, say
    wait = run_sh(k8s.wait_command(five_cells(tmp_path, 1, out=out)), tmp_path, timeout=30, path=gzip_fails)
    assert wait.returncode == 0
    assert "convmatrix: shard 1 of 2: its stand-in plan could not be unpacked" in wait.stderr
    assert list((out / "plans").iterdir()) == []  # no empty plan for the report to stop on


def test_container_cells_are_said_to_be_not_run_in_pods(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = k8s_cli(capsys)  # the nightly: container cells beside baremetal ones
    assert code == 0
    assert len(err.splitlines()) == 1 and "container-lane cell(s) of matrix/nightly.toml" in err
    assert "will be reported NOT RUN: a pod has no container engine" in err
    assert main(["k8s", "-m", "matrix/examples/fix-proof.toml", "--shards", "2", "--image", "i", "--claim", "c"]) == 0
    assert capsys.readouterr().err == ""
