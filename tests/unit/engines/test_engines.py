"""`convmatrix slurm` and `convmatrix k8s` without an engine: the generated scripts and manifests,
dry-run output, argument errors, and sbatch missing or failing (a stand-in on PATH). The real
cluster run is tests/integration/test_slurm_runs.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import testkit
from convmatrix.cli.main import main
from convmatrix.engines import ShardPlan, k8s, slurm
from convmatrix.run import options

MATRIX = "matrix/nightly.toml"  # 51 cells
PLAN = ShardPlan(matrix="/m.toml", out="/shared/run", shards=3, run_args=("--resume", "--", "-k", "conv1d and fp16"))
KUBERNETES = "1.30.0"  # backoffLimitPerIndex is in batch/v1 from 1.29 (beta, on by default)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(autouse=True)
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(testkit.REPO)


def test_shard_script_runs_one_shard_per_array_task() -> None:
    job = slurm.SlurmJob(plan=PLAN, convmatrix=("/venv/bin/python", "-m", "convmatrix"), workdir=Path("/repo"),
                         partition="gpu", gres="gpu:1", time="02:00:00")
    script = slurm.shard_script(job)
    assert script.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --array=1-3", "#SBATCH --partition=gpu", "#SBATCH --gres=gpu:1", "#SBATCH --time=02:00:00",
                 "#SBATCH --chdir=/repo", "#SBATCH --output=/shared/run/slurm/shard-%a.log"):
        assert line in script.splitlines()
    assert ('exec /venv/bin/python -m convmatrix run -m /m.toml --out /shared/run --shard "${SLURM_ARRAY_TASK_ID}/3" '
            "--resume -- -k 'conv1d and fp16'") in script


def test_a_constraint_goes_to_the_shard_tasks_quoted_and_not_to_the_merge() -> None:
    job = slurm.SlurmJob(plan=PLAN, convmatrix=("convmatrix",), workdir=Path("/repo"), constraint="h100&ib; rm -rf /")
    assert "#SBATCH '--constraint=h100&ib; rm -rf /'" in slurm.shard_script(job).splitlines()
    assert "constraint" not in slurm.merge_script(job)


def test_merge_script_writes_every_report_file_and_exits_with_the_verdict() -> None:
    job = slurm.SlurmJob(plan=PLAN, convmatrix=("convmatrix",), workdir=Path("/repo"), gres="gpu:1")
    script = slurm.merge_script(job)
    assert "--gres" not in script and "--array" not in script  # the merge needs no GPU
    for name in ("report.json", "report.md", "report.html", "junit.xml"):
        assert f"-o /shared/run/{name} --fail-on never" in script
    assert script.splitlines()[-1] == "exec convmatrix report /shared/run --format text --color never"


def test_slurm_dry_run_prints_both_scripts_and_submits_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = cli(capsys, "slurm", "-m", MATRIX, "--shards", "4", "--out", str(tmp_path / "run"), "--gres",
                       "gpu:1", "--dry-run", "--", "--", "-k", "conv2d")
    assert code == 0
    assert "#SBATCH --array=1-4" in out and f"{tmp_path}/run/slurm/merge.sbatch" in out
    assert '--shard "${SLURM_ARRAY_TASK_ID}/4" -- -k conv2d' in out
    assert f"-m {Path(MATRIX).resolve()}" in out  # the tasks get absolute paths
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("args", "says"), [
    (["--shards", "0"], "--shards 0: give at least 1"),
    (["--shards", "52"], "--shards 52: the matrix has only 51 cell(s)"),
    (["--shards", "2", "--", "--shard", "1/2"], "--shard is set by the engine"),
    (["--shards", "2", "--", "--out", "x"], "--out is set by the engine"),
    # Issue 32, item 5: abbreviations the run's parser expands, and the suite options the harness sets.
    (["--shards", "2", "--", "--ou", "x"], "--ou (argparse reads it as --out) is set by the engine"),
    (["--shards", "2", "--", "--sha", "1/1"], "--sha (argparse reads it as --shard) is set by the engine"),
    (["--shards", "2", "--", "--sh=1/1"], "--sh (argparse reads it as --shard) is set by the engine"),
    (["--shards", "2", "--", "--", "--results-dir", "x"], "suite options: --results-dir is set by convmatrix"),
    (["--shards", "2", "--", "--", "--results-d=x"], "--results-d (an abbreviation of --results-dir)"),
    (["--shards", "2", "--", "--", "--cell-id", "x"], "suite options: --cell-id is set by convmatrix"),
    (["--shards", "2", "--", "--bogus"], "run options: unknown --bogus"),
    (["--shards", "2", "--", "--gpus", "a"], "--gpus 'a' is not a list"),
])
def test_slurm_bad_input_is_one_line_naming_the_option(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       args: list[str], says: str) -> None:
    code, out, err = cli(capsys, "slurm", "-m", MATRIX, "--out", str(tmp_path), "--dry-run", *args)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and says in err, err


# Issue 37: a shard may run on a MIG slice, named by its profile or by the slice's GPU key.
@pytest.mark.parametrize("mig", ["3g.71gb", "h200-sm90-mig3g-71gb"])
def test_slurm_mig_asks_each_shard_task_for_one_slice_of_that_profile(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path, mig: str) -> None:
    code, out, err = cli(capsys, "slurm", "-m", MATRIX, "--shards", "2", "--out", str(tmp_path / "run"), "--mig", mig,
                         "--dry-run", "--", "--expect-gpu", "h200-sm90-mig3g-71gb")
    assert code == 0, err
    shards, merge = out.split("# " + str(tmp_path / "run" / "slurm" / "merge.sbatch"))
    assert "#SBATCH --gres=gpu:3g.71gb:1" in shards.splitlines() and "--gres" not in merge
    assert "--expect-gpu h200-sm90-mig3g-71gb" in shards  # a slice key is a GPU key the run expects


@pytest.mark.parametrize(("args", "says"), [
    (["--mig", "3g.71gb", "--gres", "gpu:1"], "--mig 3g.71gb: give --gres or --mig, not both"),
    (["--mig", "3g"], "--mig '3g': not a MIG profile like 3g.71gb"),
    (["--mig", "1g.18gb+me"], "--mig '1g.18gb+me': not a MIG profile"),  # the scheduler files it under 1g.18gb
    (["--mig", "h200-sm90"], "--mig 'h200-sm90': not a MIG profile"),  # a whole GPU's key
    (["--", "--expect-gpu", "h200-sm90-mig3g.71gb"], "--expect-gpu: 'h200-sm90-mig3g.71gb' is not a GPU key"),
])
def test_slurm_bad_mig_input_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str],
                                         says: str) -> None:
    code, out, err = cli(capsys, "slurm", "-m", MATRIX, "--shards", "2", "--out", str(tmp_path), "--dry-run", *args)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and says in err, err


def test_a_broken_matrix_fails_before_anything_is_submitted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = tmp_path / "m.toml"
    broken.write_text("name = 'x'\nbogus = 1\n")
    code, _, err = cli(capsys, "slurm", "-m", str(broken), "--shards", "1", "--out", str(tmp_path / "run"))
    assert code == 2 and str(broken) in err


def fake_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\n{body}\n")
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "calls"


def test_submit_chains_the_merge_after_any_end_of_the_array(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_sbatch(tmp_path, monkeypatch, 'case "$*" in *afterany*) echo "78;c";; *) echo 77;; esac')
    out = tmp_path / "run"
    code, printed, _ = cli(capsys, "slurm", "-m", MATRIX, "--shards", "2", "--out", str(out))
    assert code == 0
    assert printed.splitlines()[0].startswith("shards: job 77 (array 1-2)")
    assert printed.splitlines()[1].startswith("merge: job 78 (after job 77)")
    assert calls.read_text().splitlines() == [
        f"--parsable {out}/slurm/shards.sbatch", f"--parsable --dependency=afterany:77 {out}/slurm/merge.sbatch"]
    assert "#SBATCH --array=1-2" in (out / "slurm" / "shards.sbatch").read_text()


def test_sbatch_failing_is_an_infrastructure_failure(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fake_sbatch(tmp_path, monkeypatch, 'echo "sbatch: error: invalid partition specified: gpu" >&2; exit 1')
    code, _, err = cli(capsys, "slurm", "-m", MATRIX, "--shards", "2", "--out", str(tmp_path / "run"))
    assert code == 4 and "exited 1: sbatch: error: invalid partition specified: gpu" in err


def test_an_out_that_cannot_be_written_is_bad_input_and_nothing_is_submitted(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen (a review): `--out /proc/foo` exited 4, as if Slurm had failed; an --out the user chose
    that cannot be written is bad input (exit 2), as an unwritable -o is."""
    calls = fake_sbatch(tmp_path, monkeypatch, "echo 77")
    (tmp_path / "file").write_text("")
    code, _, err = cli(capsys, "slurm", "-m", MATRIX, "--shards", "2", "--out", str(tmp_path / "file" / "run"))
    assert code == 2 and err == (f"convmatrix: --out {tmp_path}/file/run: cannot write {tmp_path}/file/run/slurm: "
                                 "Not a directory\n")
    assert not calls.exists()


