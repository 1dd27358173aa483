"""The container lane through Podman for real (issue 26, item 1): the same cell, image recipe and
isolation as through Docker, and the same report. Tested here as root (rootful Podman 4.3.1 from
Debian 12, runc); GPUs are not (no GPU here): their CDI arguments are unit-tested in
tests/unit/run/lanes/test_containers.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from containerkit import HOSTILE_STEP, assert_no_root_shell, inspect_cell_container, readable_copy
from convmatrix.run.lanes import base_image, containers
from testkit import ran

pytestmark = pytest.mark.usefixtures("docker_engine")
CELL = "container-torch2.13.0-cpu-cudnnbundled-py3.11"
MATRIX = """
name = "one-container-cell"
wheelhouse = "{wheelhouse}"
[axes]
lane = ["container"]
torch = ["2.13.0"]
cuda = ["cpu"]
cudnn = ["bundled"]
python = ["3.11"]
[container]
base = "convmatrix/base:bookworm"
engine = "podman"
"""


@pytest.fixture(scope="module")
def podman_base() -> str:
    """convmatrix/base:bookworm in Podman's own image store: copied from Docker's (built from Debian
    packages by base_image.ensure) rather than debootstrapped twice."""
    if shutil.which("podman") is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have podman (.ci/run installs it)")
        pytest.skip("no podman on this machine (apt-get install podman)")
    docker_id = base_image.ensure()
    podman = base_image.engine_cli("podman")
    held = base_image.image_id(podman, base_image.TAG) or ""
    if held.removeprefix("sha256:") != docker_id.removeprefix("sha256:"):  # missing, or an older one
        # A context: the pipe is closed once podman read it (CI on a fresh machine, whose Podman
        # store had no base yet, failed on the ResourceWarning of a pipe left to the collector).
        with subprocess.Popen([base_image.default_docker(), "save", base_image.TAG], stdout=subprocess.PIPE) as saved:
            loaded = subprocess.run([podman, "load"], stdin=saved.stdout, capture_output=True, text=True, check=False)
        assert saved.returncode == 0 and loaded.returncode == 0, loaded.stderr
    found = base_image.image_id(podman, base_image.TAG)
    assert found and docker_id.removeprefix("sha256:") == found.removeprefix("sha256:")
    host_refuses_containers(podman)
    return base_image.TAG


# crun's refusal of a host whose cgroup v2 hierarchy has controllers beside the v1 ones (a
# "hybrid" layout; crun supports v1 alone or v2 alone): a fact of the machine's kernel mounts,
# which no project can change, seen on a runner where every Podman container failed to start.
HYBRID = "cgroups in hybrid mode not supported"


def host_refuses_containers(podman: str) -> None:
    """Skip, naming the cause, where Podman's runtime refuses every container on this host's
    cgroup layout (HYBRID) -- the one refusal that is the host's, not the project's; any other
    failure to start a container is left to the tests, which then fail."""
    probe = subprocess.run([podman, "run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024",
                            "--ulimit", "nproc=1024:1024", base_image.TAG, "true"],
                           capture_output=True, text=True, timeout=300, check=False)
    if probe.returncode != 0 and HYBRID in probe.stderr:
        pytest.skip(f"Podman cannot start any container on this host: {probe.stderr.strip()[-200:]}")


def convmatrix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convmatrix", *args], capture_output=True, text=True,
                          timeout=3600, check=False)


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path, podman_base: str) -> dict[str, Path]:
    """The same matrix run through Podman (its [container].engine) and through Docker (--engine)."""
    tmp = tmp_path_factory.mktemp("engines")
    matrix = tmp / "m.toml"
    matrix.write_text(MATRIX.format(wheelhouse=wheelhouse))
    outs = {}
    for engine in ("podman", "docker"):
        out = tmp / engine
        done = convmatrix("run", "-m", str(matrix), "--out", str(out), *(["--engine", "docker"] if engine == "docker" else []))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outs[engine] = out
    return outs


def test_a_container_cell_runs_through_podman_to_the_same_report_as_through_docker(both: dict[str, Path]) -> None:
    reports = {}
    for engine, out in both.items():
        meta = json.loads((ran(out, CELL) / "cell.json").read_text())
        assert meta["engine"].startswith(f"{engine} ") and meta["image_id"].startswith("sha256:")
        assert meta["exit_code"] == 0
        assert (ran(out, CELL) / "log.txt").read_text().startswith(f"$ {engine} run --rm sha256:")
        report = convmatrix("report", str(out), "--control", CELL, "--format", "json")
        assert report.returncode == 0, report.stderr
        reports[engine] = json.loads(report.stdout)
    statuses = {engine: {(c["case"], c["outcome"]) for c in r["cases"]} for engine, r in reports.items()}
    assert statuses["podman"] == statuses["docker"] and len(statuses["podman"]) > 200
    cells = {engine: [(c["cell"], c["verdict"], c["observed"]["torch"]) for c in r["cells"]] for engine, r in reports.items()}
    assert cells["podman"] == cells["docker"] == [(CELL, "control", "2.13.0+cpu")]
    # Same suite, same stack: the results lines differ only in what is timing or placement.
    lines = {engine: {json.loads(x)["case"]: json.loads(x)["status"]
                      for x in (ran(out, CELL) / "results.jsonl").read_text().splitlines()} for engine, out in both.items()}
    assert lines["podman"] == lines["docker"]


def test_podman_leaves_no_container_behind(both: dict[str, Path]) -> None:
    listed = subprocess.run([base_image.engine_cli("podman"), "ps", "-a", "-q"], capture_output=True, text=True,
                            check=True)
    assert listed.stdout.split() == []


def test_a_podman_cell_container_cannot_plant_a_root_shell(podman_base: str, tmp_path: Path) -> None:
    """The same hostile suite step as under Docker (test_container_lane.py), through Podman."""
    assert_no_root_shell("podman", podman_base, tmp_path)


def test_every_limit_applies_under_podman(podman_base: str, tmp_path: Path) -> None:
    """podman inspect of a created cell container: what run_kwargs asks for is what Podman set."""
    info = inspect_cell_container("podman", podman_base, tmp_path)
    host = info["HostConfig"]
    assert host["CapDrop"] and "no-new-privileges" in " ".join(host["SecurityOpt"])
    assert host["ReadonlyRootfs"] is True and host["PidsLimit"] == containers.PIDS_LIMIT
    assert host["NetworkMode"] == "none" and host["Privileged"] is False
    assert info["Config"]["User"] == ("65534:65534" if os.getuid() == 0 else "0:0")  # rootless: the user
    limits = {u["Name"]: u["Hard"] for u in host["Ulimits"]}
    asked = {u["Name"]: u["Hard"] for u in containers.podman_ulimits()}
    assert limits["RLIMIT_NPROC"] == asked["nproc"] and limits["RLIMIT_NOFILE"] == asked["nofile"]


def test_gc_weighs_podmans_cell_images(both: dict[str, Path], tmp_path: Path) -> None:
    """`convmatrix gc --engine podman` looks in Podman's store (its own, not Docker's)."""
    done = subprocess.run([sys.executable, "-m", "convmatrix", "gc", "--dry-run", "--keep-days", "0",
                           "--engine", "podman"], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "CONVMATRIX_HOME": str(tmp_path / "home")})
    assert done.returncode == 0, done.stderr
    meta = json.loads((ran(both["podman"], CELL) / "cell.json").read_text())
    assert f"would remove image localhost/{meta['image']} " in done.stdout, done.stdout


ROOTLESS_USER = "cmrootless"
ROOTLESS_STEP = """
import json, sys
from pathlib import Path
from convmatrix.run.lanes import container, containers
out = Path(sys.argv[1]) / "run" / "c@cpu@h"
out.mkdir(parents=True)
(Path(sys.argv[1]) / "suite").mkdir()
with container.scratch(out) as place:
    spec = containers.RunSpec(image="convmatrix/base:bookworm", command=["sh", "-c", sys.argv[2]], results_dir=place,
                              suite_dir=Path(sys.argv[1]) / "suite", gpu=None, environment={})
    with containers.client("podman") as engine:
        kind, root = str(containers.kind_of(engine)), containers.engine_root(engine)
        outcome = containers.run(engine, spec, out / "log.txt")