def test_no_sbatch_is_an_infrastructure_failure(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = cli(capsys, "slurm", "-m", MATRIX, "--shards", "2", "--out", str(tmp_path / "run"))
    assert code == 4 and "sbatch: not found on PATH" in err


def k8s_docs(capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, Any]]:
    code, out, err = cli(capsys, "k8s", "-m", MATRIX, "--shards", "3", "--image", "registry.local/convmatrix:1",
                         "--claim", "convmatrix-results", "--name", "nightly", *extra)
    assert code == 0, err
    return list(yaml.safe_load_all(out))


def test_k8s_prints_an_indexed_job_and_a_merge_job_that_pass_the_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    docs = k8s_docs(capsys, "--", "--", "-k", "conv1d")
    assert [d["metadata"]["name"] for d in docs] == ["nightly-shards", "nightly-merge"]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises on any schema error


def test_k8s_shards_one_per_completion_index_with_a_gpu_and_results_on_the_claim(
        capsys: pytest.CaptureFixture[str]) -> None:
    shards, merge = k8s_docs(capsys, "--out", "/results/runs/n1", "--gpus", "2")
    spec = shards["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    assert pod["volumes"][0] == {"name": "results", "persistentVolumeClaim": {"claimName": "convmatrix-results"}}
    assert container["volumeMounts"][0] == {"name": "results", "mountPath": "/results"}
    script = container["command"][2]
    assert 'convmatrix run -m matrix/nightly.toml --out /results/runs/n1 --shard "$shard/3"' in script
    assert "shard=$((JOB_COMPLETION_INDEX + 1))" in script
    wait, = merge["spec"]["template"]["spec"]["initContainers"]
    assert 'while [ "$i" -le 3 ]' in wait["command"][2]  # every shard's marker, up to the merge deadline
    assert "exec convmatrix report /results/runs/n1 --format text" in merge["spec"]["template"]["spec"]["containers"][0]["command"][2]


@pytest.mark.parametrize("mig", ["3g.71gb", "h200-sm90-mig3g-71gb"])
def test_k8s_mig_asks_for_the_device_plugins_mig_resource_instead_of_a_gpu(capsys: pytest.CaptureFixture[str],
                                                                           mig: str) -> None:
    shards, merge = k8s_docs(capsys, "--mig", mig, "--", "--expect-gpu", "h200-sm90-mig3g-71gb")
    (container,) = shards["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/mig-3g.71gb": 1}
    assert "--expect-gpu h200-sm90-mig3g-71gb" in container["command"][2]
    for doc in (shards, merge):
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


@pytest.mark.parametrize(("node", "host"), [("gpu-node-7", "gpu-node-7"), ("ip-10-0-1-5.ec2.internal", "ip-10-0-1-5"),
                                            ("n" * 200, "n" * 63)])
def test_k8s_shards_are_keyed_by_the_node_they_ran_on(capsys: pytest.CaptureFixture[str], node: str, host: str) -> None:
    """A pod's hostname is its own name: the shard takes its node's (downward API), cut to a host name."""
    import subprocess

    shards, _ = k8s_docs(capsys)
    (container,) = shards["spec"]["template"]["spec"]["containers"]
    assert container["env"][0] == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    (line,) = [x for x in container["command"][2].splitlines() if "CONVMATRIX_HOST" in x]
    done = subprocess.run(["/bin/sh", "-c", f'{line}; printf %s "$CONVMATRIX_HOST"'], env={"NODE_NAME": node},
                          capture_output=True, text=True, check=True)
    assert done.stdout == host and options.host_name(done.stdout) == host  # a host name the run accepts


def test_k8s_yaml_round_trips_to_the_manifests() -> None:
    job = k8s.K8sJob(plan=PLAN, name="x", image="i", claim="c", namespace="gpu-team")
    assert list(yaml.safe_load_all(k8s.to_yaml(k8s.manifests(job)))) == k8s.manifests(job)


@pytest.mark.parametrize(("args", "says"), [
    (["--name", "Not_A_Name"], "--name 'Not_A_Name'"),
    (["--out", "/elsewhere/run"], "--out /elsewhere/run: must lie under the claim's mount /results"),
    (["--gpus", "-1"], "--gpus -1"),
    (["--mig", "mig-3g.71gb"], "--mig 'mig-3g.71gb': not a MIG profile like 3g.71gb"),
    # Issue 32, item 5: the same parser as slurm's and `convmatrix run`'s decides.
    (["--", "--ou", "/results/x", "--sha", "1/1"], "--ou (argparse reads it as --out) is set by the engine"),
    (["--", "--", "--cell-i", "x"], "--cell-i (an abbreviation of --cell-id) is set by convmatrix"),
])
def test_k8s_bad_input(capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    code, out, err = cli(capsys, "k8s", "-m", MATRIX, "--shards", "2", "--image", "i", "--claim", "c", *args)
    assert code == 2 and out == "" and says in err, err


def pods(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [doc["spec"]["template"]["spec"] for doc in k8s_docs(capsys)]


# Issue 21, item 1: the manifests meet the Pod Security Standards' `restricted` profile
# (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted), rule by rule;
# the schema validator checks none of these.
def test_restricted_profile_running_as_non_root(capsys: pytest.CaptureFixture[str]) -> None:
    for pod in pods(capsys):
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            assert container["securityContext"].get("runAsUser", 1) != 0


def test_restricted_profile_no_privilege_escalation(capsys: pytest.CaptureFixture[str]) -> None:
    for pod in pods(capsys):
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert not container["securityContext"].get("privileged", False)


def test_restricted_profile_capabilities_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    for pod in pods(capsys):
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_restricted_profile_seccomp(capsys: pytest.CaptureFixture[str]) -> None:
    for pod in pods(capsys):
        assert pod["securityContext"]["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost")


def test_restricted_profile_volume_types_and_a_read_only_root(capsys: pytest.CaptureFixture[str]) -> None:
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
               "secret"}
    for pod in pods(capsys):
        for volume in pod["volumes"]:
            assert set(volume) - {"name"} <= allowed
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")