print(json.dumps({"kind": kind, "root": str(root), "exit": outcome.exit_code, "log": (out / "log.txt").read_text(),
                  "files": sorted(p.name for p in out.iterdir()),
                  "owner": (out / "results.jsonl").stat().st_uid if (out / "results.jsonl").exists() else None}))
"""


def as_user(command: str, home: Path, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = f"HOME={home} XDG_RUNTIME_DIR={home}/run"
    return subprocess.run(["runuser", "-u", ROOTLESS_USER, "--", "sh", "-c", f"cd {home} && {env} {command}"],
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def rootless(podman_base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user of this machine with Podman rootless: its subordinate ids (useradd adds them), its own
    image store holding the base, and a venv with the docker SDK to run the harness's code with."""
    if os.getuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("making a user for rootless Podman needs root and runuser")
    if Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
        pytest.skip("user namespaces are off on this machine: no rootless Podman")
    subprocess.run(["useradd", "-m", ROOTLESS_USER], capture_output=True, check=False)  # exists: fine
    home = Path(subprocess.run(["getent", "passwd", ROOTLESS_USER], capture_output=True, text=True,
                               check=True).stdout.split(":")[5])
    assert ROOTLESS_USER in Path("/etc/subuid").read_text(), "useradd gave the user no subordinate uids"
    (home / "run").mkdir(mode=0o700, exist_ok=True)
    shutil.chown(home / "run", ROOTLESS_USER, ROOTLESS_USER)
    if not (home / "venv" / "bin" / "python").exists():
        made = as_user("/usr/bin/python3 -m venv venv && venv/bin/pip install -q docker", home)
        assert made.returncode == 0, made.stderr[-2000:]
    tar = home / "base.tar"
    subprocess.run([base_image.default_docker(), "save", "-o", str(tar), base_image.TAG], check=True, timeout=600)
    tar.chmod(0o644)
    loaded = as_user(f"podman load -q -i {tar}", home)
    tar.unlink()
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    return home


def test_rootless_podman_runs_a_cell_as_the_user_with_no_capability(rootless: Path) -> None:
    """Checked on this machine: user namespaces are on, so Podman runs rootless for an ordinary user.
    The harness's own client starts that user's service on its socket, the engine keeps its images in
    the user's store, and the cell's files come back owned by the user. The user runs a readable copy
    of the harness in its home: the checkout may be in a folder it cannot read."""
    work = rootless / "work"
    shutil.rmtree(work, ignore_errors=True)
    (rootless / "step.py").write_text(ROOTLESS_STEP)
    src = readable_copy(Path(containers.__file__).parents[3].parent, rootless, ROOTLESS_USER)
    done = as_user(f"PYTHONPATH={src} venv/bin/python step.py {work} {shlex.quote(HOSTILE_STEP)}", rootless)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    uid = int(subprocess.run(["id", "-u", ROOTLESS_USER], capture_output=True, text=True, check=True).stdout)
    assert found["kind"].startswith("podman") and found["root"].startswith(str(rootless))
    assert found["exit"] == 0 and "done" in found["log"], found["log"]
    assert "\n0\n" in found["log"] and "CapEff:\t0000000000000000" in found["log"] and "NoNewPrivs:\t1" in found["log"]
    assert "rootfs read-only" in found["log"]
    assert found["files"] == ["log.txt", "results.jsonl"] and found["owner"] == uid
